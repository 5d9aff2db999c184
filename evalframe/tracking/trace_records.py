"""An MLflow trace as a plain record, the one shape the rest of evalframe reads traces in (the
selectors of evalframe.data.traces, write-back's check for verdicts already given):

    {"trace_id", "state" ("OK", "ERROR", ...), "request_time" (ms since the epoch), "tags": {},
     "metadata": {}, "session_id": str | None,
     "spans": [{"span_id", "parent_id", "name", "span_type", "start_ns", "end_ns", "inputs",
                "outputs", "attributes"}, ...] in start order,
     "assessments": [{"assessment_id", "name", "kind" ("feedback" or "expectation"), "value",
                      "valid", "source_type", "source_id", "rationale", "metadata": {}, "span_id",
                      "error": None or {"error_code", "error_message"}}, ...] oldest first}

A span's attributes leave out MLflow's copies of its inputs and outputs (they are the span's own
`inputs` and `outputs`), so a record holds each value once.
"""

from __future__ import annotations

from typing import Any

# MLflow keeps a span's inputs and outputs as attributes too; the record has them once.
_COPIES = ("mlflow.spanInputs", "mlflow.spanOutputs")
SESSION = "mlflow.trace.session"  # the trace metadata key of mlflow.update_current_trace(session_id=...)


def record(trace: Any) -> dict[str, Any]:
    """`trace` (an mlflow.entities.Trace, with or without its spans) as a plain record."""
    info = trace.info
    spans = sorted(trace.data.spans if trace.data else [], key=lambda s: s.start_time_ns or 0)
    metadata = dict(info.trace_metadata or {})
    return {
        "trace_id": info.trace_id,
        "state": _name(info.state),
        "request_time": info.request_time,
        "tags": dict(info.tags or {}),
        "metadata": metadata,
        "session_id": metadata.get(SESSION),
        "spans": [_span(s) for s in spans],
        "assessments": assessments(info),
    }


def assessments(info: Any) -> list[dict[str, Any]]:
    """A trace's assessments (of its mlflow.entities.TraceInfo) as the record holds them, oldest first."""
    return [
        _assessment(a)
        for a in sorted(info.assessments or [], key=lambda a: a.create_time_ms or 0)
        if a.feedback is not None or a.expectation is not None  # not an issue reference
    ]


def _name(state: Any) -> str:
    return str(getattr(state, "value", state))


def _span(span: Any) -> dict[str, Any]:
    return {
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "span_type": span.span_type,
        "start_ns": span.start_time_ns,
        "end_ns": span.end_time_ns,
        "inputs": span.inputs,
        "outputs": span.outputs,
        "attributes": {k: v for k, v in (span.attributes or {}).items() if k not in _COPIES},
    }


def _assessment(a: Any) -> dict[str, Any]:
    error = a.error or (a.feedback.error if a.feedback is not None else None)
    return {
        "assessment_id": a.assessment_id,
        "name": a.name,
        "kind": "feedback" if a.feedback is not None else "expectation",
        "value": a.feedback.value if a.feedback is not None else a.expectation.value,
        "valid": a.valid is not False,  # None: MLflow has not said (an assessment is valid until overridden)
        "source_type": _name(a.source.source_type) if a.source else None,
        "source_id": a.source.source_id if a.source else None,
        "rationale": a.rationale,
        "metadata": dict(a.metadata or {}),
        "span_id": a.span_id,
        "error": None
        if error is None
        else {"error_code": error.error_code, "error_message": error.error_message},
    }
