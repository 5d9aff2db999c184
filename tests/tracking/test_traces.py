"""A run's items as MLflow traces on an SQLite store: every item traced with its verdicts, and no
second of the run spent idling on MLflow's background export queue."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from evalframe import evaluate
from evalframe.tracking.store import ASYNC_TRACES, fluent_store


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "input": f"question {i}", "ground_truth": "alpha beta", "output": "alpha"}
        for i in range(n)
    ]


def _logged(tmp_path: Path, name: str, n: int) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = evaluate(_rows(n), ["token_f1"], tracking=uri, output_dir=tmp_path / name, run_name=name)
    assert result.run_id
    return uri, result.run_id


def _traced_scores(uri: str, run_id: str) -> list[float]:
    client = MlflowClient(uri)
    experiment = client.get_run(run_id).info.experiment_id
    traces = client.search_traces(locations=[experiment], run_id=run_id, max_results=50)
    return [a.value for t in traces for a in t.info.assessments if a.name == "token_f1"]


def test_a_run_on_sqlite_writes_its_traces_without_idling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: MLflow's background queue wrote the traces, and each of its three flushes per run waited
    up to a second for the queue's consumer thread (it polls once a second): a 30-item run took 4.0 s,
    3 s of it idle, against 1.1 s with the same CPU when each trace is written as it ends. Asserted
    as the cause, not the clock (a loaded machine idles too): the run starts no such thread."""
    monkeypatch.chdir(tmp_path)  # MLflow puts a SQLite store's artifacts in ./mlruns
    started: list[str] = []
    start = threading.Thread.start

    def recorded(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recorded)
    uri, run_id = _logged(tmp_path, "run", 5)
    assert _traced_scores(uri, run_id) == [pytest.approx(2 / 3, abs=1e-3)] * 5  # every item, with its verdict
    assert not [name for name in started if name.startswith("MLflowTraceLogging")], started
    assert ASYNC_TRACES not in os.environ  # put back: a server's run keeps MLflow's queue


@pytest.mark.parametrize(
    ("uri", "exported", "inside"),
    [
        ("sqlite:///{tmp}/mlflow.db", None, "false"),
        ("http://127.0.0.1:5000", None, None),  # a server: its requests overlap on MLflow's queue
        ("sqlite:///{tmp}/mlflow.db", "true", "true"),  # the user's choice stands
    ],
)
def test_only_an_sqlite_store_writes_its_traces_as_they_end(
    uri: str, exported: str | None, inside: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if exported is not None:
        monkeypatch.setenv(ASYNC_TRACES, exported)
    with fluent_store(uri.format(tmp=tmp_path)):
        assert os.environ.get(ASYNC_TRACES) == inside
    assert os.environ.get(ASYNC_TRACES) == exported
