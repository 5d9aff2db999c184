"""The HTML/PNG report of a run and of a sweep, and what log_run puts in MLflow for people to see."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evalframe.report import html as html_report, sweep_html
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.run import pipeline
from evalframe.sweep.callback import objective_of, read_jobs, swept_keys
from tests.conftest import compose, fake_model
from tests.scripted import ScriptedModel

PNG = b"\x89PNG\r\n\x1a\n"
HOSTILE = "<script>alert('x')</script>"


def _item(i: int, score: float, output: str = "Paris", error: str | None = None) -> ItemResult:
    result = (
        ScoreResult.unscored(error) if error else ScoreResult(score=score, reason=f"reason {i}: {output}")
    )
    return ItemResult(
        id=f"q{i}",
        input=f"question {i}",
        ground_truth="Paris",
        output=output,
        scores={"answer_similarity": result},
    )


def _result(n: int = 4) -> RunResult:
    items = [_item(i, i / max(n - 1, 1)) for i in range(n)]
    items[1] = _item(1, 0.0, output=HOSTILE)
    items[2] = _item(2, math.nan, error="judge reply invalid after 3 attempts")
    return RunResult(items=items, scorers=["answer_similarity"])


def _rows(html: str) -> int:
    items_table = html.split("<h2>Items", 1)[1]
    return items_table.count("<tr>") - 1  # minus the header row


def test_the_run_report_has_summary_histogram_and_every_item() -> None:
    report = html_report.run_report(_result(), "my run")
    html = report.html
    assert "<h2>Summary</h2>" in html and "answer_similarity" in html
    assert _rows(html) == 4
    for i in range(4):
        assert f"question {i}" in html
    # Unscored is shown as such, with its error, never as a 0.
    assert '<td class="num unscored">unscored</td>' in html
    assert "judge reply invalid after 3 attempts" in html
    # One histogram per scorer, as a PNG file and embedded in the page.
    assert list(report.plots) == ["answer_similarity_histogram.png"]
    png = report.plots["answer_similarity_histogram.png"]
    assert png.startswith(PNG)
    assert html.count('src="data:image/png;base64,') == 1


def test_dataset_text_is_escaped_and_the_page_needs_no_network() -> None:
    html = html_report.run_report(_result(), f"run {HOSTILE}").html
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    # Self-contained: no external stylesheet, script, font or image.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html


def test_long_texts_fold_and_big_runs_cap_the_table_with_a_note() -> None:
    long = "word " * 200
    result = RunResult(
        items=[_item(i, 0.5, output=long) for i in range(7)],
        scorers=["answer_similarity"],
    )
    html = html_report.run_report(result, "big", max_items=3).html
    assert _rows(html) == 3
    assert "The table shows the first 3 of 7 items" in html
    assert "results.jsonl" in html and "items.json" in html
    assert f"<summary>all {len(long)} characters</summary>" in html
    # The summary still covers all 7.
    assert re.search(r'<td class="num">7</td>', html)


def test_agreement_with_people_is_in_the_summary() -> None:
    result = _result()
    result.agreement = {"answer_similarity": {"n": 3.0, "spearman": 0.75, "kappa": 0.5}}
    result.items[0].human = 0.5
    html = html_report.run_report(result, "with people").html
    assert "human spearman" in html and "0.750" in html
    assert "<th>human</th>" in html and '<td class="num">0.50</td>' in html
    assert "<th>human</th>" not in html_report.run_report(_result(), "no people").html


def test_write_run_report_writes_the_page_and_the_pngs(tmp_path: Path) -> None:
    written = html_report.write_run_report(_result(), tmp_path, "run")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "plots/answer_similarity_histogram.png",
        "report.html",
    ]
    assert (tmp_path / "plots" / "answer_similarity_histogram.png").read_bytes().startswith(PNG)


def _job(
    sweep: Path,
    name: str,
    overrides: list[str],
    value: float | None,
    direction: str = "maximize",
    interval: tuple[float, float] | None = None,
) -> None:
    """A finished job's run.json, as the journal writes it."""
    (sweep / name).mkdir(parents=True)
    objective = {"metric": "answer_similarity/mean", "value": value, "direction": direction}
    if interval:
        objective.update(ci_low=interval[0], ci_high=interval[1])
    manifest = {"status": "finished", "overrides": overrides, "means": {"answer_similarity": value}}
    (sweep / name / "run.json").write_text(json.dumps({**manifest, "objective": objective}))


def _sweep_report(sweep: Path) -> list[Path]:
    jobs = read_jobs(sweep)
    objective = objective_of(OmegaConf.create({}), jobs)
    return sweep_html.write_sweep_report(sweep, jobs, objective, swept_keys(jobs, []))


def test_the_sweep_report_charts_the_objective_against_each_swept_weight(tmp_path: Path) -> None:
    base = ["scorer=answer_similarity", "model=gpt"]
    _job(tmp_path, "0", [*base, "penalties.missing=0.05", "penalties=strict"], 0.8)
    _job(tmp_path, "1", [*base, "penalties.missing=0.3", "penalties=strict"], 0.6)
    _job(tmp_path, "2", [*base, "penalties.missing=0.05", "penalties=lenient"], 0.9)
    _job(tmp_path, "3", [*base, "penalties.missing=0.3", "penalties=lenient"], None)
    written = _sweep_report(tmp_path)
    names = sorted(p.relative_to(tmp_path).as_posix() for p in written)
    # Constant overrides (scorer, model) are not swept; a categorical value gets its own chart too.
    assert names == [
        "plots/objective_vs_penalties.missing.png",
        "plots/objective_vs_penalties.png",
        "sweep.html",
    ]
    html = (tmp_path / "sweep.html").read_text()
    assert "answer_similarity/mean (maximize)" in html
    assert html.count('src="data:image/png;base64,') == 2
    # Best first; the job without a value last.
    order = re.findall(r"<tr><td>(\d)</td>", html)
    assert order == ["2", "0", "1", "3"]


def test_the_sweep_report_ranks_by_the_objective_direction(tmp_path: Path) -> None:
    _job(tmp_path, "0", ["penalties.missing=0.05"], 0.4, "minimize")
    _job(tmp_path, "1", ["penalties.missing=0.3"], 0.1, "minimize")
    _sweep_report(tmp_path)
    html = (tmp_path / "sweep.html").read_text()
    assert "answer_similarity/mean (minimize)" in html
    assert re.findall(r"<tr><td>(\d)</td>", html) == ["1", "0"]  # lower is better


def test_the_sweep_report_shows_each_jobs_interval_and_which_are_like_the_best(tmp_path: Path) -> None:
    _job(tmp_path, "0", ["penalties.missing=0.05"], 0.70, interval=(0.60, 0.80))
    _job(tmp_path, "1", ["penalties.missing=0.15"], 0.62, interval=(0.55, 0.69))  # overlaps the best's
    _job(tmp_path, "2", ["penalties.missing=0.3"], 0.40, interval=(0.30, 0.50))  # clearly below
    _job(tmp_path, "3", ["penalties.missing=0.6"], 0.20)  # no interval: never "like the best"
    _sweep_report(tmp_path)
    html = (tmp_path / "sweep.html").read_text()
    rows = re.findall(r"<tr><td>(\d)</td>.*?</tr>", html)
    assert rows == ["0", "1", "2", "3"]
    cells = {
        m[0]: m[1:]
        for m in re.findall(
            r'<tr><td>(\d)</td><td>[^<]*</td><td class="num">[^<]*</td>'
            r'<td class="num">([^<]*)</td><td>([^<]*)</td>',
            html,
        )
    }
    assert cells == {
        "0": ("[0.600, 0.800]", "best"),
        "1": ("[0.550, 0.690]", "≈ best"),
        "2": ("[0.300, 0.500]", ""),
        "3": ("–", ""),
    }


def test_a_sweep_without_finished_jobs_writes_nothing(tmp_path: Path) -> None:
    assert _sweep_report(tmp_path) == []
    assert not (tmp_path / "sweep.html").exists()


@pytest.mark.slow
def test_log_run_logs_the_report_and_one_trace_per_item_with_assessments(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from evalframe.tracking import log as tracking

    results = tmp_path / "run" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("{}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = {
        "scorers": {"answer_similarity": {"model": {"name": "openai/gpt-4o-mini"}}},
        "tracking": {"traces": True, "max_traces": 3},
    }
    notes: list[str] = []
    experiment_id, run_id = tracking.log_run(
        _result(5),
        config,
        uri=uri,
        experiment="report",
        run_name="r",
        tags={},
        results_file=results,
        notes=notes,
    )
    client = MlflowClient(uri)
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"report.html", "plots", "items.json"} <= artifacts
    assert [a.path for a in client.list_artifacts(run_id, "plots")] == [
        "plots/answer_similarity_histogram.png"
    ]
    page = Path(client.download_artifacts(run_id, "report.html", str(tmp_path / "dl"))).read_text()
    assert "question 4" in page  # the page of all 5 items

    traces = client.search_traces(locations=[experiment_id], run_id=run_id, max_results=50)
    assert len(traces) == 3  # tracking.max_traces
    assert notes == [
        "MLflow traces: the first 3 of 5 items (tracking.max_traces; every item is in items.json)"
    ]
    by_input = {json.loads(t.info.request_preview)["input"]: t for t in traces}
    assert set(by_input) == {"question 0", "question 1", "question 2"}
    hostile = {a.name: a for a in by_input["question 1"].info.assessments}
    assert hostile["answer_similarity"].value == 0.0
    assert hostile["answer_similarity"].rationale == f"reason 1: {HOSTILE}"
    assert hostile["answer_similarity"].source.source_id == "openai/gpt-4o-mini"
    assert hostile["ground_truth"].value == "Paris"
    unscored = {a.name: a for a in by_input["question 2"].info.assessments}["answer_similarity"]
    assert unscored.value is None and unscored.error is not None
    assert "judge reply invalid" in (unscored.error.error_message or "")


@pytest.mark.slow
def test_two_runs_of_the_sample_have_one_request_per_row_so_mlflow_pairs_every_row(tmp_path: Path) -> None:
    """MLflow's "Evaluation runs" view pairs two runs' items by their request: the sample has three rows
    asking the same question, which it paired with nothing (null) unless each request names its row."""
    from mlflow.tracking import MlflowClient

    from evalframe import evaluate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = [
        evaluate(None, ["exact_match"], tracking=uri, output_dir=tmp_path / "a"),
        evaluate(None, ["token_f1"], tracking=uri, output_dir=tmp_path / "b"),
    ]
    client = MlflowClient(uri)
    requests = []
    for run in runs:
        experiment = client.get_run(str(run.run_id)).info.experiment_id
        traces = client.search_traces(locations=[experiment], run_id=run.run_id, max_results=100)
        previews = [t.info.request_preview for t in traces]
        assert len(previews) == len(set(previews)) == 28  # one distinct request per row
        requests.append({json.loads(p)["id"]: json.loads(p)["input"] for p in previews})
    assert requests[0] == requests[1]  # each request is in both runs: every row pairs
    questions = list(requests[0].values())
    assert max(questions.count(q) for q in questions) >= 3  # the rows that share a question


def test_a_run_without_mlflow_still_writes_its_report(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where tracking's default sqlite:///mlflow.db would be
    config = compose(["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=3", "tracking=none"])
    _, code = pipeline.evaluate(config, tmp_path / "outputs" / "run")
    assert code == 0
    [page] = list((tmp_path / "outputs").rglob("report.html"))
    assert (page.parent / "results.jsonl").is_file()
    assert (page.parent / "plots" / "answer_similarity_histogram.png").read_bytes().startswith(PNG)
    assert _rows(page.read_text()) == 3
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow  # a fresh interpreter importing matplotlib: 3 s
def test_preload_imports_matplotlib_on_a_thread() -> None:
    import subprocess
    import sys

    code = """
import sys, threading
from evalframe.report import html as html_report
html_report.preload()
[thread] = [t for t in threading.enumerate() if t.name == "import-matplotlib"]
thread.join()
assert "matplotlib.pyplot" in sys.modules
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_a_run_keeping_its_first_items_points_at_results_jsonl_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from evalframe.tracking import traces

    monkeypatch.setattr(traces, "log_traces", lambda result, config, limit: 1)
    capped = RunResult(items=[_item(i, 1.0) for i in range(5)], scorers=["answer_similarity"], keep=2)
    notes: list[str] = []
    traces.trace_items(capped, {"tracking": {"max_traces": 1}}, notes)
    # items.json holds the 2 kept items, not all 5: results.jsonl does.
    assert notes == [
        "MLflow traces: the first 1 of 2 items (tracking.max_traces; every item is in results.jsonl)"
    ]
