"""The pipeline, top to bottom: plan (config -> target, scorers, validated rows), execute (rows ->
outputs -> scores, journaled item by item), aggregate (agreement, objective), then the results go to
the console, report.html and MLflow.

Everything that can be checked is checked before the first model call: config, credentials, every
dataset row and every prompt template.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from evalframe import data, gate, html_report, report, tracking
from evalframe import objective as objectives
from evalframe.agreement import with_agreement
from evalframe.cache import Cache
from evalframe.context import Context
from evalframe.data import Row
from evalframe.errors import EXIT_INTERRUPTED, ConfigError
from evalframe.journal import Journal, read_items
from evalframe.results import ItemResult, Objective, RunResult, ScoreResult
from evalframe.scorers import Scorer
from evalframe.summary import Summary
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


class _Room:
    """Places for items in flight: `take(n)` waits until n are free, `give()` frees one (an item
    journaled), `fail(e)` makes the waiting (and any later) `take` raise e. One taker: the loop that
    reads the rows."""

    def __init__(self, size: int):
        self.free = size
        self.error: BaseException | None = None
        self._wanted: tuple[int, asyncio.Future[None]] | None = None

    async def take(self, n: int) -> None:
        if self.error is None and self.free < n:
            freed = asyncio.get_running_loop().create_future()
            self._wanted = (n, freed)
            await freed
        if self.error is not None:
            raise self.error
        self.free -= n

    def give(self) -> None:
        self.free += 1
        if self._wanted and self.free >= self._wanted[0]:
            self._wake()

    def fail(self, error: BaseException) -> None:
        self.error = self.error or error
        self._wake()

    def _wake(self) -> None:
        if self._wanted and not self._wanted[1].done():
            self._wanted[1].set_result(None)
        self._wanted = None


def flow(plan: Plan) -> tuple[int, int]:
    """(rows started together, most items in flight). Rows start one by one, or in the chunks a
    scorer or target works best with (embedding batches); about twice `concurrency` items are in
    flight, so the limiter always has requests waiting while each item's steps follow one another
    closely (the first items finish within a few latencies, not after every row's first step), and
    never more than `window` (memory)."""
    window = window_size(plan.config)
    chunk = min(window, max([plan.target.chunk, *(s.chunk for s in plan.scorers.values())]))
    concurrency = int(plan.config.get("concurrency", 8))
    return chunk, min(window, max(2 * concurrency, 2 * chunk))


async def execute(
    plan: Plan, ctx: Context, journal: Journal, done: list[ItemResult], keep: int | None = None
) -> RunResult:
    """Score the rows as a continuous flow: a bounded number of items in flight (flow()), the next
    rows starting as soon as items finish, never waiting for the slowest item of a window. Memory
    holds the items in flight plus the run's aggregates, whatever the dataset's size. Items already
    done (resume) are counted, not redone; `keep` caps the items the result holds (all are in
    results.jsonl)."""
    finished = {item.id: item for item in done}
    result = RunResult(items=[], scorers=list(plan.scorers), keep=keep)
    chunk, most = flow(plan)
    room = _Room(most)
    tasks: set[asyncio.Task[None]] = set()
    # Items finish in any order; the ones the result keeps are put back in the rows' order. Only the
    # first `keep + most` rows can be among them (at most `most` items are in flight).
    order: dict[str, int] = {}

    def add(item: ItemResult) -> None:
        result.add(item)
        room.give()

    def ended(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            room.fail(cast(BaseException, task.exception()))  # a rejected key ends the run, as it did

    async def start(rows: list[Row]) -> None:
        await room.take(len(rows))
        task = asyncio.ensure_future(_score_rows(plan, ctx, journal, rows, add))
        tasks.add(task)
        task.add_done_callback(ended)

    try:
        todo: list[Row] = []
        for n, row in enumerate(plan.rows):
            if keep is None or n < keep + most:
                order[row.id] = n
            if row.id in finished:
                result.add(finished.pop(row.id))
                continue
            todo.append(row)
            if len(todo) == chunk:
                await start(todo)
                todo = []
        if todo:
            await start(todo)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    result.items.sort(key=lambda item: order.get(item.id, len(order)))
    return result


async def _score_rows(
    plan: Plan, ctx: Context, journal: Journal, todo: list[Row], add: Callable[[ItemResult], None]
) -> None:
    """Produce the outputs of `todo`, score them with every scorer concurrently, and journal (and
    `add`) each item the moment its last scorer returns its result."""
    items: dict[str, ItemResult] = {}
    waiting: dict[str, set[str]] = {}

    def record(scorer: str, row: Row, result: ScoreResult) -> None:
        item = items[row.id]
        item.scores[scorer] = result
        waiting[row.id].discard(scorer)
        if not waiting[row.id]:
            journal.append(item)
            add(items.pop(row.id))
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


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run the event loop, on uvloop where available: it cuts the per-request CPU of the model
    door by about a quarter, and a large run is CPU-bound on that, not on the network."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def evaluate(
    config: dict[str, Any],
    output_dir: Path,
    resume_from: Path | None = None,
    overrides: list[str] | None = None,
    given: Given | None = None,
    annotate: Callable[[RunResult], Mapping[str, str]] | None = None,
) -> tuple[RunResult, int]:
    """Run a resolved config end to end: plan, execute (journaling each item), aggregate, then print,
    write report.html, gate and log to MLflow. Returns the result and the exit code (gate, unscored
    rate, tracking). `annotate` gives tags for the MLflow run once the result is known."""
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
    html_report.preload()  # while the models answer: the report at the end then starts at once
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
    result.stats = ctx.stats
    aggregate(result, config, objective)
    journal.finish(result.means, result.objective)
    report.summary(Summary.of(result), journal.path)
    html_report.write_run_report(result, journal.directory, tracking.run_name(config))
    code, checks = gate.evaluate(result, gate_cfg, float(config.get("max_unscored_rate", 0.1)))
    report.gate(code, checks)
    logged = tracking.log(result, config, journal.path, overrides, annotate(result) if annotate else None)
    return result, code or logged


def aggregate(result: RunResult, config: Mapping[str, Any], objective: Objective) -> RunResult:
    """What a finished run adds up to beyond its means: agreement with people, the objective."""
    with_agreement(result, config)
    result.objective = objectives.measure(objective, result.metrics())
    return result


def keep_items(config: Mapping[str, Any]) -> int | None:
    """How many items a result holds for MLflow's table, reasons.md and prompts.jsonl (null: all)."""
    keep = config.get("keep_items", 10000)
    return None if keep is None else int(keep)
