"""Where a concluded run goes. Each output is a sink, a function of the concluded run; a run's sinks are
chosen once from its mode and config (evalframe.run.modes) and published in one order: report.html,
the console's tables, the MLflow run, the verdicts onto traces (linked to that run), where to look, a
sweep job's line. Tracking prints nothing: what it hands back is said after the sink that got it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalframe.config.settings import RunSettings
from evalframe.errors import EXIT_OK
from evalframe.report import console as report, html as html_report
from evalframe.results import gate, summary as summaries
from evalframe.results.journal import Journal
from evalframe.results.run_result import RunResult
from evalframe.tracking import feedback, log as tracking, store, sweeps


@dataclass
class Concluded:
    """A run whose gate is decided and whose record is finished: what every sink reads."""

    result: RunResult
    settings: RunSettings
    config: Mapping[str, Any]  # as resolved: what MLflow's params and the verdicts' sources are made of
    journal: Journal
    overrides: list[str] | None = None
    code: int = EXIT_OK  # the gate's exit code
    checks: list[gate.Check] = field(default_factory=list)
    tags: Mapping[str, str] = field(default_factory=dict)  # for its MLflow run
    into: str | None = None  # an open MLflow run to log into (a merge of shards: its sweep's parent)
    heading: str = ""  # a line before its tables (a merge: which shards it holds)
    logged: int = EXIT_OK  # the MLflow sink's code: 3 when the store could not take the run
    where: tuple[str, str] | None = None  # (experiment id, run id) once logged
    notes: list[str] = field(default_factory=list)  # tracking's warnings, said after each sink
    extra: tracking.Extra | None = None  # metrics and artifacts its MLflow run logs beyond its own

    @property
    def exit_code(self) -> int:
        """The whole run's: the gate's, else the MLflow sink's (3: the store could not take it)."""
        return self.code or self.logged


Sink = Callable[[Concluded], None]


def publish(run: Concluded, sinks: Sequence[Sink], say: bool = True) -> int:
    """Every sink in order, each one's notes said after it (`say` False: left in run.notes for the
    caller); the run's exit code."""
    for sink in sinks:
        sink(run)
        if say:
            with report.notes() as notes:
                notes += run.notes
            run.notes = []
    return run.exit_code


def report_file(run: Concluded) -> None:
    html_report.write_run_report(run.result, run.journal.directory, sweeps.run_name(run.config))


def console_tables(run: Concluded) -> None:
    if run.heading:
        report.console.print(run.heading, soft_wrap=True, markup=False, highlight=False)
    report.summary(summaries.Summary.of(run.result), run.journal.path)
    report.gate(run.code, run.checks)


def mlflow_run(run: Concluded) -> None:
    """The run to MLflow; if the store cannot take it, an error note says how to log it later and its
    verdicts wait for that (evalframe log-run writes them)."""
    r = run.result
    run.logged, run.where = tracking.log(
        r, run.config, run.journal.path, run.overrides, run.tags, notes=run.notes, into=run.into
    )
    if run.where and run.extra:  # an aligned judge's files and held-out figures
        uri = str(run.settings.tracking.uri)
        run.logged = tracking.log_extra(uri, run.where[1], run.extra, run.notes)
    if r.run_id:
        run.journal.logged(r.run_id)


def trace_verdicts(run: Concluded) -> None:
    """The run's verdicts onto the traces its rows came from (tracking.feedback), also with tracking off:
    a trace dataset lives in MLflow whatever the run does. Verdicts written already (log-run --again)
    are not written twice, the traces only linked to the new run."""
    if run.logged != EXIT_OK:  # a run MLflow could not take writes its verdicts when it is logged later
        return
    if run.result.count and not run.result.traced:  # no item from a trace: results.jsonl is not read back
        return
    manifest = run.journal.manifest
    digests = None if manifest.verdicts_written else manifest.digests
    if feedback.write_back(run.journal.path, run.config, run.result.run_id, digests, run.notes) and digests:
        run.journal.wrote_verdicts()


def where_to_look(run: Concluded) -> None:
    if run.where:
        uri = str(run.settings.tracking.uri)
        report.where_to_look(uri, store.display_uri(uri), *run.where)


def job_line(run: Concluded) -> None:
    """A sweep job's one line: its tables are in its report.html and MLflow run, the sweep's at the end."""
    job = sweeps.sweep_job()
    report.job(job if job is not None else 0, sweeps.job_label(), run.result.objective, run.exit_code)
