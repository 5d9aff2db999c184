"""A run's items as MLflow traces, one per item, carrying its verdicts as assessments: MLflow's
"Evaluation runs" page then shows, for each input, the verdicts of two runs side by side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult
from evalframe.tracking.feedback import source

# Items traced per run unless tracking.max_traces says otherwise: MLflow's store takes 45-70 ms per
# trace on SQLite (bench/bench_report.py), so 200 add 10-15 s to a run; items.json holds every item.
MAX_TRACES = 200


def trace_items(result: RunResult, config: Mapping[str, Any], notes: list[str]) -> None:
    """The active run's per-item traces, unless tracking.traces is off. A failure is a warning in
    `notes`, as is a run with more items than tracking.max_traces."""
    tracking = config.get("tracking") or {}
    if not tracking.get("traces", True):
        return
    try:
        traced = log_traces(result, config, tracking.get("max_traces", MAX_TRACES))
    except Exception as e:  # the run, its table and its report are logged: say what is missing
        notes.append(
            f"warning: per-item MLflow traces were not logged "
            f"({type(e).__name__}: {str(e)[:300]}); "
            "items.json has every item. tracking.traces=false turns them off"
        )
        return
    own = sum(1 for item in result.items if not item.trace_id)  # the others have traces of their own
    if traced < own:
        # A run keeping only its first items (keep_items) has every item in results.jsonl, not items.json.
        everything = "items.json" if len(result.items) == result.count else "results.jsonl"
        notes.append(
            f"MLflow traces: the first {traced} of {own} items "
            f"(tracking.max_traces; every item is in {everything})"
        )


def _sources(config: Mapping[str, Any]) -> dict[str, Any]:
    """Who gave each scorer's verdict: the judge model(s) for LLM scorers, evalframe's code otherwise."""
    from mlflow.entities import AssessmentSource

    return {
        name: AssessmentSource(*source(name, spec)) for name, spec in (config.get("scorers") or {}).items()
    }


def _assessments(item: ItemResult, sources: Mapping[str, Any]) -> list[Any]:
    """An item's verdicts as MLflow assessments: one feedback per scorer (score and reason; an
    unscored item is a feedback with an error, not a 0), the ground truth and a person's score as
    expectations."""
    from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Expectation, Feedback

    dataset = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="dataset")
    out: list[Any] = []
    if item.ground_truth is not None:
        out.append(Expectation(name="ground_truth", value=item.ground_truth, source=dataset))
    if item.human is not None:
        out.append(Expectation(name="human_score", value=item.human, source=dataset))
    for name, r in item.scores.items():
        source = sources.get(name) or AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=name)
        if r.scored:
            out.append(Feedback(name=name, value=r.score, rationale=r.reason, source=source))
        else:
            code = "NOT_APPLICABLE" if r.not_applicable else "UNSCORED"
            error = AssessmentError(error_code=code, error_message=r.error or r.reason)
            out.append(Feedback(name=name, error=error, rationale=r.reason, source=source))
    return out


def log_traces(result: RunResult, config: Mapping[str, Any], limit: int | None) -> int:
    """One MLflow trace per item not read from a trace, linked to the active run, carrying its scores
    and reasons as assessments. Returns how many items were traced (the first `limit`; None = all).

    Each trace goes out as one span batch and one trace record with its assessments attached (as it
    ends on SQLite, on MLflow's background export queue on a server: store.fluent_store); logging
    each assessment with mlflow.log_feedback instead would add one request per scorer and item.
    Attaching them relies on MLflow's in-memory trace manager (mlflow is pinned exactly, and the UI
    test reads the assessments back).
    """
    import mlflow
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    manager = InMemoryTraceManager.get_instance()
    sources = _sources(config)
    # An item read from a trace has one already: its verdicts go onto it (feedback.py), not onto a copy.
    items = [item for item in result.items if not item.trace_id]
    items = items if limit is None else items[: int(limit)]
    for item in items:
        with mlflow.start_span(name="evalframe.item", span_type="EVALUATOR") as span:
            # The row's id first (a long input's preview is cut at its end): MLflow's "Evaluation runs"
            # view pairs two runs' items by their request, and several rows may ask the same question.
            span.set_inputs({"id": item.id, "input": item.input})
            span.set_outputs(item.output)
            with manager.get_trace(span.trace_id) as trace:
                if trace is not None:
                    trace.info.tags["evalframe.item_id"] = item.id
                    trace.info.assessments.extend(_assessments(item, sources))
    mlflow.flush_trace_async_logging()  # before the run ends, and so a later read sees every trace
    return len(items)
