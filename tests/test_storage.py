"""The run's own storage under attack: a full disk for the cache or the run directory, a torn last
line, inputs that changed before a resume, runs that start in the same second, and killed sweeps."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from evalframe import pipeline
from evalframe.cache import Cache
from tests.conftest import compose, fake_model
from tests.scripted import ScriptedModel


def judged(scripted: ScriptedModel, *extra: str) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", *extra]


class _FullDisk:
    """A cache connection on a full disk: reads work, every write fails as SQLite or the OS reports it."""

    def __init__(self, db: sqlite3.Connection, error: Exception):
        self.db, self.error = db, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "DELETE", "UPDATE")):
            raise self.error
        return self.db.execute(sql, *args)


@pytest.mark.parametrize(
    "error",
    [sqlite3.OperationalError("database or disk is full"), OSError(errno.ENOSPC, "No space left on device")],
)
def test_a_cache_that_cannot_write_warns_once_and_the_run_goes_on(
    error: Exception,
    scripted: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    opened = Cache._db
    monkeypatch.setattr(Cache, "_db", lambda self: _FullDisk(opened(self), error))
    result, code = pipeline.evaluate(compose(judged(scripted, "dataset.limit=6")), tmp_path)
    assert code == 0 and result.summaries["answer_similarity"].scored == 6
    assert capsys.readouterr().err.count("cannot write the judge cache") == 1
