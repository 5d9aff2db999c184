"""One evaluation run to MLflow: its settings as params, its metrics, one table of items and a few
artifacts (config, prompts, reasons, results.jsonl, report.html), then its items' traces; `log()`
is the entry, which says nothing itself: it returns the exit code and where the run went, and its
warnings and errors come back in the caller's notes.

One run per invocation, logged in a handful of batched calls (params, metrics, one table, a few
artifacts) rather than one call per item: 1,000 single log_metric calls take seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalframe.errors import EXIT_OK, EXIT_TRACKING
from evalframe.models.steps import cut
from evalframe.redaction import redact, redact_overrides, scrub_text
from evalframe.report import html as html_report
from evalframe.results import summary
from evalframe.results.manifest import Manifest
from evalframe.results.run_result import RunResult
from evalframe.results.scores import RAW_REPLY_LIMIT
from evalframe.results.table import items_table
from evalframe.tracking.store import (
    display_uri,
    fluent_store,
    holder,
    imported,
    locked,
    locked_line,
    one_line,
    reap,
    store_uri,
    unavailable,
)
from evalframe.tracking.sweeps import PARENT_RUN, run_name
from evalframe.tracking.traces import trace_items

OVERRIDES_TAG = "evalframe.overrides"  # the run's command line: rescore composes its config again from it


@dataclass(frozen=True)
class Extra:
    """What a run logs beyond its own figures and files: metrics, and artifacts (where in the run's
    artifacts, "" for the top -> a file or a folder)."""

    metrics: Mapping[str, float] = field(default_factory=dict)
    artifacts: Mapping[str, Path] = field(default_factory=dict)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> {"model.name": "openai/gpt-4o-mini", ...}; no entry for a null value or an
    empty mapping (a placeholder, not a setting)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif value is not None:
            flat[name] = json.dumps(value) if isinstance(value, list) else str(value)
    return flat


def params(config: Mapping[str, Any]) -> dict[str, str]:
    """The run's settings as MLflow params, each value once and no secret. A scorer's key equal to the
    root key of the same name (`penalties`, `model`, `reason`: the scorer files take them by
    interpolation) is the root's, logged once under the root's name, so a swept `penalties.missing` is
    one column in the compare view and one axis of its parallel-coordinates chart. The root `model`
    (the judge) only when a scorer asks it: a run of exact_match or local embeddings called no model."""
    safe = redact(config)
    specs = safe.get("scorers") or {}
    scorers = {
        name: {k: v for k, v in spec.items() if not (k in safe and safe[k] == v)}
        if isinstance(spec, Mapping)
        else spec
        for name, spec in specs.items()
    }
    judged = any(
        isinstance(s, Mapping) and "model" in s and s["model"] == safe.get("model") and not s.get("models")
        for s in specs.values()
    )
    root = {k: v for k, v in safe.items() if k != "model" or judged}
    return flatten({**root, "scorers": scorers})


def prompts_log(result: RunResult, limit: int = RAW_REPLY_LIMIT) -> str:
    """Every rendered prompt and raw reply, one JSON object per model call; a message longer than
    `limit` characters (raw_reply_limit) is cut to its head, as results.jsonl keeps it
    (StepResult.stored; a run directory of an older evalframe may hold it whole)."""
    return "\n".join(prompt_lines(result, limit)) + "\n"


def prompt_lines(result: RunResult, limit: int = RAW_REPLY_LIMIT) -> Iterator[str]:
    """prompts_log's lines, one model call at a time (a large run's file is never one string)."""
    for item in result.items:
        steps = [("target", item.target_step)] if item.target_step else []
        steps += [(name, s) for name, r in item.scores.items() for s in r.steps]
        for scorer, step in steps:
            if step.messages:
                yield json.dumps(
                    {
                        "item": item.id,
                        "scorer": scorer,
                        "step": step.step,
                        "messages": [
                            {**m, "content": cut(m["content"], limit, "message")} for m in step.messages
                        ],
                        "raw": step.raw,
                        "error": step.error,
                    },
                    ensure_ascii=False,
                )


def log_prompts(result: RunResult, limit: int) -> None:
    """prompts.jsonl to the active run, written to a file a line at a time: the same text as
    prompts_log without holding it (and its lines) in memory."""
    import mlflow

    with tempfile.TemporaryDirectory(prefix="evalframe-prompts-") as tmp:
        path = Path(tmp) / "prompts.jsonl"
        with path.open("w", encoding="utf-8") as f:
            lines = iter(prompt_lines(result, limit))
            first = next(lines, "")
            f.write(first)
            for line in lines:
                f.write("\n" + line)
            f.write("\n")
        mlflow.log_artifact(str(path))


def log_run(
    result: RunResult,
    config: Mapping[str, Any],
    *,
    uri: str,
    experiment: str,
    run_name: str,
    tags: Mapping[str, str],
    results_file: Path,
    notes: list[str],
    into: str | None = None,
) -> tuple[str, str]:
    """Log one evaluation run. Returns (experiment id, run id); warnings go to `notes`. `into` is an
    open run to log it into instead of a new one (a sharded evaluation's whole, into its sweep's run).

    `results_file` is the run's results.jsonl (every item with every step), logged as it is rather
    than serialised a second time.
    """
    import mlflow

    safe = redact(config)
    with fluent_store(uri):
        experiment_id = mlflow.set_experiment(experiment).experiment_id
        reap(mlflow.MlflowClient(store_uri(uri)), experiment_id, notes)
        parent = os.environ.get(PARENT_RUN)
        # In a sweep each job is a child of the sweep's run: the UI nests them, and its compare view and
        # parallel-coordinates chart show swept params against scores.
        nesting = {"mlflow.parentRunId": parent} if parent and not into else {}
        metrics = result.metrics()
        objective = result.objective
        if objective is not None:
            # One name in every run, whatever it measures: the UI's parallel-coordinates chart and
            # sort-by-column work across sweeps; the tag says which metric it is.
            tags = {**tags, "evalframe.objective": f"{objective.metric} ({objective.direction})"}
            if not math.isnan(objective.value):  # left out, like every other NaN metric
                metrics["objective"] = objective.value
        opened = (
            mlflow.start_run(run_id=into)
            if into
            else mlflow.start_run(run_name=run_name, tags={**nesting, **holder()})
        )
        with opened as run:
            mlflow.set_tags(dict(tags))
            if len(result.items) < result.count:
                # A large run's table, reasons.md and prompts.jsonl show its first items (keep_items);
                # results.jsonl, logged below, holds every one.
                mlflow.set_tag("evalframe.items_shown", f"{len(result.items)} of {result.count}")
            mlflow.log_params(params(config))
            mlflow.log_metrics(metrics)
            log_limits(result, run.info.run_id)
            mlflow.log_table(data=items_table(result), artifact_file="items.json")
            mlflow.log_dict(safe, "config.yaml")
            limit = int(config.get("raw_reply_limit") or RAW_REPLY_LIMIT)
            log_prompts(result, limit)
            mlflow.log_text(summary.reasons(result), "reasons.md")
            mlflow.log_artifact(str(results_file))
            log_report(result, results_file.parent, run_name)
            trace_items(result, config, notes)
            return run.info.experiment_id, run.info.run_id


def log_extra(uri: str, run_id: str, extra: Extra, notes: list[str]) -> int:
    """`extra`'s metrics and artifacts into the logged run `run_id`; the exit code, 3 with an error in
    `notes` when the store would not take them (the run itself is logged)."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(store_uri(uri))
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in extra.metrics.items()])
        for where, path in extra.artifacts.items():
            put = client.log_artifacts if path.is_dir() else client.log_artifact
            put(run_id, str(path), where or None)
    except Exception as e:
        notes.append(
            f"error: MLflow run {run_id} is logged without {', '.join(extra.artifacts) or 'its figures'}"
            f" ({type(e).__name__}: {one_line(e)})"
        )
        return EXIT_TRACKING
    return EXIT_OK


def log_limits(result: RunResult, run_id: str) -> None:
    """Each model's in-flight limit over the run as a metric with steps, `usage/in_flight_limit/<model>`
    (step: milliseconds since the run's first request to it), in one batch."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    points = [
        Metric(
            "usage/in_flight_limit/" + re.sub(r"[^\w./ :-]", "_", name),
            float(limit),
            int((limits.begun + seconds) * 1000),
            int(seconds * 1000),
        )
        for name, limits in result.stats.limits.items()
        for seconds, limit in limits.history
    ]
    if points:
        MlflowClient().log_batch(run_id, metrics=points)


def log_report(result: RunResult, run_dir: Path, title: str) -> None:
    """report.html and plots/ of the active run. The run normally wrote them into its directory
    already; a run logged later (`evalframe log-run DIR`) from an older directory gets them built here."""
    import mlflow

    if not (run_dir / html_report.REPORT).is_file():
        html_report.write_run_report(result, run_dir, title)
    mlflow.log_artifact(str(run_dir / html_report.REPORT))
    if (run_dir / html_report.PLOTS).is_dir():
        mlflow.log_artifacts(str(run_dir / html_report.PLOTS), html_report.PLOTS)


def log(
    result: RunResult,
    config: Mapping[str, Any],
    results_file: Path,
    overrides: list[str] | None = None,
    extra_tags: Mapping[str, str] | None = None,
    *,
    notes: list[str],
    into: str | None = None,
) -> tuple[int, tuple[str, str] | None]:
    """Log a finished run to MLflow, if tracking is on; if that fails the results stay on disk, and an
    error in `notes` says how to retry. Returns the exit code and, when the run was logged, its
    (experiment id, run id). `overrides` (the command line) is kept as a tag."""
    tracking = config.get("tracking") or {}
    if not tracking.get("enabled"):
        return EXIT_OK, None
    command = json.dumps(redact_overrides(overrides)) if overrides is not None else ""
    verdict = result.verdict
    tags = {
        "evalframe.dataset": str(config["dataset"].get("name")),
        "evalframe.scorers": ",".join(config.get("scorers") or {}),
        "evalframe.model": summary.judges(config),
        # The gate's verdict, so a failed run is findable in MLflow (a run that failed its gate still
        # finished: MLflow's own status says nothing of it).
        **({"evalframe.gate": verdict.word, "evalframe.exit_code": str(verdict.code)} if verdict else {}),
        **({"evalframe.gate.failed": "; ".join(verdict.failed)[:5000]} if verdict and verdict.failed else {}),
        # MLflow refuses tags over 8,000 characters: such a run logs, and rescore says why it cannot.
        **({OVERRIDES_TAG: command} if 0 < len(command) <= 8000 else {}),
        **(extra_tags or {}),
    }
    tags = {k: scrub_text(v) for k, v in tags.items()}  # a sweep's job may vary a secret
    name = _named(config, results_file, overrides)
    imported()  # a preload's import finished first (store.preload)
    problem = unavailable(tracking["uri"])  # within seconds, where MLflow would take minutes
    if problem is None:
        try:
            experiment_id, run_id = log_run(
                result,
                config,
                uri=tracking["uri"],
                experiment=tracking["experiment"],
                run_name=name,
                tags=tags,
                results_file=results_file,
                notes=notes,
                into=into,
            )
        except Exception as e:  # on one line: SQLAlchemy's carry the statement and a link below
            problem = locked_line(tracking["uri"]) if locked(e) else f"{type(e).__name__}: {one_line(e)}"
    if problem:
        notes.append(
            f"error: could not log to MLflow at {display_uri(tracking['uri'])} ({problem}). "
            f"The results are safe in {results_file}; log them later with: "
            f"evalframe log-run {results_file.parent}"
        )
        return EXIT_TRACKING, None
    result.run_id = run_id
    return EXIT_OK, (experiment_id, run_id)


def _named(config: Mapping[str, Any], results_file: Path, overrides: list[str] | None) -> str:
    """The run's name: what the command line changed and when the run started (run.json's start: a run
    logged later with log-run keeps the time it was made)."""
    started = Manifest.read(results_file.parent).started_at if results_file.parent.is_dir() else None
    return scrub_text(run_name(config, overrides, started))
