"""Chat with a model: a reply matching a JSON schema (validated with pydantic, an invalid one given back
to the model with what is wrong with it) or free text, both through one attempt loop.

The LLM is the door to one model for every judge, target and embedding call, so retries, timeouts,
structured-output validation, usage and cost work the same for OpenAI, Anthropic, Gemini, Ollama, any
OpenAI-compatible server and the local embedding model. What it leaves to the other modules: the
requests on the wire (transport.py), the replies shared and cached (replies.py), embeddings (embed.py).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evalframe.data.values import invalid_text, printable
from evalframe.models import direct
from evalframe.models.cache import Cache
from evalframe.models.embed import Embedder
from evalframe.models.loader import lib
from evalframe.models.replies import Replies, Validate
from evalframe.models.retry import Budget
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message, Stats, StepResult, Usage
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
        self.replies = Replies(settings, cache, stats)
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
            call = self._call(messages, kwargs)
            response = await self.transport.request(call, budget, step, self._estimate(messages))
            cost = self.transport.pricing.of(response)
        self._account(step, response, cost)
        return response

    def _call(self, messages: list[Message], kwargs: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
        """The request, on the wire when called: an OpenAI-compatible server's on LiteLLM's lower-level
        path (direct.py), any other through litellm.acompletion."""
        if self._direct is not None:
            return functools.partial(self._direct.complete, messages, **kwargs)
        litellm = lib()
        return lambda: litellm.acompletion(messages=messages, **self.settings.call_kwargs(), **kwargs)

    @functools.cached_property
    def _direct(self) -> direct.Direct | None:  # on the first call made: a cached run never imports litellm
        return direct.Direct(self.settings) if direct.usable(self.settings) else None

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
        self.stats.add_cost(cost, self.settings.name, self.settings.api_base)

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
        return await self.replies.once(step_name, messages, fmt, validate, ask)

    async def text(self, step_name: str, messages: list[Message]) -> StepResult:
        """Free-text completion (the system under test): any text is a valid reply."""
        ask = functools.partial(self._ask, step_name, messages, _as_text, None)
        return await self.replies.once(step_name, messages, None, _as_text, ask)

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
                step.error = printable(f"{type(e).__name__}: {str(e)[:500]}")
                return step
            malformed = _malformed(response)
            if malformed:  # nothing to correct: ask the same again, as a reply retry
                step.raw, step.error = None, f"{malformed} after {attempt + 1} attempt(s)"
                continue
            step.raw = response.choices[0].message.content or ""
            if unwritable := invalid_text(step.raw, "the reply"):  # a cut emoji: results.jsonl cannot hold it
                step.raw, step.error = printable(step.raw), f"{unwritable} after {attempt + 1} attempt(s)"
                continue  # asked again as it was: nothing to correct in its meaning
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
