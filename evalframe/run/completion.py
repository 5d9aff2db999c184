"""A finished run read back from its directory (results.jsonl and run.json) and published for what it left
undone, nothing judged again: `evalframe log-run DIR` (its MLflow run, later) and the resume of a run
stopped after its end (`resume=true`, `resume=DIR`).

The MLflow run is logged before the verdicts go onto the traces (evalframe.run.sinks), so a run killed
while writing them is in MLflow already: it is never logged twice, its missing verdicts are written
and linked to that run (the write-back skips those on the traces already: tracking.feedback).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.config.settings import RunSettings
from evalframe.results import objective
from evalframe.results.agreement import with_agreement
from evalframe.results.intervals import with_intervals
from evalframe.results.journal import Journal
from evalframe.results.results_file import latest_items
from evalframe.results.run_result import RunResult
from evalframe.results.scores import GateVerdict
from evalframe.run import modes, sinks as outputs
from evalframe.run.sinks import Concluded, publish


def read_back(journal: Journal, config: Mapping[str, Any], settings: RunSettings) -> RunResult:
    """The finished run in `journal`'s directory as it ended: its items, intervals, agreement,
    objective, the gate's verdict and what was run."""
    manifest = journal.manifest
    result = RunResult(items=[], scorers=list(settings.scorers), keep=settings.keep_items)
    for item in latest_items(journal.path):  # one at a time: the result keeps its first keep_items
        result.add(item)
    with_intervals(result)
    with_agreement(result, config)
    result.objective = objective.from_json(manifest.objective)
    if gate := manifest.gate:  # the verdict the run reached, recorded again in MLflow
        result.verdict = GateVerdict(int(gate["exit_code"]), tuple(gate["failed"]))
    result.facts = dict(manifest.about)
    return result


def logged(journal: Journal, config: Mapping[str, Any], again: bool = False) -> tuple[RunResult | None, int]:
    """The finished run in `journal`'s directory logged with `config` (its own, or log-run's tracking)
    and its verdicts written; one in MLflow already (`again`: log it as a new run) only gets the
    verdicts it had not written, linked to its run. The result (None: nothing was done) and exit code."""
    manifest = journal.manifest
    mode, run_id = modes.LOGGED, None
    if manifest.mlflow_run_id and not again:
        if not manifest.verdicts_pending:
            print(
                f"{journal.directory} is already logged to MLflow as run {manifest.mlflow_run_id}: nothing "
                "logged (evalframe log-run DIR --again logs it again, as a new run)",
                file=sys.stderr,
            )
            return None, 0
        print(
            f"{journal.directory} is already logged to MLflow as run {manifest.mlflow_run_id}, but was "
            "stopped while writing its verdicts onto the traces: writing the missing ones, linked to it",
            file=sys.stderr,
        )
        mode, run_id = modes.VERDICTS_ONLY, manifest.mlflow_run_id
    settings = RunSettings.of_record(dict(config))
    result = read_back(journal, config, settings)
    result.run_id = run_id
    sinks = mode.sinks(settings)
    if outputs.mlflow_run in sinks:
        print(f"logging {result.count} items from {journal.path}", file=sys.stderr)
    return result, publish(Concluded(result, settings, config, journal, manifest.overrides), sinks)


def finished(directory: Path) -> bool:
    """Whether the run to resume had finished (killed in its write-back, say): complete() it, no run."""
    return Journal(directory).manifest.finished


def complete(directory: Path) -> tuple[RunResult, int]:
    """The resume of a run that had finished: what it left undone (its verdicts onto the traces, killed
    while writing them; its MLflow run, if the store could not take it) done now with its own settings,
    nothing judged again. Its result and exit code: the gate's, else the tracking's."""
    journal = Journal(directory)
    manifest = journal.manifest
    config = manifest.config
    settings = RunSettings.of_record(config)
    unlogged = settings.tracking.enabled and not manifest.mlflow_run_id
    result: RunResult | None = None
    code = 0
    if manifest.verdicts_pending or unlogged:
        print(f"resuming {directory}: every item had finished; nothing is judged again", file=sys.stderr)
        result, code = logged(journal, config)
    else:
        print(f"{directory}: this run had finished, nothing is left to do", file=sys.stderr)
    gate = manifest.gate or {}
    return result or read_back(journal, config, settings), int(gate.get("exit_code") or 0) or code
