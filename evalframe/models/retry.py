"""One retry policy for every request that leaves the process: chat completions and embeddings
(transport.py) and the HTTP target (targets.py).

Transient failures (rate limits, server errors, timeouts, dropped connections) are retried after the
wait the server asked for (Retry-After), else a full-jitter exponential backoff. A step's retries come
out of one budget: however many times an invalid reply is given back to the model, the step never
sends more than 1 + its transport retries + its reply retries requests (they add, never multiply).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from evalframe.models import limits
from evalframe.models.limits import Deadline

T = TypeVar("T")


@dataclass
class Budget:
    """Transport retries left for one step, shared by all of its requests."""

    left: int


def retry_after(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms or Retry-After header), if it said."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or getattr(error, "litellm_response_headers", None) or {}
    return limits.retry_after(headers) if hasattr(headers, "get") else None


def backoff(attempt: int, error: BaseException | None = None, base: float = 0.5, cap: float = 30.0) -> float:
    """Delay before retry number `attempt` (1-based): a full-jitter exponential backoff, or the server's
    Retry-After when it is longer (up to `cap`)."""
    own = random.uniform(0, min(cap, base * 2**attempt))
    asked = retry_after(error) if error is not None else None
    return own if asked is None else max(own, min(asked, cap) + random.uniform(0, 0.1))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    budget: Budget | int,
    transient: Callable[[BaseException], bool],
    rate_limited: Callable[[BaseException], bool] = lambda e: False,
    deadline: Deadline | None = None,
) -> T:
    """`attempt()` until it returns, retrying the failures `transient` accepts while `budget` lasts;
    any other failure, or the last one, is raised. A failure `rate_limited` accepts (a 429 within the
    request's deadline) is tried again at once without using the budget: the attempt itself waits
    for the model's cool-down (limits.ModelLimits), with every other request to that model. A retry
    the server asks to put off (Retry-After) past the request's `deadline` is not made: the failure
    is raised instead. (Our own backoff is bounded by the budget.)"""
    budget = budget if isinstance(budget, Budget) else Budget(budget)
    retried = 0
    while True:
        try:
            return await attempt()
        except Exception as e:
            if rate_limited(e):
                continue
            if budget.left <= 0 or not transient(e):
                raise
            pause = backoff(retried + 1, e)
            if deadline is not None and retry_after(e) is not None and pause > deadline.left():
                raise
            budget.left -= 1
            retried += 1
            await asyncio.sleep(pause)
