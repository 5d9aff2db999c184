"""When a run imports what its end needs (matplotlib for report.html's plots, scipy.stats for the
intervals, mlflow to log it: a second or two of the interpreter's lock between them): on background
threads, once the run's first model reply is in (or a second after its first request was counted);
at once in a run that calls no chat model, and at its first item from the cache in a run of cached
replies.

Not earlier: until the first request is on the wire, litellm's import, the config, the rows and the
request itself (LiteLLM builds it on a thread of its own) need every bit of the one interpreter lock;
a thread importing beside them only stretches the time to the first request, and nothing short of
a reply says the request is out (how busy the process looks does not, on a loaded machine). Not at
the end: the last item to exit would wait for them. From the first reply on, the run mostly waits
for its models.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from evalframe.models.steps import Stats
from evalframe.report import html as html_report
from evalframe.results import intervals
from evalframe.run.planning import Plan
from evalframe.tracking import store

T = TypeVar("T")
POLL = 0.01  # seconds between looks at the run's totals: one wake-up of the loop each
PATIENCE = 1.0  # seconds after the first request was counted: start anyway (a failed or free reply)


def of(plan: Plan, stats: Stats) -> Warmup:
    """The warm-up of a planned run: whether it calls a chat model, and the store it is logged to."""
    asks = bool(plan.target.models()) or any(s.models() for s in plan.scorers.values())
    tracking = plan.config.get("tracking") or {}
    return Warmup(stats, asks, str(tracking.get("uri")) if tracking.get("enabled") else None)


class Warmup:
    def __init__(self, stats: Stats, asks_models: bool, logs: str | None = None):
        self.stats = stats
        self.logs = logs  # the MLflow store the run goes to (mlflow's import too); None: none
        self.started = False
        if not asks_models:
            self.start()

    def start(self) -> None:
        if not self.started:
            self.started = True
            html_report.preload()
            intervals.preload()
            if self.logs is not None:
                store.preload(self.logs)

    def counting(self, advance: Callable[[], None]) -> Callable[[], None]:
        """`advance` (the progress bar's step, called as each item's work is done), starting the
        imports once a reply came from the cache."""

        def step() -> None:
            if not self.started and self.stats.hits:
                self.start()
            advance()

        return step

    async def during(self, work: Coroutine[Any, Any, T]) -> T:
        """`work`, with the imports started once its first reply is in."""
        watcher = asyncio.ensure_future(self._first_reply())
        try:
            return await work
        finally:
            watcher.cancel()

    async def _first_reply(self) -> None:
        since = math.inf
        while not self.started:
            await asyncio.sleep(POLL)
            if self.stats.calls:
                since = min(since, time.perf_counter())
                # Every reply adds its cost: a price, or NaN and its model among the unpriced.
                replied = self.stats.cost != 0.0 or bool(self.stats.unpriced)
                if replied or time.perf_counter() - since > PATIENCE:
                    self.start()
