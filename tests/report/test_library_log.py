"""MLflow's own errors stay off the console: a write-back whose store another process locks once it was
checked says what happened in its one warning line, and the tracebacks MLflow's loggers print (some 400
lines of SQLAlchemy's for 4 verdicts) go to a file the console names once."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalframe.report import console as report
from evalframe.results.scores import ScoreResult
from evalframe.tracking import feedback, store
from tests.traced_app import Seeded
from tests.tracking.test_feedback import DIGESTS, config, items_of, journaled
from tests.tracking.test_store_checks import held, path_of


@pytest.mark.slow
def test_mlflow_errors_during_a_write_back_go_to_a_file_named_once(
    traced_store: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow.store.db.utils as mlflow_db

    # MLflow's sessions wait 20 s for a lock (their PRAGMA busy_timeout), and so do the stores evalframe
    # opens (store.LOCK_WAIT): a tenth of a second here, the same failure sooner.
    text = mlflow_db.sql.text
    monkeypatch.setattr(
        mlflow_db,
        "sql",
        SimpleNamespace(text=lambda s: text(s.replace("busy_timeout = 20000", "busy_timeout = 100"))),
    )
    monkeypatch.setattr(store, "LOCK_WAIT", 0.1)
    report.quiet_libraries()  # what every command does first
    rows = traced_store.rows("dataset.limit=4")
    results = journaled(tmp_path, items_of(rows, exact_match=ScoreResult(1.0, "same")))
    checked = feedback.unavailable

    with contextlib.ExitStack() as lock:

        def then_locked(uri: str, *args: Any, **kwargs: Any) -> str | None:
            found = checked(uri, *args, **kwargs)
            lock.enter_context(held(path_of(traced_store), 60))  # another writer, from now on
            return found

        monkeypatch.setattr(feedback, "unavailable", then_locked)
        with report.notes() as notes:
            tally = feedback.write_back(results, config(traced_store.uri), None, DIGESTS, notes)
    assert tally is not None and (tally.written, tally.failed) == (0, 4)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[SQL:" not in err, err[:3000]
    [named] = [line for line in err.splitlines() if line.startswith("note: MLflow's own error messages")]
    log = Path(named.rsplit(" ", 1)[1])
    try:
        detail = log.read_text()
        assert "database is locked" in detail and "Traceback (most recent call last)" in detail
    finally:
        log.unlink()
    warning = "warning: 4 verdicts could not be written onto their traces (MlflowException: "
    assert warning + "(sqlite3.OperationalError) database is locked)" in err
    assert len(err.splitlines()) == 3  # where MLflow's log is, the verdicts line, its warning
