"""What a person sees: a real `mlflow server` (SQLite store), a real sweep logged to it, and the MLflow
UI rendered by headless Chromium (selenium + chromedriver): the compare page shows the child runs and
the swept values, and the "Evaluation runs" page shows one input's scores and reasons from two runs
side by side. Screenshots go to test-artifacts/ for a person to look at."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalframe.paths import SAMPLE_DATASET as SAMPLE
from tests.conftest import fake_model, run_cli, sweep_runs
from tests.e2e.browser import ARTIFACTS, click, close_assistant, wait_for_text
from tests.mlflow_server import mlflow_server as mlflow_server_on
from tests.testserver import FakeLLMServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 with a SQLite store and local artifacts; always killed after."""
    root = tmp_path_factory.mktemp("mlflow-server")
    with mlflow_server_on(f"sqlite:///{root / 'mlflow.db'}", root) as url:
        yield url


def test_a_sweep_as_a_person_sees_it_in_the_mlflow_ui(
    judge_server: FakeLLMServer, mlflow_server: str, browser: Any, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    # semantic_threshold changes the score of partly matching answers: the two runs disagree on items.
    # The whole sample: three of its rows ask the same question, two others another one.
    result = run_cli(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "penalties.semantic_threshold=0.6,0.9",
            f"tracking.uri={mlflow_server}",
            "tracking.experiment=ui",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr
    assert "View run" not in result.stdout  # MLflow's own two lines per run: the run prints one of its own

    client = MlflowClient(mlflow_server)
    parent, children = sweep_runs(mlflow_server, "ui")
    children.sort(key=lambda r: float(r.data.params["penalties.semantic_threshold"]))
    assert [c.data.params["penalties.semantic_threshold"] for c in children] == ["0.6", "0.9"]

    # The run's report is an artifact, with the items in it; the sweep's page is on the parent run.
    page = Path(client.download_artifacts(children[0].info.run_id, "report.html", str(tmp_path / "dl")))
    html = page.read_text()
    assert "What is the capital of France?" in html and "<h2>Items (28)</h2>" in html
    assert "sweep.html" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "plots")] == [
        "plots/objective_vs_penalties.semantic_threshold.png"
    ]

    ARTIFACTS.mkdir(exist_ok=True)
    ids = [c.info.run_id for c in children]
    close_assistant(browser, mlflow_server)
    experiment_id = parent.info.experiment_id

    # 1. The compare page: both child runs, the swept parameter and its two values.
    browser.get(
        f"{mlflow_server}/#/compare-runs?runs={json.dumps(ids)}&experiments={json.dumps([experiment_id])}"
    )
    text = wait_for_text(browser, "Comparing 2 Runs", *ids, children[0].info.run_name)
    lines = text.splitlines()
    assert any(line.split() == ["penalties.semantic_threshold", "0.6", "0.9"] for line in lines), text[:3000]
    browser.save_screenshot(str(ARTIFACTS / "compare.png"))

    # 2. Per item: "Evaluation runs", one run compared to another, one row per input with both scores.
    base = f"{mlflow_server}/#/experiments/{experiment_id}/evaluation-runs"
    browser.get(f"{base}?selectedRunUuid={ids[0]}&compareToRunUuid={ids[1]}")
    wait_for_text(browser, "Comparing", "28 of 28")
    browser.save_screenshot(str(ARTIFACTS / "evaluation_runs.png"))
    # Every row is paired with the same row of the other run, also the rows that ask the same question
    # (each trace's request names its row id): scrolled through, no input shows `null` for a side.
    questions = {json.loads(line)["input"] for line in SAMPLE.read_text().splitlines()}
    seen: set[str] = set()
    for _ in range(60):
        text = str(browser.find_element(By.TAG_NAME, "body").text)
        assert "null" not in text, text[:3000]
        seen |= {q for q in questions if q[:40] in text}
        if seen == questions:
            break
        browser.execute_script(  # the table renders the rows in view: scroll its pane down
            "document.querySelectorAll('*').forEach(e => {"
            " if (e.scrollHeight > e.clientHeight + 20 && getComputedStyle(e).overflowY !== 'visible')"
            " e.scrollTop += 250; })"
        )
        time.sleep(0.5)
    assert seen == questions, questions - seen

    # 3. One input, the two runs' traces side by side: scores and reasons from the assessments.
    question = "At what temperature does water boil at sea level?"
    [trace] = [
        t
        for t in client.search_traces(locations=[experiment_id], run_id=ids[0], max_results=100)
        if json.loads(t.info.request_preview)["input"] == question
    ]
    reasons = []
    for run_id in ids:
        [other] = [
            t
            for t in client.search_traces(locations=[experiment_id], run_id=run_id, max_results=100)
            if json.loads(t.info.request_preview)["input"] == question
        ]
        [feedback] = [a for a in other.info.assessments if a.name == "answer_similarity"]
        reasons.append(feedback.rationale)
    assert reasons[0] != reasons[1]  # the two thresholds score this partial answer differently
    browser.get(
        f"{base}?selectedRunUuid={ids[0]}&compareToRunUuid={ids[1]}&selectedEvaluationId={trace.info.trace_id}"
    )
    wait_for_text(browser, "Comparing 2 traces", question)
    click(
        browser, browser.find_element(By.XPATH, "//*[@role='tab' and normalize-space()='Details & Timeline']")
    )
    wait_for_text(browser, "Trace breakdown")
    for tab in browser.find_elements(By.XPATH, "//*[@role='tab' and normalize-space()='Assessments']"):
        click(browser, tab)
    wait_for_text(browser, *reasons)
    browser.save_screenshot(str(ARTIFACTS / "per_item.png"))
