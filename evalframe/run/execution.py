"""The execute stage of a run: rows -> outputs -> scores, as a continuous flow (evalframe.run.flow), each
item journaled the moment its last scorer returns. What comes before (the plan) and after (aggregate,
conclude, publish) is the lifecycle's: evalframe.run.pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from evalframe import redaction
from evalframe.data import rows as data
from evalframe.models.context import Context
from evalframe.models.steps import StepResult
from evalframe.results.journal import Journal
from evalframe.results.results_file import Finished
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.run import flow, reuse
from evalframe.run.planning import Plan


async def execute(
    plan: Plan, ctx: Context, journal: Journal, done: Finished, keep: int | None = None
) -> RunResult:
    """Score the rows as a continuous flow, each item journaled as it finishes; items already done
    (resume) are counted, not redone; `keep` caps the items the result holds."""
    lower = frozenset(name for name, s in plan.scorers.items() if s.better == "lower")
    result = RunResult(items=[], scorers=list(plan.scorers), keep=keep, lower_better=lower)
    chunks = [plan.target.chunk, *(s.chunk for s in plan.scorers.values())]
    window = data.window_size(plan.config)  # a batched judge gets a window of rows in each of its batches
    batched = any(m.batch for s in plan.scorers.values() for m in s.models())
    sizes = flow.sizes(window, window if batched else plan.settings.concurrency, chunks)

    score: flow.Score = lambda rows, add: _score_rows(plan, ctx, journal, rows, add)  # noqa: E731
    await flow.run(plan.rows, score, result, done, *sizes)
    return result


async def _score_rows(
    plan: Plan, ctx: Context, journal: Journal, todo: list[data.Row], add: Callable[[ItemResult], None]
) -> None:
    """Produce the outputs of `todo`, score them with every scorer concurrently, journal and `add`
    each item the moment its last scorer returns its result."""
    items: dict[str, ItemResult] = {}
    waiting: dict[str, set[str]] = {}
    raw_limit = plan.settings.raw_reply_limit

    def record(scorer: str, row: data.Row, result: ScoreResult) -> None:
        item = items[row.id]
        item.scores[scorer] = result
        waiting[row.id].discard(scorer)
        if not waiting[row.id]:
            items[row.id] = item = redaction.scrubbed(item.stored(raw_limit))  # no key; a huge reply once
            journal.append(item)
            add(items.pop(row.id))
        ctx.advance()

    async def finish(scorer: str, row: data.Row, pending: Awaitable[ScoreResult]) -> None:
        record(scorer, row, await pending)

    for row in [row for row in todo if row.unjudgeable is not None]:  # (set aside: judged.SetAside)
        items[row.id], waiting[row.id] = _item(row, row.output or ""), set(plan.scorers)
        for name in plan.scorers:  # never asked about: unscored, its verdict on the trace says why
            record(name, row, ScoreResult.unscored(f"cannot be judged: {row.unjudgeable}"))
    todo = [row for row in todo if row.unjudgeable is None]
    produced = await plan.target.outputs(todo, ctx) if todo else []
    ready: list[tuple[data.Row, str]] = []
    for row, output, step in plan.target.handed(todo, produced, plan.scorers):
        item = items[row.id] = _item(row, output, step)
        waiting[row.id] = set(plan.scorers)
        if step and step.error:
            # An output that could not be produced is unscored by every scorer, never scored as empty.
            item.target_error = step.error
            for name in plan.scorers:
                record(name, row, ScoreResult.unscored(f"target: {step.error}"))
        else:
            ready.append((row, output))
    if plan.unjudged:  # rows from traces: a verdict a trace carries already is not asked again
        missing = plan.needs.missing if plan.needs else lambda name, row: None  # a trace may lack a field
        pending = reuse.ask(plan.scorers, plan.unjudged.digests, ready, ctx, record, missing)
    else:
        pending = [
            (name, row, result)
            for name, scorer in plan.scorers.items()
            for (row, _), result in zip(ready, scorer.score_each(ready, ctx), strict=True)
        ]
    await asyncio.gather(*(finish(name, row, result) for name, row, result in pending))


def _item(row: data.Row, output: str, step: StepResult | None = None) -> ItemResult:
    """The item of a row, before its scores: what its judges judged and where it came from."""
    item = ItemResult(row.id, row.input, row.ground_truth, output, target_step=step, human=row.human)
    item.record = dict(row.extra)
    item.trace_id, item.retriever_span_id = row.trace_id, row.retriever_span_id
    item.conversation = row.messages.as_records() if row.messages else None  # what its judges judged
    return item
