"""A finished run to MLflow, and what came of it: tracking's warnings and errors printed, where to see
the run said, the run noted in its journal. Tracking itself prints nothing; the pipeline and
`evalframe log-run` both log through here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.report import console as report
from evalframe.results.journal import Journal
from evalframe.results.run import RunResult
from evalframe.tracking import log as tracking, store, sweeps


def log(
    result: RunResult,
    config: Mapping[str, Any],
    journal: Journal,
    overrides: list[str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> int:
    """Log `result` (if tracking is on) and say how it went. Returns the exit code: 0, or 3 when the
    store could not take the run (its results stay on disk for `evalframe log-run`)."""
    with report.notes() as notes:
        code, logged = tracking.log(result, config, journal.path, overrides, tags, notes=notes)
    if logged and sweeps.sweep_job() is None:  # a sweep says where its parent run is, once, at the end
        uri = str(config["tracking"]["uri"])
        report.where_to_look(uri, store.display_uri(uri), *logged)
    if result.run_id:
        journal.logged(result.run_id)
    return code
