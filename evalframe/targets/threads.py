"""Where a sync function of the user's runs: a daemon thread per call (DaemonThreads).

A call that outlives target.timeout cannot be stopped (Python has no way to kill a thread), so its
item is given up and the thread is left to finish alone. A ThreadPoolExecutor's workers (asyncio's
default executor too) are joined when the interpreter exits, so one function that sleeps for an hour
would keep a finished run's process alive for that hour: a CI job that never ends. A daemon thread
does not hold the process: it ends when the run's work ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonThreads(Executor):
    """An Executor starting one daemon thread per call (at most `concurrency` run at once anyway: the
    run's limiter holds the rest back). A call still running after shutdown is left to itself."""

    def __init__(self, name: str):
        self.name = name
        self._calls = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if self._closed:
            raise RuntimeError(f"{self.name}: no new call after shutdown")
        future: Future[T] = Future()
        self._calls += 1

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # the caller's future holds it, as a pool's would
                future.set_exception(e)

        threading.Thread(target=run, name=f"{self.name}-{self._calls}", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        # Nothing to wait for that can be waited for: a call that is still running is one that timed out.
        self._closed = True
