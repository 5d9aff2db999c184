"""`evalframe log-run DIR [--again] [tracking.uri=...]`: log a run that finished while MLflow was
unreachable, from its run directory (results.jsonl and run.json)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.report import console as report
from evalframe.results.journal import Journal
from evalframe.results.manifest import MANIFEST
from evalframe.run import completion

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
    configured to go (own_tracking; `untracked`: the tracking node for a run that had tracking=none);
    one logged already is not logged twice (its missing verdicts are written)."""
    journal = Journal(directory)
    manifest = journal.manifest
    if not manifest.finished:
        raise ConfigError(
            f"log-run {directory}: no finished run there "
            f"({MANIFEST} says {manifest.status or 'nothing'}); resume it first with resume=PATH"
        )
    saved = manifest.config
    own = own_tracking(saved, manifest.overrides, untracked or {})
    saved["tracking"] = {**own, **tracking_cfg, "enabled": True}
    return completion.logged(journal, saved, again)[1]
