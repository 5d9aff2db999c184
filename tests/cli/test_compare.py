"""`python -m evalframe compare`: two real runs logged to MLflow (SQLite in tmp), compared item by item
on constructed outputs whose answer is known."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from evalframe import evaluate
from evalframe.cli import compare
from evalframe.results.scores import Objective
from evalframe.tracking import store, sweeps
from tests.conftest import Unprivileged, fake_model, run_cli
from tests.scripted import ScriptedModel

pytestmark = pytest.mark.slow  # whole runs logged to MLflow, several per test: make test runs them

TRUTH = "alpha beta gamma delta"


def _rows(output: str, ids: range = range(30)) -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "input": f"question {i}", "ground_truth": TRUTH, "output": output} for i in ids]


def _run(folder: Path, name: str, rows: list[dict[str, Any]]) -> str:
    uri = f"sqlite:///{folder}/mlflow.db"
    result = evaluate(
        rows,
        ["token_f1", "exact_match"],
        tracking=uri,
        output_dir=folder / name,
        run_name=name,
        overrides=["tracking.traces=false"],  # compare reads results.jsonl; 30 traces cost a second
    )
    assert result.run_id
    return result.run_id


@contextmanager
def _building(folder: Path) -> Iterator[pytest.MonkeyPatch]:
    """Runs logged once per module into `folder`: the tests only read them, each from a copy of the
    store (`_copy`), so a test that deletes a run or logs a comparison changes no other test's store."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # MLflow puts a SQLite store's artifacts in ./mlruns
        yield mp


def _copy(folder: Path, tmp_path: Path) -> None:
    """The module's store as `tmp_path/mlflow.db`, through SQLite's backup API. The artifacts stay in
    the module's folder: a test reads them, and what it logs goes in a new run's folder of its own."""
    with (
        closing(sqlite3.connect(folder / "mlflow.db")) as src,
        closing(sqlite3.connect(tmp_path / "mlflow.db")) as dst,
    ):
        src.backup(dst)


@pytest.fixture(scope="module")
def _runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("runs")
    better = _rows("alpha beta", range(29)) + _rows("alpha beta", range(100, 101))
    with _building(folder):
        return folder, {
            "weak": _run(folder, "weak", _rows("alpha")),
            "better": _run(folder, "better", better),
            "elsewhere": _run(folder, "elsewhere", _rows("alpha", range(200, 205))),
        }


@pytest.fixture
def runs(_runs: tuple[Path, dict[str, str]], tmp_path: Path) -> dict[str, str]:
    """A weak baseline, a candidate better on every item (token F1 0.4 -> 0.67; one item only in each
    run), and a run of other items."""
    folder, ids = _runs
    _copy(folder, tmp_path)
    return ids


def _compare(tmp_path: Path, baseline: str, candidate: str, *more: str) -> int:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        f"baseline={baseline}",
        f"candidate={candidate}",
        f"tracking.uri={uri}",
        f"output_dir={tmp_path}/cmp",
    ]
    return compare.main([*args, *more])


def test_a_candidate_better_on_every_item_passes(
    tmp_path: Path, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(tmp_path, runs["weak"], runs["better"]) == 0
    out = capsys.readouterr().out
    assert "29 items in both runs; left out: 1 only in the baseline, 1 only in the candidate" in out
    row = next(line for line in out.splitlines() if "token_f1" in line and "better" in line)
    assert "0.400" in row and "0.667" in row and "+0.267 [0.267, 0.267]" in row
    assert " 29/0/0 " in row  # 29 improved, none worse or equal
    assert re.search(r"exact_match .* 0/0/29 +unclear", out)  # 0 on every item in both runs
    assert "token_f1: the items that moved most" in out
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert "+0.267" in html and "the items that moved most" in html and "question 0" in html
    # Logged as a run of its own, tagged with both ids, with the figures as metrics.
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    [logged] = [
        r
        for r in client.search_runs([client.get_run(runs["weak"]).info.experiment_id])
        if r.data.tags.get("evalframe.compare.candidate") == runs["better"]
    ]
    assert logged.data.tags["evalframe.compare.baseline"] == runs["weak"]
    metrics = logged.data.metrics
    assert metrics["token_f1/difference"] == pytest.approx(0.2667, abs=1e-3) and metrics["paired"] == 29
    assert metrics["token_f1/difference_ci_low"] > 0 and metrics["token_f1/p_value"] < 0.001
    assert metrics["token_f1/improved"] == 29 and metrics["only_candidate"] == 1
    assert [a.path for a in client.list_artifacts(logged.info.run_id)] == ["compare.html"]


def test_a_clearly_worse_candidate_fails_the_gate(
    tmp_path: Path, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _compare(tmp_path, runs["better"], runs["weak"]) == 1
    out = capsys.readouterr().out
    assert "worse" in out and "-0.267" in out and "significantly worse than the baseline (exit code 1)" in out
    assert _compare(tmp_path, runs["weak"], runs["weak"]) == 0  # the same run: no difference


def test_unknown_ids_and_nothing_in_common_are_usage_errors(
    tmp_path: Path, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = "0123456789abcdef" * 2  # an id's shape: looked up as it is
    assert _compare(tmp_path, runs["weak"], unknown) == 2
    assert f"candidate={unknown}: run_id={unknown}: no such run" in capsys.readouterr().err
    assert _compare(tmp_path, "nope", runs["weak"]) == 2
    assert "baseline=nope: no run of experiment 'evalframe' at" in capsys.readouterr().err
    assert _compare(tmp_path, runs["weak"], runs["elsewhere"]) == 2
    assert "have no item id in common (30 and 5 items)" in capsys.readouterr().err
    assert compare.main(["baseline=x"]) == 2 and "compare needs candidate=RUN" in capsys.readouterr().err
    assert compare.main(["baseline=x", "candidate=y", "colour=red"]) == 2
    assert "cannot read 'colour=red'" in capsys.readouterr().err


def test_a_deleted_run_is_refused_naming_it(
    tmp_path: Path, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a run deleted in MLflow (in its trash) was compared like any other, exit code 0."""
    deleted = runs["better"]
    MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").delete_run(deleted)
    for role, pair in (("candidate", (runs["weak"], deleted)), ("baseline", (deleted, runs["weak"]))):
        assert _compare(tmp_path, *pair) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        [line] = captured.err.splitlines()
        assert line.startswith(f"error: {role}={deleted} is a deleted run")
        assert f"mlflow runs restore --run-id {deleted}" in line
    assert not (tmp_path / "cmp").exists()


def test_a_judge_and_its_aligned_judge_are_paired_item_by_item(
    scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of the judge `rules` and the run `evalframe align` logs of `rules_aligned` (its held-out
    items): compare pairs the two scorers by the `_aligned` suffix. Before: no scorer in common, exit 2."""
    from tests.cli.test_rescore import mlflow_runs
    from tests.run.test_align import labelled_items, setup, team_judge

    scripted.responder = team_judge
    args = [a for a in setup(tmp_path, labelled_items()) if a != "tracking=none"]
    model = [*fake_model(scripted), "tracking.traces=false"]
    assert run_cli([*args, *model], tmp_path).returncode == 0  # the judge as it was: every item passes
    assert run_cli(["align", *args, *model, "output_dir=al"], tmp_path).returncode == 0
    judge, aligned = (r.info.run_id for r in mlflow_runs(tmp_path))
    capsys.readouterr()
    assert _compare(tmp_path, judge, aligned) == 1  # it fails the 10 held-out replies people failed
    out = capsys.readouterr().out
    assert "20 items in both runs; left out: 20 only in the baseline, 0 only in the candidate" in out
    row = next(line for line in out.splitlines() if "rules vs rules_aligned" in line)
    assert " 0/10/10 " in row and "1.000" in row and "0.500" in row
    assert "rules vs rules_aligned: the items that moved most" in out
    assert _compare(tmp_path, aligned, judge) == 0  # either way round
    assert "rules_aligned vs rules" in capsys.readouterr().out


@pytest.fixture(scope="module")
def _sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[str, str, list[str]]]:
    folder = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{folder}/mlflow.db"
    with _building(folder) as mp:
        baseline = _run(folder, "base", _rows("alpha beta"))
        mp.delenv(sweeps.PARENT_RUN, raising=False)
        sweeps.start_parent(uri, "evalframe", "sweep", [], notes=[])
        parent = os.environ[sweeps.PARENT_RUN]
        jobs = [_run(folder, "same", _rows("alpha beta")), _run(folder, "worse", _rows("alpha"))]
        sweeps.end_parent(uri, None, Objective("token_f1/mean"), folder, [], notes=[])
    return folder, (baseline, parent, jobs)


@pytest.fixture
def sweep(_sweep: tuple[Path, tuple[str, str, list[str]]], tmp_path: Path) -> tuple[str, str, list[str]]:
    """A baseline run, and a sweep's parent run with its two jobs: one as good, one worse."""
    folder, ids = _sweep
    _copy(folder, tmp_path)
    return ids


def test_a_sweep_candidate_compares_each_job(
    tmp_path: Path, sweep: tuple[str, str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    baseline, parent, jobs = sweep
    assert _compare(tmp_path, baseline, parent) == 1  # one job is worse
    captured = capsys.readouterr()
    assert "comparing each of its 2 jobs" in captured.err
    assert f"candidate {jobs[0]} against baseline {baseline}" in captured.out
    assert f"candidate {jobs[1]} is significantly worse" in captured.out


def test_a_sweep_as_baseline_and_a_comparison_as_either_are_refused_saying_why(
    tmp_path: Path, sweep: tuple[str, str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "has no results.jsonl artifact ... no stored judge replies to re-score" for all three."""
    baseline, parent, jobs = sweep
    assert _compare(tmp_path, parent, jobs[0]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: baseline={parent} is a sweep's parent run: it holds no items")
    assert "a baseline must be one run" in line and f"candidate={parent}" in line
    assert _compare(tmp_path, baseline, jobs[0]) == 0
    logged = re.search(r"as run (\w+)$", capsys.readouterr().out, re.M)
    assert logged
    for role in ("baseline", "candidate"):
        pair = (logged[1], jobs[0]) if role == "baseline" else (jobs[0], logged[1])
        assert _compare(tmp_path, *pair) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: {role}={logged[1]} is a comparison logged by evalframe compare")
        assert f"of {jobs[0]} against {baseline}" in line and "re-score" not in line
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweeps.start_parent(uri, "evalframe", "empty", [], notes=[])
    empty = os.environ[sweeps.PARENT_RUN]
    sweeps.end_parent(uri, None, Objective("token_f1/mean"), tmp_path, [], notes=[])
    assert _compare(tmp_path, baseline, empty) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: candidate={empty} is a sweep's parent run with no job runs in MLflow")


def test_a_tracking_server_that_never_answers_is_exit_3_within_seconds(
    silent_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: MLflow's client waited and retried for 128 s, then exit code 2. (The probe's 5 s made
    0.5 s here: the line names the wait it made.)"""
    monkeypatch.setattr(store, "PROBE_TIMEOUT", 0.5)
    started = time.monotonic()
    args = ["baseline=0123abcd", "candidate=4567ef01", f"tracking.uri={silent_server}"]
    assert compare.main([*args, f"output_dir={tmp_path}/cmp"]) == 3
    assert time.monotonic() - started < 10
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line == f"error: the tracking server at {silent_server} did not answer within 0.5 s"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_store_that_cannot_be_written_is_exit_3_in_one_line(
    tmp_path: Path, runs: dict[str, str], unprivileged: Unprivileged
) -> None:
    """`compare` as a user who cannot write the store (as root: as nobody). Before: exit code 3 only
    after the table and compare.html, with some 90 lines of SQLAlchemy errors and a traceback."""
    work = unprivileged.work
    db = work / "store" / "mlflow.db"
    db.parent.mkdir()
    shutil.copy(tmp_path / "mlflow.db", db)
    db.chmod(0o444)
    db.parent.chmod(0o555)
    args = [f"baseline={runs['weak']}", f"candidate={runs['better']}", f"tracking.uri=sqlite:///{db}"]
    done = unprivileged.run(["compare", *args])
    assert (done.returncode, done.stdout) == (3, "")
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: cannot write the MLflow database {db} (")
    assert line.endswith(compare.WRITES)
    assert [p.name for p in work.iterdir()] == ["store"]  # no compare.html, no cache


@pytest.mark.slow
def test_the_readme_github_actions_step_runs_as_written(tmp_path: Path, judge_server: Any) -> None:
    """The README's workflow step, its shell lines run by bash: evaluate, pick the run id from the
    output, compare with the baseline run. The judge is the fake server instead of OpenAI."""
    from tests.conftest import fake_model, run_cli

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    step = readme.split("- name: Compare with the baseline run", 1)[1].split("```", 1)[0]
    script = step.split("run: |\n", 1)[1]
    lines = [line.strip() for line in script.splitlines() if line.strip()]
    assert lines[-1] == "evalframe compare baseline=$BASELINE_RUN_ID candidate=$CANDIDATE"
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    model = " ".join(fake_model(judge_server))
    overrides = ["scorer=answer_similarity", *fake_model(judge_server), "dataset.limit=6"]
    first = run_cli([*overrides, f"tracking.uri={uri}"], tmp_path)
    assert first.returncode == 0, first.stderr
    baseline = re.search(r"/runs/([0-9a-f]{32})$", first.stdout, re.M)
    assert baseline
    shell = (
        "\n".join(lines)
        .replace("${{ github.sha }}", "abc123")
        .replace("model=gpt", f"{model} dataset.limit=6")
    )
    # `evalframe` as this interpreter runs it (the venv's command need not be on the test's PATH).
    shell = re.sub(r"^evalframe ", f"{sys.executable} -m evalframe ", shell, flags=re.M)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell],
        cwd=tmp_path,
        env={**__import__("os").environ, "MLFLOW_TRACKING_URI": uri, "BASELINE_RUN_ID": baseline.group(1)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 items in both runs" in done.stdout and "answer_similarity" in done.stdout
    # An unknown baseline through the command line: exit code 2 and one line, no traceback.
    unknown = run_cli(
        ["compare", "baseline=feedc0de", f"candidate={baseline.group(1)}", f"tracking.uri={uri}"], tmp_path
    )
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "baseline=feedc0de: no run of experiment 'evalframe' at " in unknown.stderr
