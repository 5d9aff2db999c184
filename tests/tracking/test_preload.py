"""mlflow imported, and an SQLite store opened, on a thread while a run waits for its models
(store.preload); the run's end takes them from there (store.imported), and the thread says nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evalframe.report import console
from evalframe.tracking import store


@pytest.fixture(autouse=True)
def _quiet() -> None:
    console.quiet_libraries()  # as every run starts (the command line's and the Python API's)


def test_a_writable_sqlite_store_is_opened_before_the_run_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "mlflow.db"
    store.preload(f"sqlite:///{database}")
    mlflow = store.imported()  # waits for the thread
    assert mlflow.MlflowClient
    tables = {row[0] for row in sqlite3.connect(database).execute("select name from sqlite_master")}
    assert {"experiments", "runs", "trace_info"} <= tables  # MLflow made its tables
    assert capsys.readouterr() == ("", "")


def test_a_store_that_cannot_take_the_run_is_left_for_the_end_to_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-dir" / "mlflow.db"
    store.preload(f"sqlite:///{missing}")
    store.imported()
    assert not missing.parent.exists()  # unavailable() said no: MLflow never tried (nor retried)
    assert capsys.readouterr() == ("", "")
