"""Every store is checked first, in one line, within seconds, whatever URI scheme MLflow takes: a database
server nothing answers at (MLflow retried it for 106 s, then printed 217 lines), one that takes the
connection and never logs in, a driver that is not installed, a file store (which MLflow 3 refuses), a
scheme MLflow does not know; no password reaches the line. And a locked SQLite store is waited for as
MLflow's own sessions wait (LOCK_WAIT, 20 s), then said in one line (it stopped a run after 9 s with a
98-line "database is locked" traceback)."""

from __future__ import annotations

import importlib.util
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import EXIT_TRACKING, EXIT_USAGE
from evalframe.tracking import databases, store
from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_app import Seeded

PASSWORD = "pw-s3cret-9"


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_line(result: Any, code: int) -> str:
    """The run's one error line: the exit code, no traceback, no password, nothing else said."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and PASSWORD not in result.stderr + result.stdout
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: ")
    return line


def traces_from(uri: str, cwd: Path) -> tuple[Any, float]:
    """A run on the traces of the store at `uri` (no model: exact_match), and how long it took."""
    args = ["dataset=mlflow_traces", "dataset.experiment=rag-app", f"dataset.tracking_uri={uri}"]
    start = time.perf_counter()
    result = run_cli([*args, "scorer=exact_match", "tracking=none"], cwd)
    return result, time.perf_counter() - start


MYSQL_DRIVER = importlib.util.find_spec("MySQLdb") is not None


@pytest.mark.parametrize(
    ("uri", "code", "said"),
    [
        (
            "postgresql://user:{pw}@127.0.0.1:{port}/db",
            EXIT_TRACKING,
            "cannot reach the database of the MLflow store",
        ),
        ("postgresql+psycopg://user:{pw}@127.0.0.1:{port}/db", EXIT_TRACKING, "Connection refused"),
        (
            "mysql://user:{pw}@127.0.0.1:{port}/db",
            EXIT_TRACKING if MYSQL_DRIVER else EXIT_USAGE,
            "cannot reach the database" if MYSQL_DRIVER else "the database driver of mysql://***@127.0.0.1",
        ),
        ("file://{tmp}/mlruns", EXIT_USAGE, "MLflow 3 keeps no runs or traces in a file store"),
        ("{tmp}/mlruns", EXIT_USAGE, "use sqlite:///PATH/mlflow.db"),
        ("mongodb://user:{pw}@127.0.0.1/db", EXIT_USAGE, "is no MLflow store: its URI starts with one of"),
    ],
)
def test_a_trace_store_that_cannot_be_read_is_one_line_within_seconds(
    uri: str, code: int, said: str, tmp_path: Path
) -> None:
    uri = uri.format(pw=PASSWORD, port=closed_port(), tmp=tmp_path)
    result, seconds = traces_from(uri, tmp_path)
    line = one_line(result, code)
    assert said in line and "dataset.tracking_uri" in line, line
    assert seconds < 15, seconds  # MLflow alone: 106 s for postgresql, a traceback for the others


@pytest.mark.slow
def test_a_database_that_takes_the_connection_and_never_logs_in_is_one_line_in_seconds(
    silent_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(databases, "CONNECT_TIMEOUT", 1.0)  # 3 s for a user
    port = silent_server.rsplit(":", 1)[1]
    result, seconds = traces_from(f"postgresql://user:{PASSWORD}@127.0.0.1:{port}/db", tmp_path)
    line = one_line(result, EXIT_TRACKING)
    assert f"the database of the MLflow store at postgresql://***@127.0.0.1:{port}/db refused" in line
    assert seconds < 10, seconds


def test_a_run_logged_where_mlflow_cannot_log_is_said_before_any_model_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    common = ["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=2"]
    for uri in (f"file://{tmp_path}/mlruns", f"mongodb://user:{PASSWORD}@127.0.0.1/db"):
        line = one_line(run_cli([*common, f"tracking.uri={uri}"], tmp_path), EXIT_USAGE)
        assert "check tracking.uri (where the run is logged)" in line
    assert scripted.count() == 0 and not list(tmp_path.glob("outputs/*/*/results.jsonl"))


def test_a_run_logged_to_a_database_that_is_down_keeps_its_results_in_seconds(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    uri = f"postgresql://user:{PASSWORD}@127.0.0.1:{closed_port()}/db"
    start = time.perf_counter()
    result = run_cli(
        ["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=2", f"tracking.uri={uri}"],
        tmp_path,
    )
    assert time.perf_counter() - start < 30  # MLflow alone: 106 s of retries, then a traceback
    assert result.returncode == EXIT_TRACKING and "Traceback" not in result.stderr
    assert PASSWORD not in result.stderr + result.stdout
    [line] = [line for line in result.stderr.splitlines() if "MLflow" in line]
    assert line.startswith("error: could not log to MLflow at postgresql://***@127.0.0.1:")
    assert "cannot reach the database" in line and "evalframe log-run " in line
    [results] = tmp_path.glob("outputs/*/*/results.jsonl")
    assert len(results.read_text().splitlines()) == 2


# --- a locked SQLite store -----------------------------------------------------------------------------


@contextmanager
def held(database: Path, seconds: float) -> Iterator[None]:
    """Another process's writer on `database` (BEGIN EXCLUSIVE, as a long migration or import holds it)
    for `seconds` from now, on a thread; released at the latest when the block ends."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        db = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        try:
            db.execute("BEGIN EXCLUSIVE")
            taken.set()
            release.wait(seconds)
            db.execute("ROLLBACK")
        finally:
            db.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert taken.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join()


def path_of(traced: Seeded) -> Path:
    path = store.sqlite_path(traced.uri)
    assert path is not None
    return path


@pytest.mark.slow
def test_a_trace_store_locked_by_another_writer_is_waited_for(traced_store: Seeded, tmp_path: Path) -> None:
    # Longer than sqlite3's own 5 s, which MLflow opened its store with; within MLflow's 20 s.
    start = time.perf_counter()
    with held(path_of(traced_store), 6.5):
        result = run_cli(
            [*traced_store.overrides(), "scorer=exact_match", "dataset.limit=2", "tracking=none"], tmp_path
        )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert time.perf_counter() - start >= 6.5
    assert "2 written onto 2 traces" in result.stderr  # read, judged and written back once it was free


def test_a_trace_store_locked_past_the_wait_is_one_line(
    traced_store: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "LOCK_WAIT", 1.0)  # 20 s for a user
    with held(path_of(traced_store), 10.0):
        result, seconds = traces_from(traced_store.uri, tmp_path)
    line = one_line(result, EXIT_TRACKING)
    assert f"the MLflow database {path_of(traced_store)} stayed locked by another process for 1 s" in line
    assert seconds < 9.0, seconds  # said after the wait, not once the lock went


@pytest.mark.slow
def test_mlflow_opening_a_locked_store_waits_as_its_sessions_do(traced_store: Seeded) -> None:
    """The wait is MLflow's too, not only the check's: a store opened while another process writes it
    (its tables looked for) waits LOCK_WAIT, where sqlite3's own 5 s stopped it."""
    from mlflow.tracking import MlflowClient

    with held(path_of(traced_store), 6.0):
        client = MlflowClient(store.store_uri(traced_store.uri))
        assert client.get_experiment_by_name(traced_store.experiment) is not None
