"""`evalframe log-run DIR [--again] [tracking.uri=...]`: log a run that finished while MLflow was
unreachable, from its run directory (results.jsonl and run.json)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
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
    # Where to log: this command's tracking node (tracking.uri=..., $MLFLOW_TRACKING_URI), as a run would.
    config = configs.resolve(configs.compose([a for a in rest if "=" in a]))
    return log_saved_run(Path(directories[0]), config["tracking"], again)


def log_saved_run(directory: Path, tracking_cfg: Mapping[str, Any], again: bool = False) -> int:
    """Log the finished run in `directory` to MLflow, where `tracking_cfg` says, else where it was
    configured to go; one logged already is not logged twice (its missing verdicts are written)."""
    journal = Journal(directory)
    manifest = journal.manifest
    if not manifest.finished:
        raise ConfigError(
            f"log-run {directory}: no finished run there "
            f"({MANIFEST} says {manifest.status or 'nothing'}); resume it first with resume=PATH"
        )
    saved = manifest.config
    saved["tracking"] = {**saved.get("tracking", {}), **tracking_cfg, "enabled": True}
    return completion.logged(journal, saved, again)[1]
