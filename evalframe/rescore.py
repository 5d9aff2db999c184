"""`python -m evalframe rescore run_id=ID penalties.missing=0.3`: re-score a logged run with new
weights, without any model call, and log the result as a new run linked to the old one.

Score functions are pure (step results + weights -> score) and weights enter no prompt, so a logged
run is replayed rather than special-cased per scorer:
- the command line becomes the run's own (tag evalframe.overrides) plus the new overrides, before
  Hydra composes it (command_line), so `penalties.missing=0.3` reaches every `${penalties}`
  interpolation exactly as in a normal run, and `-m` sweeps and `--cfg job` work as usual;
- the rows and outputs are the run's stored items (results.jsonl), whatever target made them;
- every judge request is served from the stored steps through the same door as the disk cache
  (cache.Replay). A request the run never made (a changed prompt, judge model or reply form) stops
  the re-score before anything is written or logged: that needs a normal run.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from evalframe import report
from evalframe.cache import Replay, ReplayMiss
from evalframe.context import Context
from evalframe.data import Row
from evalframe.errors import ConfigError
from evalframe.journal import Journal, read_items
from evalframe.objective import Objective
from evalframe.results import ItemResult, RunResult, StepResult, Usage
from evalframe.run import Given, evaluate, execute, plan, run_async
from evalframe.targets import Target

USAGE = "usage: python -m evalframe rescore run_id=<MLflow run id> [overrides, e.g. penalties.missing=0.3]"
OVERRIDES_TAG = "evalframe.overrides"
RESCORED_FROM_TAG = "evalframe.rescored_from"
# Keys of the old command line that do not carry over: where to log, how to run, what to do.
_NOT_CARRIED = ("rescore", "resume", "log_run", "tracking", "hydra", "cache", "concurrency")
# What a re-score takes from the stored items rather than from config.
_FROM_ITEMS = ("dataset", "target")


def _key(override: str) -> str:
    """The config key an override sets: `+a.b=1` -> `a.b`, `model@target.model=x` -> `target.model`."""
    name = override.split("=", 1)[0].lstrip("+~")
    return name.split("@", 1)[1] if "@" in name else name


def _top(override: str) -> str:
    return _key(override).split(".", 1)[0].split("/", 1)[0]


def _plain(override: str) -> str:
    return re.sub(r"\\(.)", r"\1", override)


def _is_override(arg: str) -> bool:
    return not arg.startswith("-")


def merge(old: list[str], new: list[str]) -> list[str]:
    """The old overrides with the new ones applied: a key set again, or a group chosen again, drops the
    old overrides of that key and of everything below it. Old keys that say where to log or how to run
    (tracking, cache, resume...) do not carry over: this command's own apply."""
    keys = {_key(o) for o in new if _is_override(o)}

    def replaced(o: str) -> bool:
        k = _key(o)
        return any(k == n or k.startswith(f"{n}.") for n in keys)

    kept = [o for o in old if _top(o) not in _NOT_CARRIED and not replaced(o)]
    return kept + new


def _tracking_uri(overrides: list[str]) -> str:
    """Where to look the run up: the tracking config this command composes to (uri default, env)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from evalframe.paths import CONF_DIR

    wanted = [o for o in overrides if _top(o) == "tracking"]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=wanted)
        uri = OmegaConf.select(cfg, "tracking.uri")
    except Exception as e:
        raise ConfigError(f"rescore: {' '.join(wanted)}: {str(e)[:300]}") from None
    if not uri:
        raise ConfigError("rescore reads the run from MLflow: set tracking.uri=... (tracking=none has none)")
    return str(uri)


def command_line(argv: list[str]) -> list[str]:
    """`rescore run_id=ID ARGS` -> the command line Hydra runs: ARGS' flags (-m, --config-dir...),
    the logged run's own overrides, ARGS' overrides (which win), and rescore=ID."""
    from hydra._internal.utils import get_args_parser

    from evalframe import tracking as mlflow_tracking

    ids = [a for a in argv if a.startswith("run_id=")]
    if len(ids) != 1 or not ids[0].removeprefix("run_id="):
        raise ConfigError(f"rescore needs one run_id=...\n{USAGE}")
    run_id = ids[0].removeprefix("run_id=")
    rest = [a for a in argv if a not in ids]
    try:
        new = list(get_args_parser().parse_args(rest).overrides)
    except SystemExit:
        raise ConfigError(f"cannot read the command line {' '.join(rest)}\n{USAGE}") from None
    fixed = [o for o in new if _top(o) in _FROM_ITEMS]
    if fixed:
        raise ConfigError(
            f"rescore re-scores the stored items of run {run_id}, so {' '.join(fixed)} cannot change "
            "them: run it normally (without rescore) for other rows or outputs"
        )
    tags = mlflow_tracking.run_tags(_tracking_uri(new), run_id)
    if OVERRIDES_TAG not in tags:
        raise ConfigError(
            f"run {run_id} was logged without its command line (tag {OVERRIDES_TAG}; an older evalframe "
            "logged it), so its config cannot be composed again: run it again normally, then rescore that run"
        )
    old = [str(o) for o in json.loads(tags[OVERRIDES_TAG])]
    flags = [a for a in rest if a not in new]  # argparse wants options before the overrides
    # Quoted: an id of digits and one 'e' would otherwise be read as a number.
    return [*flags, *merge(old, new), f"rescore='{run_id}'"]


class StoredOutputs(Target):
    """The outputs of the logged run, as it produced them (recorded or generated): no call."""

    def __init__(self, items: list[ItemResult]):
        self.items = {item.id: item for item in items}

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        def made(item: ItemResult) -> StepResult | None:
            step = item.target_step
            # The generation was paid for by the old run: this run's cost and usage stay 0.
            return replace(step, usage=Usage(), latency=0.0, attempts=0, cached=True) if step else None

        return [(self.items[row.id].output, made(self.items[row.id])) for row in rows]


class _Held(Journal):
    """Keeps nothing on disk while scoring: the whole re-score must succeed before a file is written."""

    def append(self, item: ItemResult) -> None:
        pass


def rows_of(items: list[ItemResult]) -> list[Row]:
    return [
        Row(
            id=i.id,
            input=i.input,
            ground_truth=i.ground_truth,
            output=i.output,
            line=n,
            extra=i.record,
            human=i.human,
        )
        for n, i in enumerate(items, start=1)
    ]


def replies(items: list[ItemResult]) -> dict[str, dict[str, Any]]:
    """Every judge request the run made, by cache key, with its reply or its failure."""
    stored: dict[str, dict[str, Any]] = {}
    for item in items:
        for result in item.scores.values():
            for step in result.steps:
                if step.key and (step.ok or step.error) and (step.key not in stored or step.ok):
                    stored[step.key] = {"raw": step.raw, "error": None if step.ok else step.error}
    return stored


def stored(items: list[ItemResult]) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str, str], float]]:
    """What a Replay serves: the run's judge replies and its cosines."""
    return replies(items), cosines(items)


def cosines(items: list[ItemResult]) -> dict[tuple[str, str, str], float]:
    """The cosine of (embedding model, output, ground truth) wherever the run computed one."""
    found: dict[tuple[str, str, str], float] = {}
    for item in items:
        for result in item.scores.values():
            per_model = result.details.get("cosine")
            if isinstance(per_model, dict) and item.ground_truth is not None:
                for model, value in per_model.items():
                    found[(model, item.output, item.ground_truth)] = float(value)
    return found


def compose(overrides: list[str]) -> dict[str, Any]:
    """The resolved config for a command line, composed by the running Hydra app (its config name
    and search path, so --config-dir applies): to find which override changed a request."""
    from hydra import compose as hydra_compose
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    try:
        cfg = hydra_compose(config_name=HydraConfig.get().job.config_name, overrides=overrides)
        config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except Exception as e:  # a group option or key that is not in this config (another --config-dir?)
        raise ConfigError(
            f"cannot compose the config from the overrides {' '.join(overrides)}: {str(e)[:400]}. "
            "If the run used --config-dir, pass the same --config-dir to rescore"
        ) from None
    return cast(dict[str, Any], config)


def replayed(items: list[ItemResult], source: str) -> Given:
    """The logged run as the pipeline's input: its rows and outputs, and its replies as the cache."""
    return Given(StoredOutputs(items), rows=rows_of(items), source=source, cache=Replay(*stored(items)))


def score(config: dict[str, Any], items: list[ItemResult], source: str) -> tuple[RunResult, Context]:
    """Score the stored items under `config` with every judge reply replayed (no call, no file)."""
    given = replayed(items, source)
    p = plan(config, given)
    ctx = Context(
        limiter=asyncio.Semaphore(int(config.get("concurrency", 8))), cache=given.cache or Replay({})
    )
    return run_async(execute(p, ctx, _Held(Path(".")), [])), ctx


def culprits(old: list[str], new: list[str], items: list[ItemResult], source: str) -> list[str]:
    """Which of the new overrides, each applied alone to the old command line, needs a new request."""
    found = []
    for override in new:
        try:
            score(compose(merge(old, [override])), items, source)
        except ReplayMiss:
            found.append(override)
        except Exception:  # another problem of this override is not what we look for
            continue
    return found


def explain(miss: ReplayMiss, run_id: str, guilty: list[str]) -> str:
    text = f"rescore: run {run_id} made no such judge request ({miss}); a re-score never calls a model. "
    if miss.step == "reason":
        return text + (
            "reason=llm has the judge write each reason from the score, so a new score needs new reason "
            "calls: add reason=analysis to rescore, or run normally (without rescore)"
        )
    if guilty:
        return text + (
            f"{' '.join(guilty)} changes a prompt, the judge model or its parameters, or a reply form, "
            "which needs new judge calls: run it normally (python -m evalframe ... without rescore)"
        )
    return text + (
        "A prompt file or evalframe's reply schema has changed since that run, or a combination of the "
        "overrides changes a request: run it normally (without rescore) to ask the judge again"
    )


def _fmt(value: float, signed: bool = False) -> str:
    return "–" if math.isnan(value) else f"{value:+.3f}" if signed else f"{value:.3f}"


def compare(old_metrics: dict[str, float], result: RunResult, run_id: str) -> str:
    """Old and new mean per scorer, printed and returned as Markdown for the run's description."""
    from rich.table import Table

    table = Table(title=f"rescore of run {run_id}")
    lines = ["| scorer | before | after |", "|---|---|---|"]
    for column in ("scorer", "mean before", "mean after", "change"):
        table.add_column(column, justify="left" if column == "scorer" else "right")
    for name, summary in result.summaries.items():
        before = old_metrics.get(f"{name}/mean", float("nan"))
        after = summary.mean
        table.add_row(name, _fmt(before), _fmt(after), _fmt(after - before, signed=True))
        lines.append(f"| {name} | {_fmt(before)} | {_fmt(after)} |")
    report.console.print(table)
    return "\n".join(lines)


def main(config: dict[str, Any], output_dir: Path, overrides: list[str]) -> tuple[int, Objective | None]:
    """Re-score the run named by `rescore` under `config` (its own command line plus this one's, see
    command_line); returns the exit code and the objective, as a normal run does."""
    from evalframe import tracking as mlflow_tracking

    run_id = str(config["rescore"])
    uri = (config.get("tracking") or {}).get("uri")
    if not uri:
        raise ConfigError("rescore reads the run from MLflow: set tracking.uri=... (tracking=none has none)")
    with tempfile.TemporaryDirectory() as tmp:
        logged = mlflow_tracking.fetch_run(str(uri), run_id, Path(tmp))
        items = read_items(logged.results_file)
    if not items:
        raise ConfigError(f"run {run_id}: its results.jsonl holds no items to re-score")
    # A sweep's jobs get their overrides back escaped (`http\://`): compare them unescaped.
    old = [str(o) for o in json.loads(logged.tags.get(OVERRIDES_TAG, "[]"))]
    plain, old_plain = [_plain(o) for o in overrides], [_plain(o) for o in old]
    if [o for o in merge(old_plain, plain) if o not in plain]:  # the run's own overrides are not here
        raise ConfigError(
            f"start a re-score with the sub-command, which takes the run's command line: {USAGE}"
        )
    new = [o for o in overrides if _plain(o) not in old_plain and _top(o) not in ("rescore", "hydra")]
    source = f"run {run_id} ({mlflow_tracking.RESULTS_ARTIFACT})"
    try:  # a dry run first: a request the run never made stops the re-score before any file is written
        result, ctx = score(config, items, source)
    except ReplayMiss as miss:
        raise ConfigError(explain(miss, run_id, culprits(old, new, items, source))) from None
    changes = " ".join(map(_plain, new)) or "its own config"
    print(f"re-scored {len(items)} items of run {run_id} with {changes}: {ctx.stats.calls} model calls")
    table = compare(logged.metrics, result, run_id)
    tracking = config["tracking"]
    if not tracking.get("run_name"):
        tracking["run_name"] = f"{logged.name} rescored"
    note = (
        f"Re-scored from run [{logged.name}](#/experiments/{logged.experiment_id}/runs/{run_id}) "
        f"(`{run_id}`) with `{changes}`, without any model call: every judge reply is that run's.\n\n"
        f"{table}\n"
    )
    tags = {
        RESCORED_FROM_TAG: run_id,
        "evalframe.rescore.overrides": json.dumps([_plain(o) for o in new]),
        "mlflow.note.content": note[:8000],  # MLflow's limit for a tag
    }
    # Every request is known to be in the run now: the normal pipeline journals, reports, gates and
    # logs the re-score, with the run's replies served in place of the judge's.
    rescored, code = evaluate(
        config, output_dir, overrides=overrides, given=replayed(items, source), tags=tags
    )
    return code, rescored.objective
