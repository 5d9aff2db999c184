"""A comparison of two logged runs as an MLflow run of its own, in the baseline's experiment: tagged
with both run ids and the verdict, its figures as metrics and compare.html as an artifact."""

from __future__ import annotations

from pathlib import Path

from evalframe.results.comparison import Comparison
from evalframe.tracking.store import store_uri


def log_comparison(uri: str, experiment_id: str, comparison: Comparison, files: list[Path]) -> str:
    """A comparison as a run of its own in the baseline's experiment, tagged with both run ids, its
    figures as metrics and compare.html as an artifact. Returns its run id."""
    import time

    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    tags = {
        "evalframe.compare.baseline": comparison.baseline,
        "evalframe.compare.candidate": comparison.candidate,
        "evalframe.compare.verdict": "worse" if comparison.worse else "not worse",
        "mlflow.note.content": f"{comparison.title()}. {comparison.counts()}.",
    }
    run = client.create_run(
        experiment_id, run_name=f"compare {comparison.candidate[:8]} vs {comparison.baseline[:8]}"
    )
    run_id = str(run.info.run_id)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in comparison.metrics().items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    for path in files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
    return run_id
