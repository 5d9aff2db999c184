"""`evalframe log-run DIR [--again] [tracking.uri=...]`: log a run that finished while MLflow was
unreachable, from its run directory (results.jsonl and run.json)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.config import compose as configs
from evalframe.config.settings import RunSettings
from evalframe.errors import ConfigError
from evalframe.report import console as report
from evalframe.results import objective
from evalframe.results.agreement import with_agreement
from evalframe.results.intervals import with_intervals
from evalframe.results.journal import Journal
from evalframe.results.manifest import MANIFEST
from evalframe.results.results_file import latest_items
from evalframe.results.run_result import RunResult
from evalframe.results.scores import GateVerdict
from evalframe.run import modes
from evalframe.run.sinks import Concluded, publish

USAGE = (
    "usage: evalframe log-run RUN_DIR [--again] [tracking.uri=URI]\n"
    "  a finished run directory (outputs/DATE/TIME) logged to MLflow, e.g. one that finished while MLflow "
    "was unreachable; --again logs it once more, as a new run"
)


def main(args: list[str]) -> int:
    again = "--again" in args
    rest = [a for a in args if a != "--again"]
    directories = [a for a in rest if "=" not in a]
    if len(directories) != 1 or any(a.startswith("-") for a in rest):
        raise ConfigError(f"log-run takes one run directory\n{USAGE}")
    report.quiet_libraries()
    given = [a for a in rest if "=" in a]
    # This command's tracking node (tracking=mlflow's, $MLFLOW_TRACKING_URI): what it sets explicitly
    # overrides the saved run's settings; the rest is what an untracked run would have been logged with.
    composed = configs.resolve(configs.compose(given))["tracking"]
    return log_saved_run(Path(directories[0]), set_by(given, composed), again, composed)


def set_by(command_line: list[str], tracking: Mapping[str, Any]) -> dict[str, Any]:
    """The tracking keys a command line sets (`tracking.experiment=x`), with their values in `tracking`
    (the node it composed)."""
    keys = (a.split("=", 1)[0].lstrip("+~") for a in command_line)
    return {
        k: tracking[k]
        for k in (key.removeprefix("tracking.") for key in keys if key.startswith("tracking."))
        if k in tracking
    }


def own_tracking(
    saved: Mapping[str, Any], command_line: list[str], untracked: Mapping[str, Any]
) -> dict[str, Any]:
    """Where and how the saved run goes to MLflow as it was configured: a tracked run's node as it was
    (its experiment, run name, store); an untracked one's (tracking=none) as a tracked run's would have
    been, `untracked` (tracking=mlflow's node, composed here), with the experiment of the traces it
    read (conf/tracking/mlflow.yaml's choice) and what its command line set (tracking.experiment=...)."""
    tracking = saved.get("tracking") or {}
    if tracking.get("enabled"):
        return dict(tracking)
    traces = (saved.get("dataset") or {}).get("experiment")
    return {**untracked, **({"experiment": traces} if traces else {}), **set_by(command_line, tracking)}


def log_saved_run(
    directory: Path,
    tracking_cfg: Mapping[str, Any],
    again: bool = False,
    untracked: Mapping[str, Any] | None = None,
) -> int:
    """Log the finished run in `directory` to MLflow, where `tracking_cfg` says, else where it was
    configured to go (own_tracking; `untracked`: the tracking node for a run that had tracking=none)."""
    journal = Journal(directory)
    manifest = journal.manifest
    if not manifest.finished:
        raise ConfigError(
            f"log-run {directory}: no finished run there "
            f"({MANIFEST} says {manifest.status or 'nothing'}); resume it first with resume=PATH"
        )
    if manifest.mlflow_run_id and not again:
        print(
            f"{directory} is already logged to MLflow as run {manifest.mlflow_run_id}: nothing logged "
            "(evalframe log-run DIR --again logs it again, as a new run)",
            file=sys.stderr,
        )
        return 0
    saved = manifest.config
    own = own_tracking(saved, manifest.overrides, untracked or {})
    saved["tracking"] = {**own, **tracking_cfg, "enabled": True}
    settings = RunSettings.of_record(saved)
    result = RunResult(items=[], scorers=list(settings.scorers), keep=settings.keep_items)
    for item in latest_items(journal.path):  # one at a time: the result keeps its first keep_items
        result.add(item)
    with_intervals(result)
    with_agreement(result, saved)
    result.objective = objective.from_json(manifest.objective)
    if gate := manifest.gate:  # the verdict the run reached, recorded again in MLflow
        result.verdict = GateVerdict(int(gate["exit_code"]), tuple(gate["failed"]))
    result.facts = dict(manifest.about)
    print(f"logging {result.count} items from {journal.path}", file=sys.stderr)
    done = Concluded(result, settings, saved, journal, manifest.overrides)
    return publish(done, modes.LOGGED.sinks(settings))
