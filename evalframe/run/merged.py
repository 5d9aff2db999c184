"""A sharded evaluation made whole (`evalframe -m shards=N ...`): the shards' journals read back into one
run, as if it had been scored in one process: every item in one results.jsonl and run.json in the
sweep directory, the metrics, intervals and agreement recomputed over all items, the gate decided on
them (each shard passed its own: evalframe.run.modes.SHARD), then published as a whole run is:
report.html, the console, the sweep's MLflow parent run and the verdicts onto traces."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.config.settings import RunSettings
from evalframe.errors import EXIT_USAGE
from evalframe.results import objective as objectives
from evalframe.results.journal import RESULTS, Journal
from evalframe.results.manifest import Manifest
from evalframe.results.results_file import iter_lines
from evalframe.results.run_result import RunResult
from evalframe.run import modes
from evalframe.run.pipeline import aggregate, conclude
from evalframe.run.sinks import publish

SHARD_KEYS = ("shard", "shards")


def shard_dirs(sweep_dir: Path) -> list[Path]:
    """The jobs' directories of a sweep (0, 1, ...), in their order."""
    return sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )


def unfinished(sweep_dir: Path, shards: int) -> list[int]:
    """The shards whose job has not finished (killed, failed or never started)."""
    finished = {int(d.name) for d in shard_dirs(sweep_dir) if Journal(d).manifest.finished}
    return [n for n in range(shards) if n not in finished]


def incomplete(sweep_dir: Path, shards: int) -> int:
    """Say which shards did not finish (nothing is merged then). The exit code: the worst shard's says
    why; this one, 2, says the evaluation is not whole in any case."""
    listed = ", ".join(map(str, unfinished(sweep_dir, shards)))
    print(
        f"error: shard {listed} of {shards} did not finish, so the evaluation is not merged; its "
        "finished items are kept: continue with the same command plus resume=true",
        file=sys.stderr,
    )
    return EXIT_USAGE


def merge(
    sweep_dir: Path,
    shards: int,
    tracking_cfg: Mapping[str, Any],
    parent: str | None,
    overrides: list[str],
) -> int:
    """Merge the shards of the sweep in `sweep_dir` into one run there and publish it as a whole run
    (evalframe.run.modes.MERGE: report.html, summary and gate, the sweep's `parent` MLflow run, the
    verdicts onto traces, which no shard writes). Returns the exit code of the whole: the gate's, or 3
    when MLflow could not take it. Every shard has finished (`unfinished` is empty)."""
    manifests = [Journal(d).manifest for d in shard_dirs(sweep_dir)[:shards]]
    tracking = {**tracking_cfg, "enabled": bool(tracking_cfg.get("enabled") and parent)}  # into its parent
    config = {**manifests[0].config, "shard": None, "tracking": tracking}
    whole = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in SHARD_KEYS]
    settings = RunSettings.of_record(config)
    result, journal = _result(sweep_dir, manifests, config, settings.keep_items, overrides)
    run = conclude(result, settings, config, journal, modes.MERGE, whole)
    run.tags, run.into = {"evalframe.shards": str(shards)}, parent
    run.heading = f"shards: {shards} of {shards} finished; the whole evaluation, {result.count} items:"
    return publish(run, modes.MERGE.sinks(settings))


def _result(
    sweep_dir: Path,
    manifests: list[Manifest],
    config: dict[str, Any],
    keep: int | None,
    overrides: list[str],
) -> tuple[RunResult, Journal]:
    """Every shard's items, journaled again into the sweep directory's results.jsonl and counted in one
    result; its aggregates computed over all of them."""
    merges = [m.merging for m in manifests]
    lower = frozenset(name for m in merges for name in m.get("lower_better") or ())
    scorers = list(config.get("scorers") or {})
    result = RunResult(items=[], scorers=scorers, keep=keep, lower_better=lower)
    result.stats.calls = sum(int(m.get("calls") or 0) for m in merges)  # the summary's figures
    result.stats.hits = sum(int(m.get("hits") or 0) for m in merges)
    journal = Journal(sweep_dir)
    started = [m.started_at for m in manifests if isinstance(m.started_at, int | float)]
    journal.start(
        config,
        sum(m.total for m in manifests),
        overrides=overrides,
        inputs=manifests[0].inputs,
        digests=manifests[0].digests,
        started=min(started) if started else None,
    )
    seen: set[str] = set()
    for directory in shard_dirs(sweep_dir)[: len(manifests)]:
        for item, line in iter_lines(directory / RESULTS):
            if item.id not in seen:  # (a row is in one shard only; a repeated line is counted once)
                seen.add(item.id)
                journal.append_line(line)  # as the shard wrote it: not serialised a second time
                result.add(item)
    aggregate(result, config, objectives.of_config(config))
    return result, journal
