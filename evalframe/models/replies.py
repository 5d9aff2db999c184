"""A model's replies, each asked for once: identical requests within a run share one call, even while
it is still in flight; the disk cache (or a re-score's stored replies) serves what an earlier run
asked, and another process of a parallel sweep asking the same waits for its reply instead of asking."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from evalframe.models.cache import Cache, key as cache_key
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message, Stats, StepResult, Usage

Validate = Callable[[str], dict[str, Any]]  # a raw reply -> the step's reply, or a pydantic ValidationError
SHARED = 20_000  # answered requests a model keeps to share with identical ones (see Replies._forget)


def request_key(s: ModelSettings, messages: list[Message], fmt: dict[str, Any] | None) -> str:
    """A request's key in the cache: the messages, the reply schema and what of the model can change a
    reply (also what `evalframe align` counts its calls by before making any)."""
    model = {
        "name": s.name,
        "api_base": s.api_base,
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
        "extra": dict(s.extra),
    }  # timeout and retries cannot change a reply: not in the key
    return cache_key({"model": model, "messages": messages, "response_format": fmt})


class Replies:
    """One model's replies, keyed by what can change them, served from the calls shared in the run or
    the disk cache before the model is asked."""

    def __init__(self, settings: ModelSettings, cache: Cache, stats: Stats):
        self.settings = settings
        self.cache = cache
        self.stats = stats
        # Identical requests within a run (the same ground truth extracted for several rows or scorers)
        # share one call, even while it is still in flight.
        self._shared: dict[str, asyncio.Future[StepResult]] = {}

    def key(self, messages: list[Message], fmt: dict[str, Any] | None) -> str:
        return request_key(self.settings, messages, fmt)

    async def once(
        self,
        step_name: str,
        messages: list[Message],
        fmt: dict[str, Any] | None,
        validate: Validate,
        ask: Callable[[], Awaitable[StepResult]],
    ) -> StepResult:
        """Serve a request from the run's shared calls or the disk cache, else ask the model (once)."""
        k = self.key(messages, fmt)
        if k in self._shared:
            first = await asyncio.shield(self._shared[k])
            self.stats.hits += 1
            # The same key is the same messages: this request's own, which the shared step leaves out.
            return replace(
                first, step=step_name, messages=messages, usage=Usage(), latency=0.0, attempts=0, cached=True
            )
        future: asyncio.Future[StepResult] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved" noise
        self._shared[k] = future
        try:
            step = self._from_cache(k, step_name, messages, validate)
            if step is None:
                # Another process of a parallel sweep may be asking the same thing: wait for its reply.
                hit = await self.cache.claim(k, patience=self.settings.patience())
                step = self._validated(hit, step_name, messages, validate) if hit else None
            if step is None:
                self.cache.before_asking(step_name, self.settings.name)  # a replay raises here instead
                try:
                    step = await ask()
                finally:
                    if step is None or not step.ok:
                        self.cache.release(k)  # let a waiting process ask instead
                if step.ok:  # errors and unparseable replies are never cached: they are asked again
                    self.cache.put(k, {"raw": step.raw})
            step.key = k
            # Shared without its messages: they are the prompt, most of a step's size, and every
            # request sharing it has them already (SHARED answered requests at ~3 KB each was 60 MB).
            future.set_result(replace(step, messages=[]))
            self._forget()
            return step
        except BaseException as e:
            future.set_exception(e)
            raise

    def _forget(self) -> None:
        """Share only the last SHARED answered requests (older ones are in the disk cache): memory
        stays flat however many rows a run scores."""
        while len(self._shared) > SHARED:
            oldest = next(iter(self._shared))
            if not self._shared[oldest].done():
                break
            del self._shared[oldest]

    def _from_cache(
        self, k: str, step_name: str, messages: list[Message], validate: Validate
    ) -> StepResult | None:
        hit = self.cache.get(k)
        return self._validated(hit, step_name, messages, validate) if hit else None

    def _validated(
        self, hit: dict[str, Any], step_name: str, messages: list[Message], validate: Validate
    ) -> StepResult | None:
        if hit.get("error"):  # only a replay stores failures: the logged run could not use this reply
            self.stats.hits += 1
            return StepResult(
                step=step_name, messages=messages, raw=hit.get("raw"), error=hit["error"], cached=True
            )
        try:
            reply = validate(hit["raw"])
        except ValidationError:
            return None  # stored under an older schema: ask again
        self.stats.hits += 1
        return StepResult(step=step_name, messages=messages, reply=reply, raw=hit["raw"], cached=True)
