"""The MLflow store: its URI made absolute and fit to print, whether it can take a run (found within
seconds), MLflow's fluent API pointed at it for one block, and runs left RUNNING by a dead process reaped."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.models import imports
from evalframe.models.cache import alive
from evalframe.redaction import REDACTED
from evalframe.tracking import databases

# How long a tracking server gets to answer one probe before the run is logged as failed: MLflow's own
# client would wait minutes on a server that accepts connections and never answers.
PROBE_TIMEOUT = 5.0
# How long a reader or writer of an SQLite store waits for another process's lock on it: what MLflow's
# own sessions wait (their busy_timeout); past it, one line says the store is locked.
LOCK_WAIT = 20.0
# What a run can do when its SQLite store cannot take it: log to another (its results wait on disk).
LOG_ELSEWHERE = "set tracking.uri=sqlite:///PATH/mlflow.db to a directory you can write"
# Which process holds a run open: a RUNNING run whose process is gone (SIGKILL, power loss) is stale.
HOST_TAG, PID_TAG = "evalframe.host", "evalframe.pid"
# MLflow's switch between writing traces on a background queue (its default) and as each ends.
ASYNC_TRACES = "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"
# The URI schemes of the stores MLflow keeps in a database through SQLAlchemy.
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
_preloading: threading.Thread | None = None  # preload()'s thread, which imported() waits for
_waiting = False  # whether SQLAlchemy's SQLite connections wait LOCK_WAIT for a lock (_wait_for_locks)


def preload(uri: str) -> None:
    """Import mlflow on a background thread while a run waits for its models: the import is most of
    the time from a logged run's last item to its traces (1-2 s); `imported()` then takes it. For a
    database store, its SQLAlchemy store and models too (as much again); an SQLite file that
    unavailable() finds writable is opened there as well, through MLflow's own client (which keeps
    the store for the process, its tables made in a new file), outside the import lock (the run's
    aggregates and report do not wait for it; `imported()` does, so the end's own probe of the file
    never meets a migration under way). Nothing is said from there: a store that cannot take the
    run is found and told at the end, as before."""
    global _preloading

    def load() -> None:
        with imports.LOCK:
            import mlflow

            if uri.split(":", 1)[0].split("+", 1)[0] in _DATABASES:
                import mlflow.store.tracking.sqlalchemy_store
        if sqlite_path(uri) is not None and unavailable(uri) is None:
            with contextlib.suppress(Exception):  # the run's end opens it again and says what is wrong
                mlflow.MlflowClient(store_uri(uri))

    _preloading = threading.Thread(target=load, name="import-mlflow", daemon=True)
    _preloading.start()


def imported() -> Any:
    """mlflow, once preload()'s thread and any background import (of it or of another heavy package)
    are through: two threads importing it at once could hand one of them a partially initialised
    module."""
    if _preloading is not None:
        _preloading.join()
    with imports.LOCK:
        import mlflow

    return mlflow


def sqlite_path(uri: str) -> Path | None:
    """The database file of an `sqlite:///` URI (its query left out), as written; None for other stores."""
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0]) if uri.startswith("sqlite:///") else None


def store_uri(uri: str) -> str:
    """`uri` with a relative SQLite path made absolute: MLflow keeps one store per URI string for the
    life of the process, so `sqlite:///mlflow.db` would go on writing to the database of the first
    working directory it was used in (the Python API and tests change directory between runs). Every
    store MLflow is given goes through here: an SQLite one waits for locks from here on."""
    path = sqlite_path(uri)
    if path is not None:
        _wait_for_locks()
    if path is None or path.is_absolute():
        return uri
    query = uri.partition("?")[1] + uri.partition("?")[2]
    return f"sqlite:///{path.resolve()}{query}"


def _wait_for_locks() -> None:
    """Every SQLite connection SQLAlchemy opens waits LOCK_WAIT for another process's lock. MLflow's
    sessions set 20 s themselves, but opening a store (its tables looked for, or made) ran on sqlite3's
    5 s, so a run that started while another process wrote the store stopped on a 98-line "database
    is locked" traceback."""
    global _waiting
    if _waiting:
        return
    import sqlite3

    import sqlalchemy

    def wait(connection: Any, _: Any) -> None:
        if isinstance(connection, sqlite3.Connection):
            connection.execute(f"PRAGMA busy_timeout = {int(LOCK_WAIT * 1000)}")

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", wait)
    _waiting = True


def locked(error: BaseException) -> bool:
    """Whether `error` (MLflow's, SQLAlchemy's or sqlite3's) is an SQLite store held by another process."""
    return "database is locked" in str(error)


def locked_line(uri: str) -> str:
    """What to say of the SQLite store at `uri` that stayed locked past LOCK_WAIT."""
    path = sqlite_path(uri)
    return (
        f"the MLflow database {path.absolute() if path else uri} stayed locked by another process for "
        f"{LOCK_WAIT:g} s; run again once that process is done with it"
    )


def one_line(error: object, limit: int = 300) -> str:
    """An error's (or a text's) first line, cut to `limit`: SQLAlchemy's go on with the statement and a
    link."""
    return next((line for line in str(error).splitlines() if line.strip()), "")[:limit]


def display_uri(uri: str) -> str:
    """A tracking URI fit to print: credentials in it (https://user:token@host) are blanked."""
    return re.sub(r"(?<=://)[^/@]+@", f"{REDACTED}@", uri)


@contextmanager
def fluent_store(uri: str) -> Iterator[None]:
    """MLflow's fluent API (set_experiment, start_run, log_*) on `uri` for one block. Its
    set_tracking_uri also exports MLFLOW_TRACKING_URI, which the next run in this process (the Python
    API, a test) would take for its own default store: what was exported before is put back. So is
    the process's active experiment, which set_experiment sets (and exports as MLFLOW_EXPERIMENT_ID):
    left set, the caller's own traces and runs (a traced target's calls in the next run, the Python
    API user's code) would go to evalframe's experiment, or to an id their store does not have.

    An SQLite store's traces are written as each ends, not on MLflow's background queue: each flush
    of that queue waits up to a second for its consumer (which polls once a second), and a run flushes
    it twice (after its traces, and when the store is switched back), some 1.5 s of idling per run;
    SQLite takes one writer at a time, so the queue overlaps nothing there. A server keeps the queue
    (its requests overlap), and a value the user exported stands."""
    import mlflow
    from mlflow.tracking import fluent

    exported = os.environ.get("MLFLOW_TRACKING_URI")
    active = fluent._active_experiment_id, os.environ.get("MLFLOW_EXPERIMENT_ID")
    choose = ASYNC_TRACES not in os.environ and sqlite_path(uri) is not None
    if choose:  # read when MLflow builds its trace exporter, at the first span after set_tracking_uri
        os.environ[ASYNC_TRACES] = "false"
    mlflow.set_tracking_uri(store_uri(uri))
    try:
        yield
    finally:
        mlflow.set_tracking_uri(exported)  # type: ignore[arg-type]  # None: unset, as before
        fluent._active_experiment_id = active[0]  # no public way to unset it (mlflow is pinned exactly)
        if active[1] is None:
            os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
        else:
            os.environ["MLFLOW_EXPERIMENT_ID"] = active[1]
        if choose:
            del os.environ[ASYNC_TRACES]


def holder() -> dict[str, str]:
    """The tags that say which process holds a run open (see reap)."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def reap(client: Any, experiment_id: str, notes: list[str]) -> None:
    """Mark KILLED the runs of the experiment left RUNNING by a process of this machine that is gone,
    so the UI does not show a killed run or sweep as running forever. Runs of other machines cannot be
    checked and stay as they are. A failure is a warning in `notes`."""
    try:
        running = client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'")
        for run in running:
            tags = run.data.tags
            pid = tags.get(PID_TAG, "")
            if tags.get(HOST_TAG) == socket.gethostname() and pid.isdigit() and not alive(int(pid)):
                client.set_terminated(run.info.run_id, status="KILLED")
    except Exception as e:  # housekeeping: never the reason a run is not logged
        notes.append(f"warning: could not check for killed MLflow runs ({type(e).__name__}: {e})")


def check_run_store(tracking: Mapping[str, Any]) -> None:
    """Before a run's first model call: a ConfigError when it is to be logged (tracking.enabled) to a
    store MLflow cannot take at all (an unknown scheme, a file store, a driver not installed), which
    no later `evalframe log-run` to the same store would fix. A store that is only down is found at
    the run's end (its results are kept for log-run then)."""
    uri = str(tracking.get("uri") or "")
    problem = databases.unsupported(uri, display_uri(uri)) if tracking.get("enabled") and uri else None
    if problem is not None:
        raise ConfigError(f"{problem}; check tracking.uri (where the run is logged)")


def unavailable(uri: str, hint: str = LOG_ELSEWHERE, write: bool = True) -> str | None:
    """Why the store at `uri` cannot take a run (or be read, `write` False), found within seconds, in
    one line that shows no password; `hint` says what to do when it is an SQLite file that cannot be
    written. None when it can (or when it is a kind only MLflow can check: Databricks, a plugin's).
    MLflow itself waits minutes on a server that accepts connections and never answers, retries a
    database it cannot reach or write for 100 s, then prints SQLAlchemy's traceback, and meets an
    unknown scheme, a file store or a missing driver with a traceback."""
    shown = display_uri(uri)
    kind = databases.scheme(uri)
    problem = databases.unsupported(uri, shown)
    if problem is not None:
        return problem
    if kind in ("http", "https"):
        import requests

        try:
            requests.get(f"{uri.rstrip('/')}/health", timeout=PROBE_TIMEOUT)  # any answer will do
        except requests.Timeout:
            return f"the tracking server at {shown} did not answer within {PROBE_TIMEOUT:g} s"
        except requests.RequestException as e:
            return f"cannot reach the tracking server at {shown} ({type(e).__name__})"
        return None
    if kind in databases.SERVERS:
        return databases.unreachable(uri, shown)
    if kind in ("", "file"):
        return databases.file_store(uri, shown, write)
    database = sqlite_path(uri)
    if database is None:
        return None
    return _sqlite(uri, database.absolute(), hint, write)


def _sqlite(uri: str, path: Path, hint: str, write: bool) -> str | None:
    """An SQLite store: its file can be made (or is there, to read), and a write (or a read) gets
    through within LOCK_WAIT of another process's lock."""
    import sqlite3

    if not path.exists():
        if not write:
            return f"no MLflow database at {path}"
        if not path.parent.is_dir():
            return f"cannot create the MLflow database {path}: {path.parent} is not a directory; {hint}"
        if not os.access(path.parent, os.W_OK):
            return f"cannot create the MLflow database {path}: {path.parent} is read-only; {hint}"
        return None
    try:  # a write that is rolled back (what MLflow will need, without touching its tables), or a read
        db = sqlite3.connect(f"{path.as_uri()}?mode={'rw' if write else 'ro'}", uri=True, timeout=LOCK_WAIT)
        db.isolation_level = None  # explicit BEGIN/ROLLBACK: Python would commit the DDL itself
        try:
            db.execute("BEGIN")
            if write:
                db.execute("CREATE TABLE evalframe_write_check (x)")
            else:
                db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.Error as e:
        if locked(e):
            return locked_line(uri)
        if write:
            return f"cannot write the MLflow database {path} ({e}); {hint}"
        return f"cannot read the MLflow database {path} ({e})"
    return None
