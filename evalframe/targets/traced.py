"""A live target whose function is traced with MLflow (`@mlflow.trace`, a RETRIEVER span, autologging):
what each call retrieved and called is read from the trace the call produced, by the selectors of
dataset=mlflow_traces, and handed over as a returned mapping's fields are (data.handed), with the trace's
id, so the item's verdicts can be written onto the trace. So `faithfulness` judges a live RAG function
on the documents its own RETRIEVER span returned, with no change to its code.

Only tracking reads MLflow: it gives the target the means (`traces`, a Traces) when the run is planned
(evalframe.tracking.live_traces.attach). Without it, or when a call produced no trace, nothing is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import Any, Protocol

from evalframe.data import handed as handover, traces as selectors
from evalframe.data.rows import Row
from evalframe.errors import ConfigError, DataError
from evalframe.models.steps import StepResult

# What a call's trace gives by default: the last retrieval's documents (their text and their ids) and
# every tool span, as dataset=mlflow_traces reads them (conf/target/python.yaml says the same).
FROM_TRACE = {
    "contexts": "span:RETRIEVER[-1].outputs",
    "context_ids": "span:RETRIEVER[-1].outputs",
    "tool_calls": "span:TOOL[*]",
}


class Traces(Protocol):
    """Which trace a call produced, and that trace as a record (evalframe.tracking.live_traces)."""

    def call(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]: ...

    async def wait(self, pending: Awaitable[Any]) -> tuple[Any, str | None]: ...

    def records(self, trace_ids: list[str]) -> Mapping[str, Mapping[str, Any]]: ...


class Traced:
    """A target that reads what its calls' traces hold: `from_trace` maps each field it hands over
    (contexts, context_ids, tool_calls) to a selector; null or {} reads nothing."""

    traces: Traces | None = None  # given by tracking when the run is planned

    def __init__(self, from_trace: Mapping[str, str | None] | None, key: str):
        unknown = sorted(set(from_trace or {}) - set(handover.HANDED))
        if unknown:
            raise ConfigError(
                f"{key}.{unknown[0]}: a trace hands over {', '.join(handover.HANDED)} only; "
                f"remove it, or set {key}=null to read no trace"
            )
        self.from_trace = {
            name: selectors.parse(str(text), f"{key}.{name}")
            for name, text in (from_trace or {}).items()
            if text is not None
        }

    def reads_traces(self) -> bool:
        return bool(self.from_trace) and self.traces is not None

    async def read_traces(
        self,
        rows: list[Row],
        produced: list[tuple[str, StepResult | None]],
        made: Mapping[str, str],
        pool: Executor,
        label: str,
    ) -> None:
        """Each call's trace (`made`: row id -> trace id) read, at once for the lot (MLflow writes traces
        in the background: one wait for them all), and what it holds put into the call's step."""
        if not made or self.traces is None:
            return
        found = await asyncio.get_running_loop().run_in_executor(
            pool, self.traces.records, list(made.values())
        )
        for row, (_, step) in zip(rows, produced, strict=True):
            if row.id in made and step is not None and step.error is None:
                self.from_its_trace(found.get(made[row.id]), step, f"{label}, item {row.id}")

    def from_its_trace(self, trace: Mapping[str, Any] | None, step: StepResult, where: str) -> None:
        """The fields `trace` (the record of the trace a call produced) gives, into the call's step
        reply beside those the function returned itself (which win), with the trace's ids. A trace
        they cannot be read from (a document without an id) is that item's error."""
        if trace is None:
            return
        try:
            found = selectors.fields(trace, self.from_trace, where)
        except DataError as e:
            step.error = str(e)
            return
        reply = step.reply or {"output": step.raw}
        ids = {"trace_id": found.pop("trace_id"), "retriever_span_id": found.pop("retriever_span_id")}
        if "contexts" in reply or "contexts" not in found:  # the contexts are not the span's
            ids["retriever_span_id"] = None
        for name, value in handover.as_json(found).items():
            reply.setdefault(name, value)
        step.reply = {**reply, **{k: v for k, v in ids.items() if v}}
