"""Requests on the wire: one model's requests sent within the run's concurrency limit and the model's
rate limits, each attempt bounded by model.timeout, transient failures retried, and refusals that no
retry cures (a bad key, no permission, an exhausted quota, an unknown model) told apart from them."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from evalframe.errors import ConfigError
from evalframe.models.limits import Deadline
from evalframe.models.loader import lib
from evalframe.models.pricing import Pricing
from evalframe.models.retry import Budget, with_retries
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats, StepResult


class ModelRejected(ConfigError):
    """The provider refused the request itself (bad key, no permission, quota used up, unknown
    model): no point trying other items."""


def transient_errors(litellm: Any) -> tuple[type[BaseException], ...]:
    """What a later attempt may cure: a 429, a server error, a dropped connection, a timeout."""
    return (
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
        litellm.Timeout,
        TimeoutError,  # our own deadline per request (asyncio.wait_for)
    )


def _refusal(litellm: Any, error: BaseException) -> str | None:
    """Why every request to this model would fail the same way, if it would: a refused key, no
    permission (403, whatever class LiteLLM gives it), an exhausted quota (a 429 that no wait cures),
    an unknown model."""
    if isinstance(error, litellm.AuthenticationError | litellm.PermissionDeniedError | litellm.NotFoundError):
        return type(error).__name__
    if getattr(error, "status_code", None) == 403:
        return "PermissionDeniedError (403)"
    said = f"{error} {getattr(error, 'body', '')}".lower()
    if isinstance(error, litellm.RateLimitError) and (
        "insufficient_quota" in said or "exceeded your current quota" in said
    ):
        return "insufficient_quota: the account's quota is used up"
    return None


class Transport:
    """One model's requests to its provider, sharing the run's concurrency limit and stats, and the
    model's rate limits, with every other client of the model."""

    def __init__(
        self,
        settings: ModelSettings,
        limiter: asyncio.Semaphore,
        stats: Stats,
        concurrency: int | None = None,
    ):
        self.settings = settings
        self.limiter = limiter
        self.stats = stats
        # One set of rate limits per model name in a run, whatever the other settings (temperature...).
        if settings.name not in stats.limits:
            stats.limits[settings.name] = settings.limits(concurrency or limiter._value)
        self.limits = stats.limits[settings.name]

    @functools.cached_property
    def pricing(self) -> Pricing:  # on the first call made: a run served by the cache never imports litellm
        return Pricing(self.settings)

    async def request(
        self,
        call: Callable[[], Awaitable[Any]],
        budget: Budget | int,
        step: StepResult | None = None,
        tokens: int = 0,
    ) -> Any:
        """One request to the provider within the run's concurrency limit and the model's rate limits
        (limits.py), each attempt bounded by `model.timeout` in total. A 429 waits for the model's
        cool-down and tries again until the request's deadline, without using the budget (past it,
        the 429 is the request's end: a retry would only wait for the same cool-down); server errors
        and timeouts are retried while the budget lasts, unless the server asks to wait past the
        deadline. A refused
        key, a missing permission, an exhausted quota or an unknown model ends the run
        (ModelRejected): every other item would be refused too. `tokens` is the request's estimated
        size, for model.tpm."""
        litellm = lib()
        transient = transient_errors(litellm)
        limits = self.limits
        deadline = Deadline(self.settings.deadline())  # counts from the first attempt
        send = functools.partial(self._send, call, step, tokens)
        attempt = functools.partial(limits.send, self.limiter, tokens, send, deadline)

        def rate_limited(e: BaseException) -> bool:
            return isinstance(e, litellm.RateLimitError) and limits.cool_until <= deadline.at

        def retried(e: BaseException) -> bool:
            return isinstance(e, transient) and not isinstance(e, litellm.RateLimitError)

        return await with_retries(attempt, budget, retried, rate_limited, deadline)

    async def _send(self, call: Callable[[], Awaitable[Any]], step: StepResult | None, tokens: int) -> Any:
        """One attempt, on the wire: bounded by model.timeout from the first byte sent to the last
        received (a reply trickling in forever is a timeout), its 429 or reply told to the limits."""
        litellm = lib()
        started = time.perf_counter()
        sent = time.monotonic()
        self.stats.calls += 1
        if step is not None:
            step.attempts += 1
        try:
            response = await asyncio.wait_for(call(), self.settings.timeout)
        except TimeoutError:
            limit = f"model.timeout={self.settings.timeout:g} s"
            raise TimeoutError(f"no complete reply within {limit}") from None
        except Exception as e:
            refusal = _refusal(litellm, e)
            if refusal:
                raise ModelRejected(
                    f"the model {self.settings.name} rejected the request ({refusal}): "
                    f"{str(e)[:300]}. Check its name and {self.settings.api_key_env or 'the API key'}"
                ) from None
            if isinstance(e, litellm.RateLimitError):  # the headers, wherever this provider's path left them
                headers = getattr(e, "litellm_response_headers", None)
                self.limits.refused(sent, headers or getattr(getattr(e, "response", None), "headers", None))
            raise
        finally:
            if step is not None:
                step.latency += time.perf_counter() - started
        usage = getattr(response, "usage", None)
        used = (getattr(usage, "prompt_tokens", 0) or 0) + (getattr(usage, "completion_tokens", 0) or 0)
        headers = (getattr(response, "_hidden_params", None) or {}).get("additional_headers")
        self.limits.answered(headers, tokens, used)
        return response
