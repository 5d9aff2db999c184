"""Sweeps: one MLflow parent run, a child run per job with the swept values as params, a sorted table."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe.testserver import FakeLLMServer
from tests.conftest import fake_model, run_cli

pytestmark = pytest.mark.slow


def test_a_sweep_makes_a_parent_run_with_one_child_per_job(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run_cli(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "dataset.limit=12",
            "penalties.missing=0.05,0.3",
            "penalties.contradiction=0.1,1.0",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr
    assert "sweep: 4 jobs, best first" in result.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("evalframe.sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 5 and len(children) == 4
    assert "penalties.missing=0.05,0.3" in parent.data.tags["evalframe.sweep.overrides"]
    assert parent.info.status == "FINISHED"
    swept = {(c.data.params["penalties.missing"], c.data.params["penalties.contradiction"]) for c in children}
    assert swept == {("0.05", "0.1"), ("0.05", "1.0"), ("0.3", "0.1"), ("0.3", "1.0")}
    means = {
        (c.data.params["penalties.missing"], c.data.params["penalties.contradiction"]): c.data.metrics[
            "answer_similarity/mean"
        ]
        for c in children
    }
    assert means[("0.05", "0.1")] > means[("0.3", "1.0")]  # lighter penalties, higher scores
    # The table lists the best job first.
    lines = [line for line in result.stdout.splitlines() if "penalties.missing=" in line]
    assert "penalties.missing=0.05" in lines[0] and "penalties.contradiction=0.1" in lines[0]
