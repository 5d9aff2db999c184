"""The README's "Your traces", as a person sees it: the README's traced app (rag_app.py, saved and run as
written) fills a SQLite store, a real `mlflow server` serves it, the README's command judges the app's
traces (the judge: the test server), and headless Chromium opens MLflow's trace view of one trace: the
verdicts evalframe wrote back (scorer, value, reason) are on the page, and the run's Traces tab lists
the traces it judged. The trace view's screenshot, test-artifacts/trace_view.png, is the README's picture
(a copy: evalframe/resources/trace-view.png)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fake_model, run_cli
from tests.e2e.browser import ARTIFACTS, click, close_assistant, wait_for_text
from tests.mlflow_server import mlflow_server
from tests.test_readme import README, _files, evalframe_args, shell_lines
from tests.testserver import FakeLLMServer

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"


def _readme_command() -> list[str]:
    """The README's command that judges rag_app.py's traces, as typed (with a key: not its no-key line)."""
    [args] = [
        args
        for _, line in shell_lines()
        if (args := evalframe_args(line)) and "dataset.experiment=my-rag-app" in args and "model=gpt" in args
    ]
    return args


def test_the_verdicts_in_mlflows_trace_view(
    judge_server: FakeLLMServer, browser: Any, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    [(script, code)] = _files("rag_app.py")
    (tmp_path / script).write_text(code)
    app = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert app.returncode == 0, app.stderr

    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path) as url:
        # The README's command, the judge pointed at the test server, the run logged to the server.
        args = [*_readme_command(), *fake_model(judge_server)[1:], f"tracking.uri={url}"]
        result = run_cli(args, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-x"})
        assert result.returncode in (0, 1), result.stdout + result.stderr

        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("my-rag-app")
        assert experiment is not None
        traces = client.search_traces(locations=[experiment.experiment_id], max_results=10)
        assert len(traces) == 3
        [trace] = [t for t in traces if QUESTION in t.info.request_preview]
        verdicts = {a.name: a for a in trace.info.assessments if a.feedback is not None}
        assert set(verdicts) == {"faithfulness", "exact_match"}, trace.info.assessments
        [run] = client.search_runs([experiment.experiment_id])

        ARTIFACTS.mkdir(exist_ok=True)
        close_assistant(browser, url)
        base = f"{url}/#/experiments/{experiment.experiment_id}"
        browser.get(f"{base}/traces?selectedEvaluationId={trace.info.trace_id}")
        wait_for_text(browser, QUESTION, "Assess")
        # The assessments open from the trace's "Assess" button (it counts 2 verdicts and 1 expectation).
        click(browser, browser.find_element(By.XPATH, "//button[starts-with(normalize-space(), 'Assess')]"))
        wait_for_text(browser, "Feedback (2)", "faithfulness", "exact_match")
        # Each verdict shows its value; its chevron unfolds the source, value and rationale.
        unfold = "button[data-component-id='shared.model-trace-explorer.toggle-assessment-expanded']"
        for n in range(len(verdicts)):
            click(browser, browser.find_elements(By.CSS_SELECTOR, unfold)[n])  # found again: the pane moved
        values = {name: float(v.feedback.value) for name, v in verdicts.items() if v.feedback}
        shown = [f"{values[name]:g}\nRationale\n{v.rationale}" for name, v in verdicts.items()]
        wait_for_text(browser, *shown, "openai/gpt-4o-mini")  # the judge, as the faithfulness source
        browser.save_screenshot(str(ARTIFACTS / "trace_view.png"))

        # The run's Traces tab: the three traces it judged, linked to it.
        assert len(client.search_traces(locations=[experiment.experiment_id], run_id=run.info.run_id)) == 3
        browser.get(f"{base}/runs/{run.info.run_id}/traces")
        wait_for_text(browser, QUESTION, "What is water made of?", "At what temperature does water boil?")
        browser.save_screenshot(str(ARTIFACTS / "run_traces.png"))
    assert "trace-view.png" in README.read_text()
