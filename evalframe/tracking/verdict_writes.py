"""One item's verdicts onto its traces (evalframe.tracking.feedback decides what they are): each decided
on what its trace holds just before it is written, under an id made from that state, so that two runs
writing onto the same traces at once leave one verdict per (trace, scorer, digest).

What the trace holds is read again (its TraceInfo: its assessments, no spans) just before an item's
verdicts are written, since another run, or this one killed and logged again, may have written since
the rows were read: a verdict on the trace already is skipped (the same digest), an older one
overridden. A store keeping a caller's assessment id (MLflow's SQL stores, and a tracking server in
front of one) closes the moment left between that read and the write: two runs deciding on the same
state give the same id, and the store takes the first (the id is its key), the other reads again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from evalframe.data import judged
from evalframe.redaction import scrub_text
from evalframe.results.scores import ItemResult
from evalframe.tracking.store import one_line
from evalframe.tracking.trace_records import assessments

TURNS = "turn_assessments"  # a session item's record: the assessments of its other traces (data.sessions)
TRIES = 3  # decisions on one trace, each on what it holds then: another run may write between read and write


@dataclass(frozen=True)
class TraceVerdict:
    """One Feedback to write onto a trace (or one of its spans)."""

    trace_id: str
    name: str
    value: Any  # None when `error` is set
    rationale: str
    source: tuple[str, str]  # (MLflow AssessmentSourceType, source id)
    metadata: Mapping[str, str]
    error: tuple[str, str] | None = None  # (error code, message): an unscored item
    span_id: str | None = None
    overrides: str | None = None  # the earlier evalframe verdict it replaces
    seen: tuple[str, ...] = ()  # the ids of what the trace held of its name (and span) when it was decided
    there: bool = False  # on the trace already (the same digest, a decision): not written

    @property
    def assessment_id(self) -> str:
        """Its id in MLflow, made from where it goes and what was there of its name when it was decided.
        Two runs deciding on the same state give the same id and the store takes only the first (the id
        is the key of its assessments table): the compare-and-set MLflow has no call for. Without it, a
        run writing between another's read and write would leave two verdicts of one digest."""
        key = "\n".join([self.trace_id, self.span_id or "", self.name, *self.seen])
        return "a-" + hashlib.sha256(key.encode()).hexdigest()[:32]


Done = tuple[TraceVerdict, str | None]  # written or there already (None), or the error that stopped it


def trace_ids(item: ItemResult) -> list[str]:
    """The traces an item was read from: its own, or every trace of its session, oldest first."""
    entries = item.record.get(judged.SESSION_TRACES)
    if isinstance(entries, list) and entries:
        return [str(e["trace_id"]) for e in entries if isinstance(e, Mapping) and e.get("trace_id")]
    return [item.trace_id] if item.trace_id else []


class Traces:
    """The traces of the store at `uri`, through MLflow's tracing client (not the fluent API, whose store
    is the process's: two write-backs at once in one process would move each other's)."""

    def __init__(self, uri: str):
        from mlflow.tracing.client import TracingClient

        self.client = TracingClient(uri)

    def read(self, trace_id: str) -> list[dict[str, Any]] | None:
        """What the trace holds now: its assessments (its TraceInfo alone, no spans); None: it is gone."""
        try:
            return assessments(self.client.get_trace_info(trace_id))
        except Exception:  # deleted since: its verdicts' writes fail and say so
            return None

    def write(self, verdict: TraceVerdict) -> str | None:
        """Write one verdict; the error, if it could not be written."""
        from mlflow.entities import AssessmentError, AssessmentSource, Feedback

        # `overrides`: what mlflow.override_feedback does (the earlier verdict kept, marked invalid) in
        # one request instead of two, and for an unscored verdict too (an error).
        written = Feedback(
            name=verdict.name,
            value=verdict.value,
            error=AssessmentError(error_code=verdict.error[0], error_message=verdict.error[1])
            if verdict.error
            else None,
            rationale=verdict.rationale,
            source=AssessmentSource(source_type=verdict.source[0], source_id=verdict.source[1]),
            metadata=dict(verdict.metadata),
            span_id=verdict.span_id,
            overrides=verdict.overrides,
        )
        # The store keeps a caller's id, its key: of two writes under one id, one is taken.
        written.assessment_id = verdict.assessment_id
        try:
            self.client.log_assessment(verdict.trace_id, written)
        except Exception as e:
            # Its first line: SQLAlchemy's go on with the statement (MLflow's log file has it all).
            return f"{type(e).__name__}: {one_line(scrub_text(str(e)))}"
        return None


def _read_again(traces: Traces, item: ItemResult) -> ItemResult:
    """`item` with what its traces hold now in its record, instead of what they held when it was read."""
    now = {t: found for t in trace_ids(item) if (found := traces.read(t)) is not None}
    record = dict(item.record)
    if item.trace_id in now:
        record["assessments"] = now.pop(item.trace_id)
    if now:  # a session's other traces, where its per-turn verdicts go
        record[TURNS] = {**(record.get(TURNS) or {}), **now}
    return replace(item, record=record)


def write_item(
    traces: Traces, item: ItemResult, decide: Callable[[ItemResult], list[TraceVerdict]]
) -> list[Done]:
    """Write one item's verdicts (`decide`: what they are against a state of its traces), each decided
    on what its traces hold just before. A write the store refuses because another run wrote under
    the same id meanwhile (decided on the same state) is decided again on the new state: skipped (the
    same digest) or overriding (another)."""
    done: list[Done] = []
    failed: list[Done] = []
    again: set[tuple[str, str | None, str]] | None = None  # the verdicts to decide again; None: all
    for _ in range(TRIES):
        fresh = _read_again(traces, item)
        if failed:
            ids = {str(a.get("assessment_id")) for a in fresh.record.get("assessments") or []}
            ids |= {str(a.get("assessment_id")) for f in (fresh.record.get(TURNS) or {}).values() for a in f}
            done += [(v, e) for v, e in failed if v.assessment_id not in ids]  # a failure of its own
            again = {(v.trace_id, v.span_id, v.name) for v, _ in failed if v.assessment_id in ids}
            if not again:
                return done
        todo = [v for v in decide(fresh) if again is None or (v.trace_id, v.span_id, v.name) in again]
        outcomes = [(v, None if v.there else traces.write(v)) for v in todo]
        done += [(v, e) for v, e in outcomes if e is None]
        failed = [(v, e) for v, e in outcomes if e is not None]
        if not failed:
            return done
    return done + failed
