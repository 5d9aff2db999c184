"""`evalframe log-run DIR` logs a saved run where the run was configured to go: its own experiment and run
name (also when it ran with tracking=none), a trace dataset's run beside its traces; only what log-run's
own command line sets overrides them. Real SQLite stores, in process, no model (exact_match)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import pytest

from tests.conftest import run_cli
from tests.traced_app import Seeded


def saved_run(cwd: Path, *args: str) -> Path:
    done = run_cli(["scorer=exact_match", "dataset.limit=2", *args], cwd)
    assert done.returncode == 0, done.stderr
    [directory] = [p.parent for p in (cwd / "outputs").rglob("run.json")]
    return directory


def logged(cwd: Path, *args: str) -> None:
    done = run_cli(["log-run", *args], cwd)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def runs_in(uri: str) -> dict[str, list[Any]]:
    """{experiment name: its runs' names}."""
    client = mlflow.MlflowClient(uri)
    return {
        e.name: sorted(r.info.run_name for r in client.search_runs([e.experiment_id]))
        for e in client.search_experiments()
        if client.search_runs([e.experiment_id])
    }


@pytest.mark.slow
def test_an_untracked_run_is_logged_to_its_own_experiment_and_name(tmp_path: Path) -> None:
    directory = saved_run(tmp_path, "tracking=none", "tracking.experiment=myexp", "tracking.run_name=mine")
    logged(tmp_path, str(directory))  # ./mlflow.db: where tracking=mlflow would have logged it
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert runs_in(store) == {"myexp": ["mine"]}
    # Only what log-run's own command line sets overrides the run's settings.
    logged(tmp_path, str(directory), "--again", "tracking.experiment=other")
    assert runs_in(store) == {"myexp": ["mine"], "other": ["mine"]}


def test_a_tracked_run_logged_later_keeps_its_experiment(tmp_path: Path) -> None:
    down = tmp_path / "a-file"
    down.write_text("")  # a store that cannot be made: the run finishes, exit code 3
    done = run_cli(
        [
            "scorer=exact_match",
            "dataset.limit=2",
            f"tracking.uri=sqlite:///{down}/mlflow.db",
            "tracking.experiment=qa",
        ],
        tmp_path,
    )
    assert done.returncode == 3, done.stderr
    [directory] = [p.parent for p in (tmp_path / "outputs").rglob("run.json")]
    later = f"sqlite:///{tmp_path / 'later.db'}"
    logged(tmp_path, str(directory), f"tracking.uri={later}")
    assert list(runs_in(later)) == ["qa"]


@pytest.mark.slow
def test_an_untracked_run_on_traces_is_logged_beside_them(traced_store: Seeded, tmp_path: Path) -> None:
    """A run with tracking=none on a trace dataset, logged later: into the traces' experiment (as a
    tracked run goes), whose Traces tab then lists the traces it judged."""
    store = traced_store
    args = [
        "dataset=mlflow_traces",
        f"dataset.experiment={store.experiment}",
        f"dataset.tracking_uri={store.uri}",
    ]
    directory = saved_run(tmp_path, *args, "tracking=none")
    logged(tmp_path, str(directory), f"tracking.uri={store.uri}")
    client = mlflow.MlflowClient(store.uri)
    [run] = client.search_runs([store.experiment_id])
    linked = client.search_traces(locations=[store.experiment_id], run_id=run.info.run_id)
    assert {t.info.trace_id for t in linked} == set(store.ok[:2])
    assert client.get_experiment_by_name("evalframe") is None
