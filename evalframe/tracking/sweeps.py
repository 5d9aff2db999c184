"""A sweep in MLflow: its parent run (opened when the sweep starts, reopened when it resumes, closed
with the best job's values and the sweep's report), and the names of runs, a sweep's jobs named after
their swept values."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from evalframe.redaction import REDACTED, redact_overrides, scrub_text
from evalframe.results.jobs import Best
from evalframe.results.scores import Objective
from evalframe.tracking.store import fluent_store, holder, reap, store_uri, unavailable

# A sweep hands its jobs, through the environment (joblib's workers inherit it), the parent run's id
# (each job's run is its child) and the keys it varies (each job's run is named after its values).
PARENT_RUN = "EVALFRAME_PARENT_RUN_ID"
SWEPT = "EVALFRAME_SWEPT_KEYS"


def start_parent(
    uri: str, experiment: str, name: str, overrides: list[str], *, notes: list[str]
) -> str | None:
    """Open the sweep's parent run (closed by end_parent when the sweep ends) for its jobs to nest in;
    returns its id, or None when the store cannot take it (each job then says so and keeps its results).
    Warnings go to `notes`."""
    import mlflow
    from mlflow.tracking import MlflowClient

    problem = unavailable(uri)
    if problem:  # each job then says so and keeps its results for log-run
        notes.append(f"warning: the sweep is not logged to MLflow: {problem}")
        return None
    with fluent_store(uri):
        experiment_id = mlflow.set_experiment(experiment).experiment_id
    client = MlflowClient(store_uri(uri))
    reap(client, experiment_id, notes)
    safe = redact_overrides(overrides)
    run = client.create_run(
        experiment_id,
        run_name=name,
        tags={"evalframe.sweep": "true", "evalframe.sweep.overrides": " ".join(safe), **holder()},
    )
    os.environ[PARENT_RUN] = str(run.info.run_id)
    return str(run.info.run_id)


def reopen_parent(uri: str, run_id: str) -> bool:
    """Continue a killed sweep's parent run (`-m ... resume=true`): running again, held by this process.
    False if the store no longer has it (a new parent is started instead)."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    try:
        client.get_run(run_id)
    except Exception:
        return False
    client.update_run(run_id, status="RUNNING")
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in holder().items()])
    os.environ[PARENT_RUN] = run_id
    return True


def end_parent(
    uri: str,
    best: Best | None,
    objective: Objective,
    base: Path,
    files: list[Path],
    extra: Mapping[str, float] | None = None,
    *,
    notes: list[str],
) -> tuple[str, str] | None:
    """Close the sweep's parent run, if one is open: tagged with the best job's values and objective,
    with the sweep's report and `extra` metrics (the held-out check's). Returns its (experiment id, run
    id), for the caller to say where it is; None when no parent run was open. A tracking outage here
    must not fail a finished sweep: its files are on disk (a warning in `notes` says what is missing)."""
    import time

    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    run_id = os.environ.pop(PARENT_RUN, None)
    if not run_id:
        return None
    tags = {"evalframe.sweep.objective": objective.metric, "evalframe.sweep.direction": objective.direction}
    metrics = dict(extra or {})
    if best is not None:
        tags["evalframe.sweep.best"] = " ".join(f"{k}={v}" for k, v in best.params.items())
        tags.update({f"evalframe.sweep.best.{k}": v for k, v in best.params.items()})
        if best.job is not None:
            tags["evalframe.sweep.best_job"] = best.job.name
        metrics["objective"] = best.value
    client = MlflowClient(store_uri(uri))
    try:
        log_files(uri, run_id, base, files)
    except Exception as e:
        notes.append(
            f"warning: could not log {', '.join(p.name for p in files)} to MLflow ({type(e).__name__}: {e})"
        )
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
        tags=[RunTag(k, scrub_text(str(v))) for k, v in tags.items()],
    )
    client.set_terminated(run_id)
    return str(client.get_run(run_id).info.experiment_id), run_id


def log_files(uri: str, run_id: str, base: Path, files: list[Path]) -> None:
    """Log files to an existing run (the sweep's parent), keeping their paths relative to `base`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    for path in files:
        folder = path.parent.relative_to(base).as_posix()
        client.log_artifact(run_id, str(path), None if folder == "." else folder)


def job_label() -> str:
    """`penalties.missing=0.05 penalties.contradiction=1.0` for a sweep's job (its swept values), so
    the jobs' MLflow runs are told apart by name; "" outside a sweep."""
    from hydra.core.hydra_config import HydraConfig

    keys = json.loads(os.environ.get(SWEPT) or "[]")
    if not keys or not HydraConfig.initialized():
        return ""
    values = dict(o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    return " ".join(f"{k}={values[k]}" for k in keys if k in values)


def sweep_job() -> int | None:
    """The job's number when this run is a job of a sweep (`-m`), else None."""
    from hydra.core.hydra_config import HydraConfig

    if SWEPT not in os.environ or not HydraConfig.initialized():
        return None
    return int(HydraConfig.get().job.num)


# Overrides that say where a run goes or how it runs, not what it measures, or what the name says
# already (the dataset, the scorers): left out of its name.
_NAMED_ALREADY = ("dataset", "dataset.name", "dataset.path")
_NOT_NAMED = {
    "scorer", "tracking", "hydra", "resume", "concurrency", "window", "keep_items", "cache",
    "watch", "sweep", "shards", "shard", "max_judgments", "raw_reply_limit", "gate", "max_unscored_rate",
    "agreement_threshold", "objective", "output_dir",
}  # fmt: skip
_SHOWN = 4  # overrides named at most; the rest are counted ("+2 more")
_VALUE = 24  # characters of an override's value at most


def _differs(overrides: list[str]) -> str:
    """The overrides a user typed that change what a run measures, shortened for a name:
    `penalties.missing=0.3 answer_similarity.scale=10`. Secrets are left out, not blanked."""
    # A sweep's jobs differ by its swept keys, whatever they are (concurrency too).
    swept = set(json.loads(os.environ.get(SWEPT) or "[]"))
    shown = []
    for override in redact_overrides(overrides):
        key, equals, value = override.lstrip("+~").partition("=")
        top = key.split(".", 1)[0].split("/", 1)[0]
        named = key in swept or not (top in _NOT_NAMED or key in _NAMED_ALREADY)
        if not equals or not named or value == REDACTED:
            continue
        key = key.removeprefix("scorers.")  # answer_similarity.scale: the scorer names it
        value = value.split("://", 1)[-1]  # http://127.0.0.1:8000/v1 -> 127.0.0.1:8000/v1
        if len(value) > _VALUE:
            value = value[: _VALUE - 1] + "…"
        shown.append(f"{key}={value}")
    shown.sort(key=lambda o: o.split("=", 1)[0] not in swept)  # a sweep's values first: never "more"
    more = f" +{len(shown) - _SHOWN} more" if len(shown) > _SHOWN else ""
    return " ".join(shown[:_SHOWN]) + more


def _typed() -> list[str]:
    """The command line's overrides when this is a Hydra job (a sweep job's swept values among them)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def run_name(
    config: Mapping[str, Any], overrides: list[str] | None = None, started: float | None = None
) -> str:
    """`sample · answer_similarity · penalties.missing=0.3 · 14:03`: the dataset, the scorers, what the
    command line changed (`overrides`; None: the Hydra job's own) and the time the run started (seconds
    since the epoch; None: no time), so runs of one dataset are told apart in MLflow's lists and its
    compare view. tracking.run_name, when set, is the name."""
    tracking = config.get("tracking") or {}
    if tracking.get("run_name"):
        return str(tracking["run_name"])
    dataset = str(config["dataset"].get("name", "dataset"))
    if "/" in dataset or dataset.endswith((".jsonl", ".csv")):  # a file of yours: its name, not its path
        dataset = Path(dataset).stem
    parts = [dataset, "+".join(config["scorers"]), _differs(_typed() if overrides is None else overrides)]
    if started is not None:
        parts.append(datetime.fromtimestamp(started).strftime("%H:%M"))
    return " · ".join(p for p in parts if p)
