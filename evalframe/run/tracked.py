"""A finished run to MLflow, and what came of it: tracking's warnings and errors printed, where to see
the run said, the run noted in its journal. Tracking itself prints nothing; the pipeline and
`evalframe log-run` both log through here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.errors import EXIT_OK
from evalframe.report import console as report
from evalframe.results.journal import VERDICTS, Journal
from evalframe.results.run import RunResult
from evalframe.tracking import feedback, log as tracking, store, sweeps


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
        if code == EXIT_OK:  # a run MLflow could not take writes its verdicts when it is logged later
            verdicts(result, config, journal, notes)
    if logged and sweeps.sweep_job() is None:  # a sweep says where its parent run is, once, at the end
        uri = str(config["tracking"]["uri"])
        report.where_to_look(uri, store.display_uri(uri), *logged)
    if result.run_id:
        journal.logged(result.run_id)
    return code


def verdicts(result: RunResult, config: Mapping[str, Any], journal: Journal, notes: list[str]) -> None:
    """The run's verdicts onto the traces its rows came from (tracking.feedback), also with tracking off:
    a trace dataset lives in MLflow whatever the run does. A sweep's jobs write none (each job's
    settings would override the last's); verdicts written already (log-run --again) are not written
    twice, the traces only linked to the new run."""
    if not (config.get("tracking") or {}).get("feedback", True) or sweeps.sweep_job() is not None:
        return
    if result.count and not result.traced:  # no item came from a trace: results.jsonl is not read back
        return
    manifest = journal.manifest
    digests = None if manifest.get(VERDICTS) else manifest.get("digests")
    if feedback.write_back(journal.path, config, result.run_id, digests, notes) and digests:
        journal.wrote_verdicts()
