"""MLflow logging: the only module that imports mlflow.

One run per invocation, logged in a handful of batched calls (params, metrics, one table, a few
artifacts) rather than one call per item: 1,000 single log_metric calls take seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.redaction import redact, redact_overrides
from evalframe.results import RunResult

# MLflow retries an unreachable server 7 times with doubling waits (minutes); fail within seconds instead:
# the results are already on disk, and `log_run=DIR` logs them later.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # not "Creating initial MLflow database tables..."


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
    if len(result.items) < result.count:
        lines += [f"The first {len(result.items)} of {result.count} items; all are in results.jsonl.", ""]
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
        if len(result.items) < result.count:
            # A large run's table, reasons.md and prompts.jsonl show its first items (keep_items);
            # results.jsonl, logged below, holds every one.
            mlflow.set_tag("evalframe.items_shown", f"{len(result.items)} of {result.count}")
        mlflow.log_params(flatten(safe))
        mlflow.log_metrics(result.metrics())
        mlflow.log_table(data=result.table(), artifact_file="items.json")
        mlflow.log_dict(safe, "config.yaml")
        mlflow.log_text(prompts_log(result), "prompts.jsonl")
        mlflow.log_text(reasons_report(result), "reasons.md")
        mlflow.log_artifact(str(results_file))
        return run.info.experiment_id, run.info.run_id


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
