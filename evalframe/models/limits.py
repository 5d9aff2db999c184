"""How fast one process may send requests to one model: the provider's rate limit, kept per model.

A model (its name and where it is served) gets one `ModelLimits` per run, shared by every step, item
and scorer that asks it. Before each request it waits for:

- a place among the requests in flight: an adaptive limit that starts at `concurrency`, is halved
  once per episode of 429s (a 429 to a request sent before the last cut is the same episode), and
  grows back by one for every `limit` answers, never above `concurrency` (TCP's AIMD, as inspect-ai
  does per model). Until the model's first request is back (or FIRST_ALONE seconds have passed, so
  a first request that stalls does not hold the run for model.timeout), it is the only one in flight: the
  provider's first rate-limit headers come before the rest, and so does LiteLLM's first-call
  set-up, which would otherwise hold requests let go one by one and send them in a burst;
- the end of a cool-down: after a 429 no request goes to the model until its Retry-After (or
  retry-after-ms) has passed, or an exponential backoff when it names none; never sooner than that
  backoff, whatever it names (zero, a millisecond, a negative number, NaN, a date past): a provider
  saying "now" to every 429 is not hammered;
- the provider's own count: when its headers say a window is used up, requests wait for its reset
  instead of being answered 429. OpenAI's x-ratelimit-remaining-{requests,tokens} with
  x-ratelimit-reset-* (a duration), Anthropic's anthropic-ratelimit-{requests,tokens,input-tokens,
  output-tokens}-remaining with -reset (an RFC 3339 time);
- the budgets `model.rpm` / `model.tpm`, as token buckets that never burst (requests are spaced
  evenly): a request's tokens are estimated before it is sent and corrected from the reply's usage.
  The parallel jobs of a sweep split each budget evenly (`share`).

Every wait has a deadline. A request's own (`Deadline`: timeout × (1 + max_retries) from its first
attempt) ends it at once when the limits would hold it longer (`Overdue`), and no cool-down or window
the provider asks for holds the model longer than `horizon`, the longest deadline a request has: a
Retry-After of 31 years, or of "inf", costs each request its deadline, not the run its life.

Pure bookkeeping over time.monotonic() and asyncio: no provider, no litellm.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

T = TypeVar("T")

# How many jobs of a sweep may run at once, set by the sweep (sweep.py) for its jobs: each gets that
# share of model.rpm and model.tpm (joblib's workers and Ray's inherit the variable).
PARALLEL_JOBS = "EVALFRAME_PARALLEL_JOBS"
BACKOFF_CAP = 30.0  # seconds: the longest cool-down after a 429 that names no wait
FIRST_ALONE = 5.0  # seconds: the longest a model's first request is alone in flight

WINDOWS = ("requests", "tokens", "input-tokens", "output-tokens")  # the providers' windows, by kind
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(value: Any) -> float | None:
    """Seconds in OpenAI's x-ratelimit-reset-* form ("20ms", "1.5s", "6m0s") or a bare number; None
    for what is none (negative, NaN)."""
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        seconds = sum(float(n) * _UNITS[u] for n, u in parts) if parts and text[0] != "-" else math.nan
    return seconds if seconds >= 0 else None  # NaN too


def until(moment: Any) -> float | None:
    """Seconds from now to an RFC 3339 time such as Anthropic's resets ("2025-06-01T12:00:05Z")."""
    try:
        at = datetime.fromisoformat(str(moment).strip().replace("Z", "+00:00"))  # 3.10 reads no "Z"
    except ValueError:
        return None
    return max(0.0, at.timestamp() - time.time()) if at.tzinfo else None


def header(headers: Mapping[str, Any] | None, name: str) -> Any:
    """A response header as the provider sent it, or as LiteLLM passes it on (`llm_provider-` prefix)."""
    if not headers:
        return None
    value = headers.get(name)
    return headers.get(f"llm_provider-{name}") if value is None else value


def window(headers: Mapping[str, Any] | None, kind: str) -> tuple[Any, float | None]:
    """What is left of the provider's `kind` window (requests, tokens...) and the seconds until it
    resets. Anthropic's come first: LiteLLM copies its -remaining to x-ratelimit-remaining-* but not
    its -reset, which is a time rather than OpenAI's duration."""
    reset = header(headers, f"anthropic-ratelimit-{kind}-reset")
    if reset is not None:
        return header(headers, f"anthropic-ratelimit-{kind}-remaining"), until(reset)
    reset = header(headers, f"x-ratelimit-reset-{kind}")
    return header(headers, f"x-ratelimit-remaining-{kind}"), None if reset is None else duration(reset)


def http_date(value: Any) -> float:
    """Seconds from now to an HTTP date (RFC 9110: "Wed, 21 Oct 2015 07:28:00 GMT"); NaN if it is none."""
    try:
        at = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp() - time.time()


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds a 429 asks to wait: retry-after-ms (precise) before Retry-After (seconds, or an HTTP
    date). None when neither names a wait (absent, not a number, zero, negative, NaN, a date past):
    the backoff decides. An absurd one (1e12 ms, inf) is as given: the horizon cuts it."""
    for name, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = header(headers, name)
        if value is None:
            continue
        try:
            seconds = float(value) * unit
        except (TypeError, ValueError):
            seconds = http_date(value) if unit == 1.0 else math.nan
        if seconds > 0:  # NaN is not
            return seconds
    return None


class Overdue(Exception):
    """The rate limits would hold a request past its deadline: it ends now, as a 429 past it does."""


@dataclass
class Deadline:
    """One request's time, across all its attempts: `seconds` from its first attempt."""

    seconds: float
    at: float = math.inf  # time.monotonic() when it runs out; none until the first attempt

    def start(self) -> None:
        if self.at == math.inf:
            self.at = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.at - time.monotonic()


def parallel_jobs() -> int:
    """The jobs of this process's sweep that may run at once (1 outside a parallel sweep)."""
    try:
        return max(1, int(os.environ.get(PARALLEL_JOBS) or 1))
    except ValueError:
        return 1


@dataclass
class Window:
    """What the provider's headers say is left of one of its windows (`window`)."""

    left: float = math.inf
    reset_at: float = 0.0

    def observe(self, remaining: Any, seconds: float | None, now: float) -> None:
        if remaining is None or seconds is None:
            return
        try:
            left = float(remaining)
        except ValueError:
            return
        if now >= self.reset_at:  # the provider's next window: its count starts here
            self.left, self.reset_at = left, now + seconds
        else:  # replies cross in flight: the lowest count of this window is the truest
            self.left = min(self.left, left)

    def delay(self, need: float, now: float) -> float:
        return self.reset_at - now if now < self.reset_at and self.left < max(need, 1) else 0.0

    def take(self, need: float, now: float) -> None:
        if now < self.reset_at:
            self.left -= need


@dataclass
class Bucket:
    """A budget per minute as a token bucket without burst (GCRA): requests are spaced so that no
    minute, nor any part of one, holds more than its share."""

    per_minute: float | None
    ready_at: float = 0.0  # when the next request may go

    def delay(self, now: float) -> float:
        return max(0.0, self.ready_at - now) if self.per_minute else 0.0

    def take(self, amount: float, now: float) -> None:
        if self.per_minute:
            self.ready_at = max(now, self.ready_at) + amount * 60.0 / self.per_minute

    def correct(self, amount: float) -> None:
        """The reply used `amount` more (or fewer) than estimated."""
        if self.per_minute:
            self.ready_at += amount * 60.0 / self.per_minute


@dataclass
class ModelLimits:
    ceiling: int  # the run's concurrency
    rpm: float | None = None  # this process's share of model.rpm / model.tpm
    tpm: float | None = None
    horizon: float = math.inf  # seconds: the longest deadline of a request, and of any wait the provider asks
    limit: int = field(init=False)  # the adaptive in-flight limit
    in_flight: int = field(default=0, init=False)
    rate_limited: int = field(default=0, init=False)  # 429s met
    waited: float = field(default=0.0, init=False)  # seconds some request was held back
    history: list[tuple[float, int]] = field(default_factory=list, init=False)  # (seconds in, limit)
    begun: float = field(default_factory=time.time, init=False)  # wall clock at seconds 0
    _started: float = field(default_factory=time.monotonic, init=False)
    _cut_at: float = field(default=-math.inf, init=False)  # when the limit was last cut
    _cool_until: float = field(default=0.0, init=False)
    _streak: int = field(default=0, init=False)  # episodes of 429s since the last answer
    _answers: int = field(default=0, init=False)  # answers since the limit last moved
    _windows: dict[str, Window] = field(init=False)  # the provider's own, by kind (WINDOWS)
    _rpm: Bucket = field(init=False)
    _tpm: Bucket = field(init=False)
    _places: list[asyncio.Future[None]] = field(default_factory=list, init=False)
    _warm: bool = field(default=False, init=False)  # a request came back, or FIRST_ALONE passed
    _alone: asyncio.TimerHandle | None = field(default=None, init=False)  # ends the first one's solo
    _held: int = field(default=0, init=False)  # requests held back right now
    _held_since: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.ceiling = max(1, self.ceiling)
        self.limit = self.ceiling
        self._rpm, self._tpm = Bucket(self.rpm), Bucket(self.tpm)
        self._windows = {kind: Window() for kind in WINDOWS}
        self.history.append((0.0, self.ceiling))

    @property
    def cool_until(self) -> float:
        """When the model takes requests again after its last 429 (time.monotonic())."""
        return self._cool_until

    @property
    def current(self) -> int:
        """The in-flight limit now."""
        return self.limit

    async def enter(self) -> None:
        """Wait for a place among the requests in flight."""
        while self.in_flight >= (self.current if self._warm else 1):
            place = asyncio.get_running_loop().create_future()
            self._places.append(place)
            try:
                await place
            finally:
                if place in self._places:
                    self._places.remove(place)
        self.in_flight += 1
        if not self._warm and self._alone is None:
            self._alone = asyncio.get_running_loop().call_later(FIRST_ALONE, self._warm_up)

    def leave(self) -> None:
        self.in_flight -= 1
        self._warm_up()

    def _warm_up(self) -> None:
        self._warm = True
        self._wake()

    def _wake(self) -> None:
        for _ in range(max(0, self.current - self.in_flight)):
            while self._places:
                place = self._places.pop(0)
                if not place.done():
                    place.set_result(None)
                    break

    def delay(self, tokens: float, now: float | None = None) -> float:
        """Seconds until a request of `tokens` may be sent (0: now)."""
        now = time.monotonic() if now is None else now
        return max(
            self._cool_until - now,
            *(w.delay(self._need(kind, tokens), now) for kind, w in self._windows.items()),
            self._rpm.delay(now),
            self._tpm.delay(now),
            0.0,
        )

    async def ready(self, tokens: float, deadline: Deadline | None = None) -> None:
        """Sleep until a request of `tokens` may be sent; the time counts as waiting on rate limits. A
        request whose deadline comes first ends now (Overdue): waiting would not get it an answer."""
        while (wait := self.delay(tokens)) > 0:
            if deadline is not None and wait > deadline.left():
                raise Overdue(
                    f"the rate limits hold requests {wait:.1f} s more, past the request's deadline "
                    f"({deadline.seconds:g} s from its first attempt: timeout × (1 + max_retries))"
                )
            if self._held == 0:
                self._held_since = time.monotonic()
            self._held += 1
            try:
                await asyncio.sleep(wait)
            finally:
                self._held -= 1
                if self._held == 0:
                    self.waited += time.monotonic() - self._held_since

    async def send(
        self,
        limiter: asyncio.Semaphore,
        tokens: float,
        request: Callable[[], Awaitable[T]],
        deadline: Deadline | None = None,
    ) -> T:
        """`request()` once these limits and a place among the run's requests in flight (`limiter`)
        let a request of `tokens` go: the one way out to a rate-limited service, a model or a target.
        Its `deadline` starts with its first attempt and bounds every wait after it."""
        await self.enter()
        try:
            while True:
                await self.ready(tokens, deadline)
                async with limiter:
                    if self.take(tokens):  # else a cool-down began while waiting here: wait again
                        if deadline is not None:
                            deadline.start()
                        return await request()
        finally:
            self.leave()

    def take(self, tokens: float) -> bool:
        """Send now if nothing holds the request back (its budget is used), else False."""
        now = time.monotonic()
        if self.delay(tokens, now) > 0:
            return False
        for kind, w in self._windows.items():
            w.take(self._need(kind, tokens), now)
        self._rpm.take(1, now)
        self._tpm.take(tokens, now)
        return True

    def answered(self, headers: Mapping[str, Any] | None, estimated: float, used: float) -> None:
        """A reply: grow the limit back slowly, read what the provider says is left, correct the
        token budget by what the reply really used."""
        self._streak = 0
        self._answers += 1
        if self.limit < self.ceiling and self._answers >= self.limit:
            self._set(self.limit + 1)
        self.observe(headers)
        if used:
            self._tpm.correct(used - estimated)

    def observe(self, headers: Mapping[str, Any] | None) -> None:
        now = time.monotonic()
        for kind, w in self._windows.items():
            left, reset = window(headers, kind)
            w.observe(left, None if reset is None else min(reset, self.horizon), now)

    @staticmethod
    def _need(kind: str, tokens: float) -> float:
        """What a request of `tokens` (its prompt plus max_tokens) takes from a window of `kind`. Its
        output tokens are not known before the reply: that window holds it only once used up."""
        return {"requests": 1, "output-tokens": 0}.get(kind, tokens)

    def refused(self, sent: float, headers: Mapping[str, Any] | None) -> float:
        """A 429 to a request sent at `sent`: count it, cool the model down for as long as the
        provider asks (or a backoff), and cut the limit unless this episode already did. Returns
        the cool-down's end (time.monotonic()): never past `horizon`, so a cool-down never outlives
        the requests it holds (a wait past their deadlines would end them anyway)."""
        now = time.monotonic()
        self.rate_limited += 1
        if sent >= self._cut_at:  # sent after the last cut: a new episode
            self._cut_at = now
            self._streak += 1
            self._set(max(1, self.limit // 2))
        self.observe(headers)
        # The backoff is the least wait: a provider saying "now" (or 1 ms) to every 429 is not hammered.
        wait = max(retry_after(headers) or 0.0, min(BACKOFF_CAP, 0.25 * 2**self._streak))
        wait = min(wait + random.uniform(0, 0.05), self.horizon)
        self._cool_until = max(self._cool_until, now + wait)
        return self._cool_until

    def _set(self, limit: int) -> None:
        if limit != self.limit:
            self.limit, self._answers = limit, 0
            self.history.append((time.monotonic() - self._started, limit))
            self._wake()
