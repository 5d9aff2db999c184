"""The ways a run is made, each a small strategy over the one lifecycle (evalframe.run.pipeline): whether
its gate is decided on its items, whether it shows a progress bar, and which outputs it has. The sinks
are derived from the outputs by one rule (`Mode.sinks`), so a shard and the merge of its shards, a
watch tick and a plain run cannot drift apart: a shard's outputs are a whole run's less what belongs
to the whole evaluation (the console's tables, the gate, the verdicts onto traces), which its merge
has."""

from __future__ import annotations

from dataclasses import dataclass, replace

from evalframe.config.settings import RunSettings
from evalframe.run import sinks
from evalframe.tracking import sweeps

REPORT, TABLES, MLFLOW, VERDICTS, WHERE, JOB_LINE = "report", "tables", "mlflow", "verdicts", "where", "job"
_IN_ORDER = {
    REPORT: sinks.report_file,
    TABLES: sinks.console_tables,
    MLFLOW: sinks.mlflow_run,
    VERDICTS: sinks.trace_verdicts,
    WHERE: sinks.where_to_look,
    JOB_LINE: sinks.job_line,
}
_WHOLE = frozenset({TABLES, VERDICTS, WHERE})  # what only the whole evaluation has


@dataclass(frozen=True)
class Mode:
    name: str
    outputs: frozenset[str]
    gated: bool = True  # the gate is decided on its items
    progress: bool = True  # the live bar (a shard's is the sweep's: evalframe.sweep.progress)
    says_notes: bool = True  # tracking's notes said as they come (a tick: only its failures, after its line)
    # A resume refuses rows other than those it started on. A tick's rows are its window's traces still
    # without their verdicts, fewer once some verdicts landed before a stop: traces done, not rows changed.
    fixed_rows: bool = True

    def sinks(self, settings: RunSettings) -> list[sinks.Sink]:
        """Its outputs as sinks, in publishing order: MLflow only with tracking on, verdicts onto traces
        only with tracking.feedback (default on: a trace dataset lives in MLflow whatever the run does)."""
        off = {MLFLOW} if not settings.tracking.enabled else set()
        off |= {VERDICTS} if not settings.tracking.feedback else set()
        return [sink for name, sink in _IN_ORDER.items() if name in self.outputs and name not in off]

    def writes_verdicts(self, settings: RunSettings) -> bool:
        """Whether it writes verdicts onto traces (its items' run.json then says they are due)."""
        return sinks.trace_verdicts in self.sinks(settings)

    def part(self) -> Mode:
        """This mode for a part of the evaluation (a shard): its whole's outputs are the merge's."""
        return replace(self, name=f"{self.name} shard", outputs=self.outputs - _WHOLE, gated=False)


# A run of the command line, also resumed; an API call; a re-score.
RUN = Mode("run", frozenset({REPORT, TABLES, MLFLOW, VERDICTS, WHERE}))
# A job of a sweep of settings: each job's settings are one of many, so none writes verdicts onto traces
# (each would override the last's); the sweep's table is printed at its end.
SWEEP_JOB = Mode("sweep job", frozenset({REPORT, MLFLOW, JOB_LINE}))
SHARD = replace(RUN.part(), outputs=RUN.part().outputs | {JOB_LINE}, progress=False)
MERGE = replace(RUN, name="merge", outputs=RUN.outputs - {WHERE})  # the sweep says where its parent run is
# A watch tick: its figures go to the watcher's run, its line says what was judged.
TICK = Mode(
    "watch tick", frozenset({VERDICTS}), gated=False, progress=False, says_notes=False, fixed_rows=False
)
# The hold-out check's two runs: the sweep's parent logs their figures; two settings' verdicts would fight.
HOLDOUT = Mode("hold-out", frozenset({REPORT, TABLES}))
# `evalframe align`'s runs (training part, held-out part before and after): its table says what they found.
ALIGN = Mode("align", frozenset({REPORT}), gated=False)
# The aligned judge's run on the held-out items, published once `align` has its figures: to MLflow with
# the judge's files and digest (evalframe.run.align.log), its report.html written as it ran (ALIGN).
ALIGNED = Mode("aligned judge", frozenset({MLFLOW, WHERE}), gated=False, progress=False)
PROBE = Mode("probe", frozenset(), gated=False, progress=False)  # a re-score's search for the culprit
LOGGED = Mode("log-run", frozenset({MLFLOW, VERDICTS, WHERE}))  # a finished run logged later
# The verdicts a run in MLflow had not all written onto its traces (a kill in its write-back), written
# and linked to that run: never a second run.
VERDICTS_ONLY = Mode("verdicts", frozenset({VERDICTS}), gated=False, progress=False)


def of(settings: RunSettings) -> Mode:
    """The mode a command line's run is in: a shard of a sharded evaluation, a job of a sweep, or a run."""
    if settings.shard is not None:
        return SHARD
    return SWEEP_JOB if sweeps.sweep_job() is not None else RUN
