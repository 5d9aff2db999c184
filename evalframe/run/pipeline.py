"""The pipeline, top to bottom: plan (config -> target, scorers, validated rows: evalframe.run.planning),
execute (rows -> outputs -> scores, journaled item by item), aggregate (agreement, objective), then the
results go to the console, report.html and MLflow.

Everything that can be checked is checked before the first model call: config, credentials, every
dataset row and every prompt template.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from evalframe import redaction
from evalframe.data import rows as data
from evalframe.errors import EXIT_INTERRUPTED, EXIT_OK
from evalframe.models.cache import Cache
from evalframe.models.context import Context
from evalframe.report import console as report, html as html_report
from evalframe.results import agreement, gate, intervals, objective as objectives, summary as summaries
from evalframe.results.journal import Journal
from evalframe.results.nouns import RAW_REPLY_LIMIT, ItemResult, Objective, ScoreResult
from evalframe.results.results_file import Finished
from evalframe.results.run import RunResult
from evalframe.run import flow, reuse, tracked, warmup
from evalframe.run.planning import Given, Plan, plan
from evalframe.tracking import sweeps


async def execute(
    plan: Plan, ctx: Context, journal: Journal, done: Finished, keep: int | None = None
) -> RunResult:
    """Score the rows as a continuous flow (evalframe.flow), each item journaled as it finishes; items
    already done (resume) are counted, not redone; `keep` caps the items the result holds."""
    lower = frozenset(name for name, s in plan.scorers.items() if s.better == "lower")
    result = RunResult(items=[], scorers=list(plan.scorers), keep=keep, lower_better=lower)
    chunks = [plan.target.chunk, *(s.chunk for s in plan.scorers.values())]
    window = data.window_size(plan.config)  # a batched judge gets a window of rows in each of its batches
    batched = any(m.batch for s in plan.scorers.values() for m in s.models())
    sizes = flow.sizes(window, window if batched else int(plan.config.get("concurrency", 8)), chunks)

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
    raw_limit = int(plan.config.get("raw_reply_limit") or RAW_REPLY_LIMIT)

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

    produced = await plan.target.outputs(todo, ctx)
    ready: list[tuple[data.Row, str]] = []
    for row, output, step in plan.target.handed(todo, produced, plan.scorers):
        fields = (row.id, row.input, row.ground_truth, output)
        item = ItemResult(*fields, target_step=step, human=row.human, record=dict(row.extra))
        item.trace_id, item.retriever_span_id = row.trace_id, row.retriever_span_id
        item.conversation = row.messages.as_records() if row.messages else None  # what its judges judged
        items[row.id], waiting[row.id] = item, set(plan.scorers)
        if step and step.error:
            # An output that could not be produced is unscored by every scorer, never scored as empty.
            item.target_error = step.error
            for name in plan.scorers:
                record(name, row, ScoreResult.unscored(f"target: {step.error}"))
        else:
            ready.append((row, output))
    found = plan.unjudged.digests if plan.unjudged else {}  # a verdict on the trace already: not asked
    pending = reuse.ask(plan.scorers, found, ready, ctx, record)
    await asyncio.gather(*(finish(name, row, result) for name, row, result in pending))


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
    redaction.remember(config)  # the command line did too; the Python API starts here
    journal = Journal(resume_from or output_dir)
    started = journal.started_at() if resume_from else None  # a resumed run reads the same traces
    p, nothing = reuse.planned(lambda: plan(config, given, started), list(config.get("scorers") or {}))
    if nothing is not None:  # every trace carries every scorer's verdict already: a clean end, no run
        return nothing, EXIT_OK
    objective = objectives.of_config(config)  # a typo in objective.metric must not cost a sweep
    gate_cfg = config.get("gate") or {}
    gate.validate(gate_cfg, list(p.scorers), {n for n, s in p.scorers.items() if s.better == "lower"})
    done = _journal(p, journal, resume_from is not None, overrides)
    cache_cfg = config.get("cache") or {}
    ctx = Context(
        limiter=asyncio.Semaphore(int(config.get("concurrency", 8))),
        cache=(given and given.cache) or Cache(cache_cfg.get("mode", "readwrite"), cache_cfg.get("dir")),
        run_dir=journal.directory,
    )
    todo = len(p.rows) - len(done)
    warm = warmup.of(p, ctx.stats)  # the imports the end needs, while the models answer
    try:
        steps = todo * (len(p.scorers) + p.target.reports_progress)
        with report.progress(steps, ctx.stats, shown=config.get("shard") is None) as advance:
            ctx.advance = warm.counting(advance)
            result = flow.run_async(warm.during(execute(p, ctx, journal, done, keep_items(config))))
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
    # The verdict comes before anything is written, so run.json, report.html and MLflow all record it.
    code, checks = _gate(result, config)
    result.verdict, result.facts = gate.verdict(code, checks), summaries.facts(config, result)
    journal.finish(result.means, result.objective, result.verdict, result.facts, merging(result))
    html_report.write_run_report(result, journal.directory, sweeps.run_name(config))
    job = sweeps.sweep_job()
    if job is None:  # a sweep's job says one line; its tables are in its report and MLflow run
        report.summary(summaries.Summary.of(result), journal.path)
        report.gate(code, checks)
    logged = tracked.log(result, config, journal, overrides, annotate(result) if annotate else None)
    if job is not None:
        report.job(job, sweeps.job_label(), result.objective, code or logged)
    return result, code or logged


def _gate(result: RunResult, config: Mapping[str, Any]) -> tuple[int, list[gate.Check]]:
    """The gate's exit code and checks. A shard of a sharded evaluation passes: the gate is on the whole
    evaluation, decided when the shards are merged (evalframe.run.merged), not on a part of its items."""
    if config.get("shard") is not None:
        return EXIT_OK, []
    return gate.evaluate(result, config.get("gate") or {}, float(config.get("max_unscored_rate", 0.1)))


def _journal(p: Plan, journal: Journal, resume: bool, overrides: list[str] | None) -> Finished:
    """Start the run's journal, or continue a resumed run's: its rows checked to be those it started on,
    and the items it finished (by every scorer), which are not scored again."""
    done = journal.resumed(p.inputs, p.scorers) if resume else Finished()
    if resume:
        print(
            f"resuming {journal.directory}: {len(done)} of {len(p.rows)} items already done", file=sys.stderr
        )
    digests = p.unjudged.digests if p.unjudged else {}  # onto the verdicts, also when logged later
    journal.start(p.config, len(p.rows), resume, overrides, p.inputs, digests, p.started)
    return done


def aggregate(result: RunResult, config: Mapping[str, Any], objective: Objective) -> RunResult:
    """What a finished run adds up to beyond its means: intervals, agreement with people, objective."""
    intervals.with_intervals(result)
    agreement.with_agreement(result, config)
    result.objective = objectives.measure(objective, result.metrics())
    return result


def merging(result: RunResult) -> dict[str, Any]:
    """What run.json keeps for a merge of shards beyond the items: which way each scorer's gate goes,
    and the model calls and cache hits the summary counts."""
    return {
        "lower_better": sorted(result.lower_better),
        "calls": result.stats.calls,
        "hits": result.stats.hits,
    }


def keep_items(config: Mapping[str, Any]) -> int | None:
    """How many items a result holds for MLflow's table, reasons.md and prompts.jsonl (null: all)."""
    keep = config.get("keep_items", 2000)
    return None if keep is None else int(keep)
