"""The re-score mode (`evalframe rescore run_id=ID penalties.missing=0.3`, read by evalframe.cli.rescore):
a logged run re-scored with new weights, without any model call, and logged as a new run linked to the
old one.

Score functions are pure (step results + weights -> score) and weights enter no prompt, so a logged
run is replayed rather than special-cased per scorer:
- the command line becomes the run's own (tag evalframe.overrides) plus the new overrides, before
  Hydra composes it (evalframe.cli.rescore), so `penalties.missing=0.3` reaches every `${penalties}`
  interpolation exactly as in a normal run, and `-m` sweeps and `--cfg job` work as usual;
- the rows and outputs are the run's stored items (results.jsonl), whatever target made them;
- every model request is served from the stored steps through the same door as the disk cache
  (cache.Replay). A request the run never made (a changed prompt, judge model or reply form) stops
  the re-score before anything is logged: that needs a normal run.
The run is read from MLflow once, by the sub-command, and handed to the Hydra job(s) through the
environment (a joblib sweep's workers inherit it).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalframe.config import compose as configs
from evalframe.data import rows as data, traces
from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.cache import Replay, ReplayMiss
from evalframe.models.context import Context
from evalframe.models.steps import StepResult, Usage
from evalframe.report import console as report
from evalframe.results.intervals import paired
from evalframe.results.journal import RESULTS
from evalframe.results.results_file import read_items
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, Objective
from evalframe.results.summary import fmt, fmt_interval
from evalframe.run import modes
from evalframe.run.earlier import row_of
from evalframe.run.pipeline import evaluate, run_plan
from evalframe.run.planning import Given, plan
from evalframe.targets.base import Target
from evalframe.tracking.read import RESULTS_ARTIFACT

USAGE = (
    "usage: evalframe rescore run_id=RUN [overrides, e.g. penalties.missing=0.3]\n"
    "  RUN: an MLflow run id, last (the experiment's newest run), last~1 (the one before), or the start of\n"
    "  a name (evalframe runs lists them; tracking.uri=... and tracking.experiment=... say where)"
)
RESCORED_FROM_TAG = "evalframe.rescored_from"
LOGGED_RUN = "EVALFRAME_RESCORE_RUN"  # the run the sub-command read, as JSON, for the Hydra job(s)
# Keys of the old command line that do not carry over: where to log, how to run, what to do (`rescore`:
# the key runs re-scored by an earlier evalframe carry on their command line).
_NOT_CARRIED = ("rescore", "resume", "tracking", "hydra", "cache", "concurrency")
# What a re-score takes from the stored items rather than from config.
FROM_ITEMS = ("dataset", "target")


@dataclass
class Logged:
    """The run being re-scored, as the sub-command read it from MLflow."""

    run_id: str
    name: str
    experiment_id: str
    metrics: dict[str, float]
    results_file: str  # its results.jsonl, downloaded
    new: list[str]  # the overrides this re-score adds to the run's own

    @classmethod
    def from_env(cls, run_id: str) -> Logged:
        found = json.loads(os.environ.get(LOGGED_RUN) or "{}")
        if found.get("run_id") != run_id:
            raise ConfigError(f"start a re-score with the sub-command, which reads the run\n{USAGE}")
        return cls(**found)


def _key(override: str) -> str:
    """The config key an override sets, as Hydra reads it: `+a.b=1` -> `a.b`, `model@target.model=x` ->
    `target.model`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_override(override)
    except HydraException as e:
        raise ConfigError(f"cannot read the override {override!r}: {e}\n{USAGE}") from None
    return parsed.package or parsed.key_or_group


def top_key(override: str) -> str:
    return _key(override).split(".", 1)[0].split("/", 1)[0]


def merge(old: list[str], new: list[str]) -> list[str]:
    """The old overrides with the new ones applied: a key set again, or a group chosen again, drops the
    old overrides of that key and of everything below it. Old keys that say where to log or how to run
    (tracking, cache, resume...) do not carry over: this command's own apply. Flags (-m) pass through."""
    keys = {_key(o) for o in new if not o.startswith("-")}

    def replaced(o: str) -> bool:
        k = _key(o)
        return any(k == n or k.startswith(f"{n}.") for n in keys)

    kept = [o for o in old if top_key(o) not in _NOT_CARRIED and not replaced(o)]
    return kept + new


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


def rows_of(items: list[ItemResult], dataset: Mapping[str, Any]) -> list[Row]:
    """The logged run's rows, their list columns (contexts, tool calls) read from the stored records
    through the run's column mapping, with what a live target handed over (earlier.row_of)."""
    columns = data.column_names(dataset)
    # A trace dataset's records are traces: their fields come through its selectors, not by column.
    traced = traces.selectors(dataset) if dataset.get("format") == "mlflow_traces" else None
    return [row_of(item, columns, n, traced) for n, item in enumerate(items, start=1)]


def replies(items: list[ItemResult]) -> dict[str, dict[str, Any]]:
    """Every model request the run made (judge replies, embedding cosines), by cache key, with its
    reply or its failure."""
    stored: dict[str, dict[str, Any]] = {}
    for item in items:
        for result in item.scores.values():
            for step in result.steps:
                if step.key and (step.ok or step.error) and (step.key not in stored or step.ok):
                    # A huge valid reply is stored parsed only (StepResult.stored): replay that.
                    raw = json.dumps(step.reply) if step.raw is None and step.ok else step.raw
                    stored[step.key] = {"raw": raw, "error": None if step.ok else step.error}
    return stored


def replayed(items: list[ItemResult], source: str, dataset: Mapping[str, Any] | None = None) -> Given:
    """The logged run as the pipeline's input: its rows and outputs, and its replies as the cache
    (`dataset`: the run's dataset config, whose column mapping reads the rows' list columns)."""
    rows = rows_of(items, dataset or {})
    return Given(StoredOutputs(items), rows=rows, source=source, cache=Replay(replies(items)))


def culprits(old: list[str], new: list[str], items: list[ItemResult], source: str) -> list[str]:
    """Which of the new overrides, each applied alone to the old command line, needs a new request
    (only when a re-score already failed: it scores the items again once per override, in a scratch
    directory, publishing nothing)."""
    found = []
    for override in new:
        try:
            command = merge(old, [override])
            config = configs.resolve(configs.compose(command), command)
            given = replayed(items, source, config["dataset"])
            with tempfile.TemporaryDirectory() as scratch:
                run_plan(plan(config, given), Path(scratch), modes.PROBE, given=given)
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


COMPARED = ("scorer", "mean before [95% CI]", "mean after [95% CI]", "change [95% CI]")


def compare(
    old_metrics: Mapping[str, float], old: list[ItemResult], new: list[ItemResult], result: RunResult
) -> list[list[str]]:
    """A row per scorer, cells as COMPARED names them: the mean before, with its interval, as the
    logged run reported them (its metrics); the mean after as this run reports them; and the change:
    the paired mean difference of the items both scored, with its interval (intervals.paired, as
    `evalframe compare`), so a change the re-scored items agree on is told from noise."""
    now = {i.id: i.scores for i in new}
    rows = []
    for name, summary in result.summaries.items():
        m = f"{name}/mean"
        low, high = (old_metrics.get(f"{m}_ci_{end}", math.nan) for end in ("low", "high"))
        scored = int(old_metrics.get(f"{name}/scored", 0))
        before = [i.scores[name].score if name in i.scores else math.nan for i in old]
        after = [now[i.id][name].score if i.id in now else math.nan for i in old]
        change = paired(before, after, test=False)  # no p-value shown: its test takes seconds
        rows.append(
            [
                name,
                f"{fmt(old_metrics.get(m, math.nan))} {fmt_interval((low, high), scored)}",
                f"{fmt(summary.mean)} {fmt_interval(result.intervals.get(m), summary.scored)}",
                f"{fmt(change.mean, signed=True)} {fmt_interval(change.interval, change.n)}",
            ]
        )
    return rows


def main(
    run_id: str, config: dict[str, Any], output_dir: Path, overrides: list[str]
) -> tuple[int, Objective | None]:
    """Re-score the logged run `run_id` under `config` (its own command line plus this one's:
    evalframe.cli.rescore) through the pipeline, once; returns the exit code and the objective."""
    logged = Logged.from_env(run_id)
    items = read_items(Path(logged.results_file))
    if not items:
        raise ConfigError(f"run {run_id}: its results.jsonl holds no items to re-score")
    source = f"run {run_id} ({RESULTS_ARTIFACT})"
    changes = " ".join(logged.new) or "its own config"
    if not config["tracking"].get("run_name"):
        config["tracking"]["run_name"] = f"{logged.name} rescored"

    def annotate(result: RunResult) -> dict[str, str]:
        print(
            f"re-scored {result.count} items of run {run_id} with {changes}: {result.stats.calls} model calls"
        )
        rows = compare(logged.metrics, items, read_items(output_dir / RESULTS), result)
        report.table(f"rescore of run {run_id}", COMPARED, rows)
        table = "\n".join(
            ["| scorer | before | after | change |", "|---|---|---|---|"]
            + [f"| {' | '.join(r)} |" for r in rows]
        )
        note = (
            f"Re-scored from run [{logged.name}](#/experiments/{logged.experiment_id}/runs/{run_id}) "
            f"(`{run_id}`) with `{changes}`, without any model call: every judge reply is that run's.\n\n"
            f"{table}\n"
        )
        return {
            RESCORED_FROM_TAG: run_id,
            "evalframe.rescore.overrides": json.dumps(logged.new),
            "mlflow.note.content": note[:8000],  # MLflow's limit for a tag
        }

    old = [o for o in overrides if o not in logged.new]
    given = replayed(items, source, config["dataset"])
    try:
        result, code = evaluate(config, output_dir, overrides=overrides, given=given, annotate=annotate)
    except ReplayMiss as miss:
        raise ConfigError(explain(miss, run_id, culprits(old, logged.new, items, source))) from None
    return code, result.objective
