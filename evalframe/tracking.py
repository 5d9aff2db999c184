"""MLflow logging: the only module that imports mlflow.

One run per invocation, logged in a handful of batched calls (params, metrics, one table, a few
artifacts) rather than one call per item: 1,000 single log_metric calls take seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.redaction import redact, redact_overrides
from evalframe.results import RunResult

# MLflow retries an unreachable server 7 times with doubling waits (minutes); fail within seconds instead:
# the results are already on disk, and `log_run=DIR` logs them later.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar for one small download
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # not "Creating initial MLflow database tables..."

RESULTS_ARTIFACT = "results.jsonl"  # every item with every step result, as the run's journal wrote it


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> {"model.name": "openai/gpt-4o-mini", ...} for MLflow params."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return flat


def reasons_report(result: RunResult) -> str:
    """A human-readable Markdown report of every item's score and reason."""
    lines = ["# Reasons", ""]
    for item in result.items:
        lines += [
            f"## {item.id}",
            "",
            f"**Input:** {item.input}",
            "",
            f"**Ground truth:** {item.ground_truth}",
            "",
        ]
        lines += [f"**Output:** {item.output}", ""]
        for name, r in item.scores.items():
            shown = f"{r.score:.2f}" if r.scored else "unscored"
            lines.append(f"- **{name}** {shown}: {r.reason}")
        lines.append("")
    return "\n".join(lines)


def prompts_log(result: RunResult) -> str:
    """Every rendered prompt and raw reply, one JSON object per model call."""
    records = []
    for item in result.items:
        steps = [("target", item.target_step)] if item.target_step else []
        steps += [(name, s) for name, r in item.scores.items() for s in r.steps]
        for scorer, step in steps:
            if step.messages:
                records.append(
                    json.dumps(
                        {
                            "item": item.id,
                            "scorer": scorer,
                            "step": step.step,
                            "messages": step.messages,
                            "raw": step.raw,
                            "error": step.error,
                        },
                        ensure_ascii=False,
                    )
                )
    return "\n".join(records) + "\n"


def log_run(
    result: RunResult,
    config: Mapping[str, Any],
    *,
    uri: str,
    experiment: str,
    run_name: str,
    tags: Mapping[str, str],
    results_file: Path,
) -> tuple[str, str]:
    """Log one evaluation run. Returns (experiment id, run id).

    `results_file` is the run's results.jsonl (every item with every step), logged as it is rather
    than serialised a second time.
    """
    import mlflow

    from evalframe.sweep import PARENT_RUN

    safe = redact(config)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    parent = os.environ.get(PARENT_RUN)
    # In a sweep each job is a child of the sweep's run: the UI nests them, and its compare view and
    # parallel-coordinates chart show swept params against scores.
    nesting = {"mlflow.parentRunId": parent} if parent else {}
    with mlflow.start_run(run_name=run_name, tags=nesting) as run:
        mlflow.set_tags(dict(tags))
        mlflow.log_params(flatten(safe))
        mlflow.log_metrics(result.metrics())
        mlflow.log_table(data=result.table(), artifact_file="items.json")
        mlflow.log_dict(safe, "config.yaml")
        mlflow.log_text(prompts_log(result), "prompts.jsonl")
        mlflow.log_text(reasons_report(result), "reasons.md")
        mlflow.log_artifact(str(results_file))
        return run.info.experiment_id, run.info.run_id


@dataclass
class LoggedRun:
    """A run as MLflow holds it, with its results.jsonl downloaded (what `rescore` starts from)."""

    run_id: str
    name: str
    experiment_id: str
    tags: dict[str, str]
    metrics: dict[str, float]
    results_file: Path


def _client(uri: str) -> Any:
    """A client for reading an existing store: never one that creates an empty store on the way."""
    from mlflow.tracking import MlflowClient

    database = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    if database is not None and not Path(database).is_file():
        raise ConfigError(
            f"no MLflow database at {Path(database).resolve()}: check tracking.uri ({uri}), or run from "
            "the directory that holds the run's mlflow.db"
        )
    return MlflowClient(tracking_uri=uri)


def _get_run(client: Any, uri: str, run_id: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise ConfigError(
                f"run_id={run_id}: no such run in the MLflow store at {uri}; copy the id from the run's "
                "page (Overview: Run ID), or point at the store it was logged to with tracking.uri=..."
            ) from None
        raise ConfigError(
            f"cannot read run {run_id} from MLflow at {uri}; check tracking.uri and that the server is up "
            f"({str(e)[:300]})"
        ) from None
    except Exception as e:  # a server that is down, a database file that cannot be opened
        raise ConfigError(
            f"cannot reach MLflow at {uri} ({type(e).__name__}: {str(e)[:300]}); check tracking.uri"
        ) from None


def run_tags(uri: str, run_id: str) -> dict[str, str]:
    """A logged run's tags (ConfigError if the run or the store cannot be found)."""
    return dict(_get_run(_client(uri), uri, run_id).data.tags)


def fetch_run(uri: str, run_id: str, directory: Path) -> LoggedRun:
    """A logged run's tags, metrics and results.jsonl (downloaded into `directory`).

    Every failure is a ConfigError naming what to check: the id, the store, or the artifact.
    """
    client = _client(uri)
    run = _get_run(client, uri, run_id)
    names = {a.path for a in client.list_artifacts(run_id)}
    if RESULTS_ARTIFACT not in names:
        raise ConfigError(
            f"run {run_id} has no {RESULTS_ARTIFACT} artifact (it was not logged by evalframe, or its "
            "artifacts were deleted): it has no stored judge replies to re-score; run it again normally"
        )
    directory.mkdir(parents=True, exist_ok=True)
    local = client.download_artifacts(run_id, RESULTS_ARTIFACT, str(directory))
    return LoggedRun(
        run_id=run.info.run_id,
        name=run.info.run_name or run_id,
        experiment_id=run.info.experiment_id,
        tags=dict(run.data.tags),
        metrics=dict(run.data.metrics),
        results_file=Path(local),
    )


def start_parent(uri: str, experiment: str, name: str, overrides: list[str]) -> str:
    """Open the sweep's parent run (closed by end_parent when the sweep ends); returns its id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.set_experiment(experiment).experiment_id
    safe = redact_overrides(overrides)
    run = MlflowClient(uri).create_run(
        experiment_id,
        run_name=name,
        tags={"evalframe.sweep": "true", "evalframe.sweep.overrides": " ".join(safe)},
    )
    return str(run.info.run_id)


def end_parent(uri: str, run_id: str) -> None:
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).set_terminated(run_id)
