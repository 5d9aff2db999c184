"""The pipeline, top to bottom: config -> rows -> outputs -> scores -> results -> MLflow + console.

Everything that can be checked is checked before the first model call: config, credentials, every
dataset row and every prompt template.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from evalframe import data, report
from evalframe.cache import Cache
from evalframe.errors import ConfigError, EvalframeError
from evalframe.results import ItemResult, RunResult, ScoreResult, to_jsonable
from evalframe.scorers import Context, Scorer
from evalframe.targets import Target

T = TypeVar("T")


@dataclass
class Plan:
    """A validated evaluation, ready to run."""

    config: dict[str, Any]
    target: Target
    scorers: dict[str, Scorer]
    rows: list[data.Row]


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


def plan(config: dict[str, Any]) -> Plan:
    """Build target and scorers, check credentials, read and validate every row and prompt."""
    scorer_specs = config.get("scorers") or {}
    if not scorer_specs:
        raise ConfigError("no scorer selected; choose one, e.g. scorer=answer_similarity")
    scorers: dict[str, Scorer] = {}
    for name, spec in scorer_specs.items():
        scorer = _build(spec, f"scorers.{name}")
        scorer.name = name
        scorers[name] = scorer
    target: Target = _build(config["target"], "target")
    # Credentials first: a missing key is the most common mistake and costs nothing to find.
    for model in target.models():
        model.check_credentials("target.model")
    for model in {m for s in scorers.values() for m in s.models()}:
        model.check_credentials("model")
    rows = data.load_rows(config["dataset"])
    source = str(config["dataset"].get("path") or "the sample dataset")
    target.validate(rows, source)
    for scorer in scorers.values():
        if scorer.require_ground_truth:
            data.require(
                rows, source, "ground_truth", f"scorer {scorer.name} requires (require_ground_truth=true)"
            )
        scorer.validate(rows[0])
    return Plan(config, target, scorers, rows)


async def execute(plan: Plan, ctx: Context) -> RunResult:
    """Produce the outputs, then let every scorer score them concurrently."""
    produced = await plan.target.outputs(plan.rows, ctx)
    items = [
        ItemResult(id=row.id, input=row.input, ground_truth=row.ground_truth, output=output, target_step=step)
        for row, (output, step) in zip(plan.rows, produced, strict=True)
    ]
    # An item whose output could not be produced is unscored by every scorer, never scored as empty.
    ready = [
        (row, item)
        for row, item in zip(plan.rows, items, strict=True)
        if not (item.target_step and item.target_step.error)
    ]
    for item in items:
        if item.target_step and item.target_step.error:
            item.target_error = item.target_step.error
            item.scores = {
                name: ScoreResult.unscored(f"target: {item.target_error}") for name in plan.scorers
            }
    pairs = [(row, item.output) for row, item in ready]
    scored = await asyncio.gather(*(scorer.score(pairs, ctx) for scorer in plan.scorers.values()))
    for name, results in zip(plan.scorers, scored, strict=True):
        for (_, item), result in zip(ready, results, strict=True):
            item.scores[name] = result
    return RunResult(items=items, scorers=list(plan.scorers))


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run the event loop, on uvloop where available: it cuts the per-request CPU of the model
    door by about a quarter, and a large run is CPU-bound on that, not on the network."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def save_results(result: RunResult, directory: Path) -> Path:
    """Write every item to disk first: MLflow being down must never lose a finished run."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "results.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for item in result.items:
            f.write(json.dumps(to_jsonable(item), ensure_ascii=False) + "\n")
    return path


def run_name(config: Mapping[str, Any]) -> str:
    tracking = config.get("tracking") or {}
    if tracking.get("run_name"):
        return str(tracking["run_name"])
    scorers = "+".join(config["scorers"])
    return f"{config['dataset'].get('name', 'dataset')}-{scorers}"


def evaluate(config: dict[str, Any], output_dir: Path) -> RunResult:
    """Run a resolved config end to end: plan, execute, save, log, print."""
    p = plan(config)
    cache_cfg = config.get("cache") or {}
    ctx = Context(
        limiter=asyncio.Semaphore(int(config.get("concurrency", 8))),
        cache=Cache(cache_cfg.get("mode", "readwrite"), cache_cfg.get("dir")),
    )
    generates = bool(p.target.models())
    with report.progress(len(p.rows) * (len(p.scorers) + generates), ctx.stats) as advance:
        ctx.on_item = advance
        result = run_async(execute(p, ctx))
    saved = save_results(result, output_dir)
    report.summary(result, saved, ctx.stats)
    tracking = config.get("tracking") or {}
    if tracking.get("enabled"):
        from evalframe import tracking as mlflow_tracking

        judges = sorted({m.name for s in p.scorers.values() for m in s.models()})
        tags = {
            "evalframe.dataset": str(config["dataset"].get("name")),
            "evalframe.scorers": ",".join(p.scorers),
            "evalframe.model": ",".join(judges) or "none",
        }
        try:
            experiment_id, run_id = mlflow_tracking.log_run(
                result,
                config,
                uri=tracking["uri"],
                experiment=tracking["experiment"],
                run_name=run_name(config),
                tags=tags,
                results_file=saved,
            )
        except Exception as e:
            print(
                f"error: could not log to MLflow at {tracking['uri']} ({type(e).__name__}: {e}). "
                f"The results are safe in {saved}.",
                file=sys.stderr,
            )
            raise SystemExit(3) from None
        report.where_to_look(tracking["uri"], experiment_id, run_id)
    return result


def _quiet_libraries() -> None:
    """Hydra logs at INFO; the libraries' INFO chatter (model loading, DB migrations) hides our output."""
    for name in ("sentence_transformers", "mlflow", "LiteLLM", "litellm", "httpx", "alembic", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(cfg: Any) -> None:
    """Hydra's task function: resolve the config, run, and turn user errors into exit codes."""
    _quiet_libraries()
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        try:
            config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as e:
            raise ConfigError(
                f"{e.full_key} is required: set it on the command line ({e.full_key}=...)"
            ) from None
        except OmegaConfBaseException as e:
            raise ConfigError(f"config error: {e}") from None
        assert isinstance(config, dict)
        evaluate(cast(dict[str, Any], config), Path(HydraConfig.get().runtime.output_dir))
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
