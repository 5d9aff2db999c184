"""The pipeline, top to bottom: config -> rows -> outputs -> scores -> results -> MLflow + console.

Everything that can be checked is checked before the first model call: config, credentials, every
dataset row and every prompt template.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from evalframe import data, gate, html_report, redaction, report
from evalframe import objective as objectives
from evalframe.cache import Cache
from evalframe.context import Context
from evalframe.data import Row
from evalframe.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_TRACKING, ConfigError, EvalframeError
from evalframe.journal import MANIFEST, Journal, read_items, resume_dir
from evalframe.redaction import redact_overrides
from evalframe.results import ItemResult, RunResult, ScoreResult
from evalframe.scorers import Scorer
from evalframe.targets import Target

T = TypeVar("T")


@dataclass
class Plan:
    """A validated evaluation, ready to run."""

    config: dict[str, Any]
    target: Target
    scorers: dict[str, Scorer]
    rows: data.Rows  # validated; read again window by window when the run executes


@dataclass
class Given:
    """What the caller already holds, used instead of building it from the config and checked the same
    way: the Python API's function, scorer objects and in-memory rows; a re-score's stored outputs,
    rows and judge replies."""

    target: Target | None = None
    scorers: Mapping[str, Scorer] = field(default_factory=dict)
    rows: list[data.Row] | None = None
    source: str = "data"  # what errors call the in-memory rows
    cache: Cache | None = None  # the replies to serve instead of the judge cache's (a re-score's)


def _build(spec: Mapping[str, Any], where: str) -> Any:
    """Build the object a config node's `_target_` names; errors say which key to fix."""
    from hydra.utils import get_class

    kwargs = {k: v for k, v in spec.items() if not k.startswith("_")}
    try:
        cls = get_class(spec["_target_"])
    except Exception:
        raise ConfigError(f"{where}._target_={spec.get('_target_')!r} is not an importable class") from None
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}; check the keys of {where}") from None


def plan(config: dict[str, Any], given: Given | None = None) -> Plan:
    """Build target and scorers, check credentials, read and validate every row and prompt."""
    given = given or Given()
    scorer_specs = config.get("scorers") or {}
    if not scorer_specs:
        raise ConfigError("no scorer selected; choose one, e.g. scorer=answer_similarity")
    scorers: dict[str, Scorer] = {}
    for name, spec in scorer_specs.items():
        scorer = given.scorers[name] if name in given.scorers else _build(spec, f"scorers.{name}")
        scorer.name = name
        scorers[name] = scorer
    target: Target = given.target if given.target is not None else _build(config["target"], "target")
    # Credentials first: a missing key is the most common mistake and costs nothing to find (a
    # re-score, whose replies are all stored, asks no model and needs none).
    if given.cache is None or given.cache.asks_models:
        for model in target.models():
            model.check_credentials("target.model")
        for model in {m for s in scorers.values() for m in s.models()}:
            model.check_credentials("model")
    if given.rows is not None:
        rows = data.Rows.of(given.rows, given.source)
    else:
        rows = data.Rows.from_config(config["dataset"])
    needs_truth = [name for name, scorer in scorers.items() if scorer.require_ground_truth]

    def check(window: list[Row]) -> None:
        target.validate(window, rows.source)
        for name in needs_truth:
            data.require(
                window, rows.source, "ground_truth", f"scorer {name} requires (require_ground_truth=true)"
            )

    first = rows.validate(check, window_size(config))  # the whole file, one pass, before any call
    for scorer in scorers.values():
        scorer.validate(first)
    return Plan(config, target, scorers, rows)


def window_size(config: Mapping[str, Any]) -> int:
    return int(config.get("window") or 2000)


async def execute(
    plan: Plan, ctx: Context, journal: Journal, done: list[ItemResult], keep: int | None = None
) -> RunResult:
    """Score the rows window by window (`window` rows at a time): memory holds one window's rows and
    items plus the run's aggregates, whatever the dataset's size. Items already done (resume) are
    counted, not redone; `keep` caps the items the result holds (all are in results.jsonl)."""
    finished = {item.id: item for item in done}
    result = RunResult(items=[], scorers=list(plan.scorers), keep=keep)
    for rows in plan.rows.windows(window_size(plan.config)):
        items = await _score_window(plan, ctx, journal, [row for row in rows if row.id not in finished])
        for row in rows:
            result.add(finished.pop(row.id) if row.id in finished else items[row.id])
    return result


async def _score_window(plan: Plan, ctx: Context, journal: Journal, todo: list[Row]) -> dict[str, ItemResult]:
    """Produce the outputs of `todo`, score them with every scorer concurrently, and journal each
    item the moment its last scorer returns its result."""
    items: dict[str, ItemResult] = {}
    if not todo:  # a window finished before a resume: nothing to ask anyone
        return items
    waiting: dict[str, set[str]] = {}

    def record(scorer: str, row: Row, result: ScoreResult) -> None:
        item = items[row.id]
        item.scores[scorer] = result
        waiting[row.id].discard(scorer)
        if not waiting[row.id]:
            journal.append(item)
        ctx.advance()

    async def finish(scorer: str, row: Row, pending: Awaitable[ScoreResult]) -> None:
        record(scorer, row, await pending)

    produced = await plan.target.outputs(todo, ctx)
    ready: list[tuple[Row, str]] = []
    for row, (output, step) in zip(todo, produced, strict=True):
        item = ItemResult(
            row.id,
            row.input,
            row.ground_truth,
            output,
            target_step=step,
            human=row.human,
            record=dict(row.extra),
        )
        items[row.id], waiting[row.id] = item, set(plan.scorers)
        if step and step.error:
            # An output that could not be produced is unscored by every scorer, never scored as empty.
            item.target_error = step.error
            for name in plan.scorers:
                record(name, row, ScoreResult.unscored(f"target: {step.error}"))
        else:
            ready.append((row, output))
    await asyncio.gather(
        *(
            finish(name, row, pending)
            for name, scorer in plan.scorers.items()
            for (row, _), pending in zip(ready, scorer.score_each(ready, ctx), strict=True)
        )
    )
    return items


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run the event loop, on uvloop where available: it cuts the per-request CPU of the model
    door by about a quarter, and a large run is CPU-bound on that, not on the network."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def with_agreement(result: RunResult, config: Mapping[str, Any]) -> RunResult:
    """Compare every scorer with the dataset's human scores, when it has them."""
    human = list(result.human)
    if all(math.isnan(h) for h in human):
        return result
    from evalframe.agreement import agreement

    dataset = config.get("dataset") or {}
    for name in result.scorers:
        scores = list(result.scores[name])
        result.agreement[name] = agreement(
            scores, human, dataset.get("human_range") or (0, 1), float(config.get("agreement_threshold", 0.5))
        )
    return result


def run_name(config: Mapping[str, Any]) -> str:
    tracking = config.get("tracking") or {}
    if tracking.get("run_name"):
        return str(tracking["run_name"])
    from evalframe.sweep import job_label

    scorers = "+".join(config["scorers"])
    name = f"{config['dataset'].get('name', 'dataset')}-{scorers}"
    return f"{name} {job_label()}".strip()  # a sweep's jobs are told apart by their swept values


def log(
    result: RunResult,
    config: dict[str, Any],
    results_file: Path,
    overrides: list[str] | None = None,
    extra_tags: Mapping[str, str] | None = None,
) -> int:
    """Log a finished run to MLflow; if that fails the results stay on disk and we say how to retry.

    `overrides` (the command line) is kept as a tag: `rescore` re-composes the run's config from it.
    """
    tracking = config.get("tracking") or {}
    if not tracking.get("enabled"):
        return EXIT_OK
    from evalframe import tracking as mlflow_tracking

    scorers = config.get("scorers") or {}
    judges = sorted({str(s.get("model", {}).get("name")) for s in scorers.values() if s.get("model")})
    command = json.dumps(redact_overrides(overrides)) if overrides is not None else ""
    tags = {
        "evalframe.dataset": str(config["dataset"].get("name")),
        "evalframe.scorers": ",".join(scorers),
        "evalframe.model": ",".join(judges) or "none",
        # MLflow refuses tags over 8,000 characters: such a run logs, and rescore says why it cannot.
        **({"evalframe.overrides": command} if 0 < len(command) <= 8000 else {}),
        **(extra_tags or {}),
    }
    try:
        experiment_id, run_id = mlflow_tracking.log_run(
            result,
            config,
            uri=tracking["uri"],
            experiment=tracking["experiment"],
            run_name=run_name(config),
            tags=tags,
            results_file=results_file,
        )
    except Exception as e:
        print(
            f"error: could not log to MLflow at {tracking['uri']} ({type(e).__name__}: {str(e)[:300]}). "
            f"The results are safe in {results_file}; log them later with: "
            f"python -m evalframe log_run={results_file.parent}",
            file=sys.stderr,
        )
        return EXIT_TRACKING
    result.run_id = run_id
    report.where_to_look(tracking["uri"], experiment_id, run_id)
    return EXIT_OK


def evaluate(
    config: dict[str, Any],
    output_dir: Path,
    resume_from: Path | None = None,
    overrides: list[str] | None = None,
    given: Given | None = None,
    tags: Mapping[str, str] | None = None,
) -> tuple[RunResult, int]:
    """Run a resolved config end to end: plan, execute (journaling each item), gate, log, print.

    Returns the result and the exit code (gate, unscored rate, tracking). `tags` go on the MLflow run.
    """
    p = plan(config, given)
    objective = objectives.of_config(config)  # a typo in objective.metric must not cost a sweep
    gate_cfg = config.get("gate") or {}
    gate.validate(gate_cfg, list(p.scorers))
    journal = Journal(resume_from or output_dir)
    done = [i for i in read_items(journal.path) if set(i.scores) == set(p.scorers)] if resume_from else []
    if resume_from:
        print(f"resuming {resume_from}: {len(done)} of {len(p.rows)} items already done", file=sys.stderr)
    cache_cfg = config.get("cache") or {}
    ctx = Context(
        limiter=asyncio.Semaphore(int(config.get("concurrency", 8))),
        cache=(given and given.cache) or Cache(cache_cfg.get("mode", "readwrite"), cache_cfg.get("dir")),
    )
    journal.start(config, len(p.rows), resume=resume_from is not None, overrides=overrides)
    todo = len(p.rows) - len(done)
    try:
        with report.progress(todo * (len(p.scorers) + p.target.reports_progress), ctx.stats) as advance:
            ctx.advance = advance
            result = run_async(execute(p, ctx, journal, done, keep_items(config)))
    except KeyboardInterrupt:
        journal.close()
        print(
            f"\ninterrupted: finished items are saved in {journal.path}. Continue with the same command "
            "plus resume=true",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    with_agreement(result, config)
    result.objective = objectives.measure(objective, result.metrics())
    journal.finish({name: s.mean for name, s in result.summaries.items()}, result.objective)
    report.summary(result, journal.path, ctx.stats)
    html_report.write_run_report(result, journal.directory, run_name(config))
    code, checks = gate.evaluate(result, gate_cfg, float(config.get("max_unscored_rate", 0.1)))
    report.gate(code, checks)
    logged = log(result, config, journal.path, overrides, tags)
    return result, code or logged


def keep_items(config: Mapping[str, Any]) -> int | None:
    """How many items a result holds for MLflow's table, reasons.md and prompts.jsonl (null: all)."""
    keep = config.get("keep_items", 10000)
    return None if keep is None else int(keep)


def log_saved_run(directory: Path, config: dict[str, Any]) -> int:
    """`log_run=DIR`: log a run that finished while MLflow was unreachable."""
    journal = Journal(directory)
    manifest = journal.manifest
    if manifest.get("status") != "finished":
        raise ConfigError(
            f"log_run={directory}: no finished run there "
            f"({MANIFEST} says {manifest.get('status', 'nothing')}); resume it first with resume=PATH"
        )
    saved = manifest["config"]
    # Log where the current command says (tracking.uri=...), with the run's own config otherwise.
    saved["tracking"] = {**saved.get("tracking", {}), **config.get("tracking", {}), "enabled": True}
    items = read_items(journal.path)
    result = with_agreement(
        RunResult(items=items, scorers=list(saved["scorers"]), keep=keep_items(saved)), saved
    )
    result.objective = objectives.from_json(manifest.get("objective"))
    print(f"logging {len(items)} items from {journal.path}", file=sys.stderr)
    return log(result, saved, journal.path, manifest.get("overrides"))


def _quiet_libraries() -> None:
    """Hydra logs at INFO; the libraries' INFO chatter (model loading, DB migrations) hides our output."""
    for name in ("sentence_transformers", "mlflow", "LiteLLM", "litellm", "httpx", "alembic", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(cfg: Any) -> tuple[int, float]:
    """Hydra's task function: resolve the config, run, and turn every outcome into an exit code.

    Also returns the run's objective for a sweeper such as Optuna (the worst value when there is none).
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    from evalframe.sweep import require_multirun

    _quiet_libraries()
    hydra_cfg = HydraConfig.get()
    direction = "minimize" if OmegaConf.select(cfg, "objective.direction") == "minimize" else "maximize"
    failed = objectives.Objective("none", direction)
    output_dir = Path(hydra_cfg.runtime.output_dir)
    # Hydra has already written the command line to .hydra/: blank any secret passed on it.
    hydra_files = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else output_dir
    overrides = [o.split("=", 1) for o in hydra_cfg.overrides.task if "=" in o]
    redaction.scrub(hydra_files, [v for k, v in overrides if redaction.is_secret(k.lstrip("+~"))])
    try:
        try:
            config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as e:
            raise ConfigError(
                f"{e.full_key} is required: set it on the command line ({e.full_key}=...)"
            ) from None
        except OmegaConfBaseException as e:
            raise ConfigError(f"config error: {e}") from None
        config = cast(dict[str, Any], config)
        redaction.scrub(hydra_files, list(redaction.values(config)))  # secrets set in YAML files too
        if config.get("log_run"):
            return log_saved_run(Path(config["log_run"]), config), failed.worst
        if config.get("rescore"):
            from evalframe import rescore

            code, objective = rescore.main(config, output_dir, list(hydra_cfg.overrides.task))
            return code, (objective or failed).returned()
        require_multirun(hydra_cfg)
        # Hydra's default run directory is outputs/DATE/TIME: unfinished runs are looked for there.
        outputs = output_dir.parent.parent
        resume_from = resume_dir(config.get("resume"), outputs, config)
        result, code = evaluate(config, output_dir, resume_from, list(hydra_cfg.overrides.task))
        return code, (result.objective or failed).returned()
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code, failed.worst
