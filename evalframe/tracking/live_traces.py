"""The trace a live target's call produced, when the function under test is traced with MLflow
(`@mlflow.trace`, autologging): which trace a call made, and that trace as a record, so the target reads
its contexts and tool calls by the selectors of dataset=mlflow_traces (evalframe.targets.traced).

MLflow notes the last trace each thread or task finished in a context variable; a call runs in a copy
of its context (a sync function in its worker thread) or its own task (an async one), so concurrent
calls never take each other's trace. A function whose work is traced in another thread of its own is
not seen: its calls produce no trace here.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from evalframe.targets.base import Target
from evalframe.targets.traced import Traced
from evalframe.tracking.trace_records import record


def attach(target: Target) -> None:
    """Give `target` the means to read the traces its calls produce, if it reads them."""
    if isinstance(target, Traced):
        target.traces = Capture()


def _last() -> str | None:
    if "mlflow" not in sys.modules:  # nothing imported MLflow: nothing was traced (and no 1.6 s import)
        return None
    import mlflow

    return mlflow.get_last_active_trace_id(thread_local=True)


class Capture:
    """What tracking gives a traced target (evalframe.targets.traced.Traces)."""

    def call(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
        """`fn(*args)` and the id of the trace it finished (None: none), in a copy of the context."""

        def run() -> tuple[Any, str | None]:
            before = _last()
            value = fn(*args)
            after = _last()
            return value, after if after != before else None

        return contextvars.copy_context().run(run)

    async def wait(self, pending: Awaitable[Any]) -> tuple[Any, str | None]:
        """What `pending` (a call of an async function) gives, and the id of the trace it finished; to be
        awaited in the task the call runs in."""
        before = _last()
        value = await pending
        after = _last()
        return value, after if after != before else None

    def records(self, trace_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The finished traces as records, by id, from the store the function's MLflow writes to: MLflow
        writes traces in the background, so once it has written them all (its flush)."""
        import mlflow

        mlflow.flush_trace_async_logging()
        found = {}
        for trace_id in trace_ids:
            trace = mlflow.get_trace(trace_id, silent=True)
            if trace is not None:
                found[trace_id] = record(trace)
        return found
