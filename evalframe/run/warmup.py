"""When a run imports what its end needs (matplotlib for report.html's plots, scipy.stats for the
intervals, mlflow to log it: a second or two of the interpreter's lock between them): on background
threads, once the run's first model request is on the wire; at once in a run that calls no chat
model, and at its first item from the cache in a run of cached replies.

Not earlier: until the first request is sent, litellm's import, the config, the rows and the request
itself need every bit of the one interpreter lock (a thread importing beside them only stretches the
time to the first request). Not at the end: the last item to exit would wait for them. From the first
request on the run mostly waits for its models (the first request's round trip alone is idle time).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from evalframe.models.calls import Stats
from evalframe.report import html as html_report
from evalframe.results import intervals
from evalframe.tracking import store

T = TypeVar("T")
POLL = 0.01  # seconds between looks at the request count: one wake-up of the loop each
IDLE = 0.5  # of a core: the process is waiting for its models
PATIENCE = 1.0  # seconds after the first request was counted: start anyway


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
        """`work`, with the imports started once it has sent its first request."""
        watcher = asyncio.ensure_future(self._first_request())
        try:
            return await work
        finally:
            watcher.cancel()

    async def _first_request(self) -> None:
        # A request counted is not yet sent: building the first one (LiteLLM's and the SDK's lazy
        # imports) takes a while. It is out once the process waits: less than half a core busy over
        # a poll (or a second on, whatever the process does).
        cpu, now = time.process_time(), time.perf_counter()
        since = math.inf
        while not self.started:
            await asyncio.sleep(POLL)
            cpu, was_cpu, now, was = time.process_time(), cpu, time.perf_counter(), now
            if self.stats.calls:
                since = min(since, now)
                if cpu - was_cpu < IDLE * (now - was) or now - since > PATIENCE:
                    self.start()
