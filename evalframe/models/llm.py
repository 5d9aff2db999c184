"""Model calls: every judge, target and embedding call goes through here.

So retries, timeouts, structured-output validation, usage and cost work the same for OpenAI, Anthropic,
Gemini, Ollama, any OpenAI-compatible server and the local embedding model. litellm comes from
loader.lib(), imported on first use.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evalframe.models.cache import Cache, key as cache_key
from evalframe.models.calls import Message, Stats, StepResult, Usage
from evalframe.models.embed import Embedder
from evalframe.models.loader import lib
from evalframe.models.retry import Budget
from evalframe.models.settings import ModelSettings
from evalframe.models.transport import ModelRejected, Transport

Reply = TypeVar("Reply", bound=BaseModel)


def _malformed(response: Any) -> str | None:
    """What is wrong with a chat reply that has no message to read (`"choices": []`), if anything."""
    try:
        response.choices[0].message  # noqa: B018
    except (AttributeError, IndexError, KeyError, TypeError):
        return "malformed reply: no choices[0].message"
    return None


_FENCED_JSON = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _strip_fences(text: str) -> str:
    match = _FENCED_JSON.match(text.strip())
    return match.group(1) if match else text


def _as_text(raw: str) -> dict[str, Any]:
    return {"text": raw}


def _problem(error: ValidationError) -> str:
    """What is wrong with a reply, as the model is told it."""
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'reply'}: {err['msg']}" for err in error.errors())


def _correction(raw: str, problem: str) -> list[Message]:
    """The turns that give an invalid reply back to the model with what is wrong with it."""
    return [
        {"role": "assistant", "content": raw},
        {
            "role": "user",
            "content": f"That reply is invalid: {problem}. Reply again with only the "
            "corrected JSON object, matching the schema.",
        },
    ]


@functools.cache  # pydantic rebuilds the schema on every call: ~2 ms, paid once per reply type instead
def response_format(reply_model: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": reply_model.__name__,
            "schema": reply_model.model_json_schema(),
            "strict": True,
        },
    }


Validate = Callable[[str], dict[str, Any]]
SHARED = 20_000  # answered requests an LLM keeps to share with identical ones (see LLM._forget)


class LLM:
    """One model, sharing the run's concurrency limit, cache and stats with every other model."""

    def __init__(
        self,
        settings: ModelSettings,
        limiter: asyncio.Semaphore,
        cache: Cache,
        stats: Stats,
        concurrency: int | None = None,
    ):
        self.settings = settings
        self.cache = cache
        self.stats = stats
        self.transport = Transport(settings, limiter, stats, concurrency)
        self.limits = self.transport.limits
        self.embedder = Embedder(settings, cache, stats, self.transport)
        # Identical requests within a run (the same ground truth extracted for several rows or scorers)
        # share one call, even while it is still in flight.
        self._shared: dict[str, asyncio.Future[StepResult]] = {}
        # model.batch=true: completions go through the provider's batch API instead (evalframe.batch)
        self.batcher: Callable[..., Awaitable[Any]] | None = None

    async def _complete(
        self, messages: list[Message], step: StepResult, budget: Budget, **kwargs: Any
    ) -> Any:
        """One completion (its attempts, latency, usage and cost on `step`)."""
        if self.batcher is not None:  # it counts the requests it sends in the run's calls
            step.attempts += 1
            response = await self.batcher(messages, **kwargs)
            cost = response._hidden_params["response_cost"]  # at the batch price (Pricing.batched)
        else:
            litellm = lib()
            call = lambda: litellm.acompletion(messages=messages, **self.settings.call_kwargs(), **kwargs)  # noqa: E731
            response = await self.transport.request(call, budget, step, self._estimate(messages))
            cost = self.transport.pricing.of(response)
        self._account(step, response, cost)
        return response

    def _estimate(self, messages: list[Message]) -> int:
        """A request's tokens before it is sent (prompt plus max_tokens), when model.tpm needs it."""
        if not self.settings.tpm:
            return 0
        try:
            prompt = int(lib().token_counter(model=self.settings.name, messages=messages))
        except Exception:  # a model LiteLLM cannot count for: about four characters a token
            prompt = sum(len(m.get("content") or "") for m in messages) // 4
        return prompt + (self.settings.max_tokens or 0)

    def _account(self, step: StepResult, response: Any, cost: float) -> None:
        usage = getattr(response, "usage", None)
        step.usage += Usage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cost=cost,
        )
        self.stats.add_cost(cost, self.settings.name)

    def _key(self, messages: list[Message], fmt: dict[str, Any] | None) -> str:
        s = self.settings
        model = {
            "name": s.name,
            "api_base": s.api_base,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
            "extra": dict(s.extra),
        }  # timeout and retries cannot change a reply: not in the key
        return cache_key({"model": model, "messages": messages, "response_format": fmt})

    async def _once(
        self,
        step_name: str,
        messages: list[Message],
        fmt: dict[str, Any] | None,
        validate: Validate,
        ask: Callable[[], Awaitable[StepResult]],
    ) -> StepResult:
        """Serve a request from the run's shared calls or the disk cache, else ask the model (once)."""
        k = self._key(messages, fmt)
        if k in self._shared:
            first = await asyncio.shield(self._shared[k])
            self.stats.hits += 1
            return replace(first, step=step_name, usage=Usage(), latency=0.0, attempts=0, cached=True)
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
            future.set_result(step)
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

    async def structured(
        self,
        step_name: str,
        messages: list[Message],
        reply_model: type[Reply],
        context: dict[str, Any] | None = None,
    ) -> StepResult:
        """Ask for a reply matching `reply_model`'s JSON schema and validate it with pydantic.

        An invalid reply is retried with the validation error given back to the model; after
        `reply_retries` the step carries the error and the last raw reply, and the caller marks the
        item unscored (never a silent 0). Transport retries come out of one budget for the whole step.
        """
        fmt = response_format(reply_model)

        def validate(raw: str) -> dict[str, Any]:
            reply = reply_model.model_validate_json(_strip_fences(raw), context=context)
            return reply.model_dump(by_alias=True)  # keys as the schema names them (e.g. positions "0", "1")

        ask = functools.partial(self._ask, step_name, messages, validate, fmt)
        return await self._once(step_name, messages, fmt, validate, ask)

    async def text(self, step_name: str, messages: list[Message]) -> StepResult:
        """Free-text completion (the system under test): any text is a valid reply."""
        ask = functools.partial(self._ask, step_name, messages, _as_text, None)
        return await self._once(step_name, messages, None, _as_text, ask)

    async def _ask(
        self, step_name: str, messages: list[Message], validate: Validate, fmt: dict[str, Any] | None
    ) -> StepResult:
        """Ask the model until its reply passes `validate` (`fmt`: the JSON schema it is asked for, None
        for free text), up to `reply_retries` times more: a malformed reply is asked again as it was,
        an invalid one with what is wrong with it. Transport retries come out of one budget for the
        whole step; a failed call is the step's error (a judge's item is unscored, a target's gets no
        output)."""
        step = StepResult(step=step_name, messages=messages)
        conversation = list(messages)
        budget = Budget(self.settings.max_retries)
        kwargs = {} if fmt is None else {"response_format": fmt}
        for attempt in range(self.settings.reply_retries + 1):
            try:
                response = await self._complete(conversation, step, budget, **kwargs)
            except ModelRejected:
                raise
            except Exception as e:  # one failed call must not end the run: the item is unscored
                step.error = f"{type(e).__name__}: {str(e)[:500]}"
                return step
            malformed = _malformed(response)
            if malformed:  # nothing to correct: ask the same again, as a reply retry
                step.raw, step.error = None, f"{malformed} after {attempt + 1} attempt(s)"
                continue
            step.raw = response.choices[0].message.content or ""
            try:
                step.reply, step.error = validate(step.raw), None
                return step
            except ValidationError as e:  # never for free text: any text is valid
                problem = _problem(e)
                step.error = f"invalid reply after {attempt + 1} attempt(s): {problem}"
                conversation = [*conversation, *_correction(step.raw, problem)]
        return step

    async def cosines(self, pairs: list[tuple[str, str]], batch_size: int = 256) -> list[StepResult]:
        """The cosine similarity of each pair of texts under this embedding model, one step per pair
        (embed.Embedder.cosines)."""
        return await self.embedder.cosines(pairs, batch_size)
