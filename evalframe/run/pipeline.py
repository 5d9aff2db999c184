"""One run, assembled once: plan (config -> target, scorers, validated rows: evalframe.run.planning),
execute (rows -> outputs -> scores, journaled item by item: evalframe.run.execution), aggregate
(intervals, agreement, objective), conclude (the gate's verdict, the record finished) and publish (the
mode's sinks: report.html, console, MLflow, verdicts onto traces: evalframe.run.sinks).

Every way of making a run goes through here, a mode (evalframe.run.modes) choosing what differs: a plain
run, a resume and an API call (`evaluate`), a sweep's job and a shard (the mode from the config), a watch
tick (`run_plan` on the tick's rows), a re-score (its rows, outputs and replies given), the hold-out
check, and the merge of shards and `evalframe log-run` (`conclude` and `publish` of a result read back).
The run's shared state (Context) is built here only.

Everything that can be checked is checked before the first model call: config, credentials, every
dataset row and every prompt template.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evalframe import redaction
from evalframe.config.settings import RunSettings
from evalframe.errors import EXIT_INTERRUPTED, EXIT_OK
from evalframe.models.cache import Cache
from evalframe.models.context import Context
from evalframe.report import console as report
from evalframe.results import agreement, gate, intervals, objective as objectives, summary as summaries
from evalframe.results.journal import Journal
from evalframe.results.results_file import Finished
from evalframe.results.run_result import RunResult
from evalframe.results.scores import Objective
from evalframe.run import flow, modes, reuse, warmup
from evalframe.run.execution import execute
from evalframe.run.modes import Mode
from evalframe.run.planning import Given, Plan, plan
from evalframe.run.sinks import Concluded, publish

Annotate = Callable[[RunResult], Mapping[str, str]]  # tags for the MLflow run, once the result is known


def evaluate(
    config: dict[str, Any],
    output_dir: Path,
    resume_from: Path | None = None,
    overrides: list[str] | None = None,
    given: Given | None = None,
    annotate: Annotate | None = None,
    mode: Mode | None = None,
) -> tuple[RunResult, int]:
    """Run a resolved config end to end in `mode` (default: as the config says, modes.of). Returns the
    result and the exit code (gate, unscored rate, tracking)."""
    redaction.remember(config)  # the command line did too; the Python API starts here
    directory = resume_from or output_dir
    started = Journal(directory).started_at() if resume_from else None  # a resumed run reads the same traces
    p, nothing = reuse.planned(lambda: plan(config, given, started), list(config.get("scorers") or {}))
    if nothing is not None:  # every trace carries every scorer's verdict already: a clean end, no run
        return nothing, EXIT_OK
    try:
        run = run_plan(
            p, directory, mode or modes.of(p.settings), resume_from is not None, overrides, given, annotate
        )
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: finished items are saved in {Journal(directory).path}. Continue with the same "
            "command plus resume=true",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    return run.result, run.exit_code


def run_plan(
    p: Plan,
    directory: Path,
    mode: Mode,
    resume: bool = False,
    overrides: list[str] | None = None,
    given: Given | None = None,
    annotate: Annotate | None = None,
    run_id: str | None = None,
) -> Concluded:
    """Execute a plan in `directory` (continuing its journal when `resume`), then aggregate, conclude
    and publish. `run_id`: the MLflow run the verdicts link to when the mode logs none of its own (a
    watch tick's: its watcher's). An interruption (Ctrl-C, SIGTERM) leaves every finished item in the
    journal and is raised on."""
    config, settings = p.config, p.settings
    objective = objectives.of_config(config)  # a typo in objective.metric must not cost a sweep
    lower = {n for n, s in p.scorers.items() if s.better == "lower"}
    gate.validate(settings.gate.model_dump(), list(p.scorers), lower)
    journal = Journal(directory)
    done = _journal(p, journal, resume, overrides, mode.fixed_rows)
    ctx = _context(settings, journal.directory, given.cache if given else None)
    warm = warmup.of(p, ctx.stats)  # the imports the end needs, while the models answer
    steps = (len(p.rows) - len(done)) * (len(p.scorers) + p.target.reports_progress)
    try:
        with report.progress(steps, ctx.stats, shown=mode.progress) as advance:
            ctx.advance = warm.counting(advance)
            result = flow.run_async(warm.during(execute(p, ctx, journal, done, settings.keep_items)))
    except BaseException:
        journal.close()  # a stop mid-run keeps every finished item for a resume
        raise
    result.stats, result.run_id = ctx.stats, run_id
    aggregate(result, config, objective)
    run = conclude(result, settings, config, journal, mode, overrides)
    run.tags = annotate(result) if annotate else {}
    publish(run, mode.sinks(settings), say=mode.says_notes)
    return run


def _context(settings: RunSettings, directory: Path, cache: Cache | None) -> Context:
    """The run's shared state: `concurrency` requests in flight at once, the judge cache (or the replies
    given, a re-score's), the run directory (where batched judges journal their batches)."""
    return Context(
        limiter=asyncio.Semaphore(settings.concurrency),
        cache=cache or Cache(settings.cache.mode, settings.cache.dir),
        run_dir=directory,
    )


def _journal(
    p: Plan, journal: Journal, resume: bool, overrides: list[str] | None, fixed_rows: bool = True
) -> Finished:
    """Start the run's journal, or continue a resumed run's: its rows checked to be those it started on
    (unless its mode's rows shrink by design: `fixed_rows`), and the items it finished (by every
    scorer), which are not scored again."""
    done = journal.resumed(p.inputs if fixed_rows else None, p.scorers) if resume else Finished()
    if resume:
        print(
            f"resuming {journal.directory}: {len(done)} of {len(p.rows)} items already done", file=sys.stderr
        )
    # The digests go onto the verdicts, also when they are written later (log-run).
    journal.start(p.config, len(p.rows), resume, overrides, p.inputs, p.digests, p.started)
    return done


def aggregate(result: RunResult, config: Mapping[str, Any], objective: Objective) -> RunResult:
    """What a finished run adds up to beyond its means: intervals, agreement with people, objective."""
    intervals.with_intervals(result)
    agreement.with_agreement(result, config)
    result.objective = objectives.measure(objective, result.metrics())
    return result


def conclude(
    result: RunResult,
    settings: RunSettings,
    config: Mapping[str, Any],
    journal: Journal,
    mode: Mode,
    overrides: list[str] | None,
) -> Concluded:
    """The gate decided (a mode that is a part of the evaluation passes: its whole is gated) and the
    record finished before anything is published, so run.json, report.html and MLflow all hold it."""
    code, checks = EXIT_OK, list[gate.Check]()
    if mode.gated:
        code, checks = gate.decide(result, settings.gate.model_dump(), settings.max_unscored_rate)
    result.verdict, result.facts = gate.verdict(code, checks), summaries.facts(config, result)
    due = mode.writes_verdicts(settings) and result.traced > 0  # written by a sink: a kill may come first
    journal.finish(result.means, result.objective, result.verdict, result.facts, merging(result), due)
    return Concluded(result, settings, config, journal, overrides, code, checks)


def merging(result: RunResult) -> dict[str, Any]:
    """What run.json keeps for a merge of shards beyond the items: which way each scorer's gate goes,
    and the model calls and cache hits the summary counts."""
    return {
        "lower_better": sorted(result.lower_better),
        "calls": result.stats.calls,
        "hits": result.stats.hits,
    }
