"""A tracking store that cannot take the run fails it within seconds, with one clear line: a server
that accepts connections and never answers, and an MLflow database in a place that cannot be written
(a read-only directory, or a path under a file). The results stay on disk with the `evalframe log-run` hint,
and the exit code is 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe.errors import EXIT_TRACKING
from evalframe.run import pipeline
from evalframe.tracking import store
from evalframe.tracking.store import unavailable
from tests.conftest import Unprivileged, compose, fake_model
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer


def run_logged_to(uri: str, scripted: ScriptedModel, tmp_path: Path) -> tuple[int, Path]:
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=3", f"tracking.uri={uri}"]
    _, code = pipeline.evaluate(compose(overrides), tmp_path / "run")
    return code, tmp_path / "run" / "results.jsonl"


def one_clear_line(err: str) -> str:
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "MLflow" in line]
    assert line.startswith("error: could not log to MLflow") and "evalframe log-run " in line
    return line


def test_a_tracking_server_that_never_answers_fails_the_logging_in_seconds(
    silent_server: str,
    scripted: ScriptedModel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store, "PROBE_TIMEOUT", 0.5)  # 5 s for a user: the line names the wait made
    code, results = run_logged_to(silent_server, scripted, tmp_path)
    assert code == EXIT_TRACKING
    assert len(results.read_text().splitlines()) == 3
    line = one_clear_line(capsys.readouterr().err)
    assert f"the tracking server at {silent_server} did not answer within 0.5 s" in line


def test_an_mlflow_database_that_cannot_be_written_fails_the_logging_in_seconds(
    scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, results = run_logged_to(f"sqlite:///{blocker}/mlflow.db", scripted, tmp_path)
    assert code == EXIT_TRACKING
    assert len(results.read_text().splitlines()) == 3
    line = one_clear_line(capsys.readouterr().err)
    assert f"cannot create the MLflow database {blocker}/mlflow.db: {blocker} is not a directory" in line


def test_a_writable_store_passes_the_check_untouched(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "mlflow.db"
    assert unavailable(f"sqlite:///{db}") is None  # a new database in a writable directory
    sqlite3.connect(db).execute("CREATE TABLE runs (x)").connection.commit()
    assert unavailable(f"sqlite:///{db}") is None
    tables = sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("runs",)]  # the write check was rolled back


@pytest.mark.slow
def test_an_mlflow_database_in_a_read_only_directory_fails_in_seconds_in_one_line(
    judge_server: FakeLLMServer, unprivileged: Unprivileged
) -> None:
    """`python -m evalframe` as a user who cannot write the database's directory (as root, the command
    runs as nobody: root writes through any chmod). MLflow alone retried for 111 s, then printed a
    38-line SQLAlchemy traceback."""
    work = unprivileged.work
    (work / "store").mkdir()
    (work / "store").chmod(0o555)
    db = work / "store" / "mlflow.db"
    args = [
        "scorer=answer_similarity",
        *fake_model(judge_server),
        "dataset.limit=3",
        f"tracking.uri=sqlite:///{db}",
    ]
    result = unprivileged.run(args, OPENAI_API_KEY="sk-test")
    assert result.returncode == EXIT_TRACKING, result.stderr
    line = one_clear_line(result.stderr)
    assert f"cannot create the MLflow database {db}: {db.parent} is read-only" in line
    [results] = work.glob("outputs/*/*/results.jsonl")
    assert len(results.read_text().splitlines()) == 3


def test_a_store_that_cannot_be_reached_is_named_without_its_credentials() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    problem = unavailable(f"http://alice:s3cret-pw@127.0.0.1:{port}")
    assert problem is not None and "127.0.0.1" in problem and "s3cret-pw" not in problem
