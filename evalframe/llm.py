"""Model calls: the only module that imports litellm.

Every judge, target and embedding call goes through here, so retries, timeouts, structured-output
validation, usage and cost work the same for OpenAI, Anthropic, Gemini, Ollama, any OpenAI-compatible
server and the local embedding model. litellm is imported on first use: it takes seconds to import,
and `python -m evalframe --help` must not pay for it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from evalframe.cache import Cache
from evalframe.cache import key as cache_key
from evalframe.errors import ConfigError
from evalframe.results import Message, Stats, StepResult, Usage

Reply = TypeVar("Reply", bound=BaseModel)

# litellm fetches data files from GitHub unless told to use its bundled copies: offline that hangs
# or warns (the price map at import, Anthropic's beta headers per call), and a run must not depend on it.
for _flag in ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"):
    os.environ.setdefault(_flag, "True")

_litellm: Any = None


def lib() -> Any:
    """Import and configure litellm once."""
    global _litellm
    if _litellm is None:
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True  # providers without response_format still get the prompt's JSON spec
        from evalframe.local_embeddings import register

        register(litellm)
        _litellm = litellm
    return _litellm


@dataclass(frozen=True)
class ModelSettings:
    """A model as the `model` config group describes it."""

    name: str
    api_key_env: str | None = None
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout: float = 60.0
    max_retries: int = 3
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:  # `extra` is a dict; settings key the per-model client cache
        return hash(json.dumps(asdict(self), sort_keys=True, default=str))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> ModelSettings:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s) {unknown}; known: {sorted(known)}")
        if not cfg.get("name"):
            raise ConfigError(
                "model.name is empty; set it to a LiteLLM model string, e.g. openai/gpt-4o-mini"
            )
        return cls(**{k: v for k, v in cfg.items() if v is not None or k in ("api_key_env", "api_base")})

    def api_key(self) -> str | None:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if not key and self.api_base:
            # A self-hosted OpenAI-compatible server usually needs no key, but the OpenAI client
            # refuses to start without one.
            return "no-key"
        return key or None

    def check_credentials(self, key: str = "model") -> None:
        """Fail before any work if the key is missing, naming the variable and the alternatives.

        `key` is where this model sits in the config: `model` (the judge) or `target.model`.
        """
        if self.api_key_env and not os.environ.get(self.api_key_env) and not self.api_base:
            pick = "model=" if key == "model" else f"model@{key}="
            raise ConfigError(
                f"{self.api_key_env} is not set, and the model {self.name} ({key}) needs it. "
                f"Set it (export {self.api_key_env}=...), or choose another model: {pick}claude "
                f"(ANTHROPIC_API_KEY), {pick}gemini (GEMINI_API_KEY), {pick}ollama (local, no key), "
                f"or an OpenAI-compatible server: {key}.api_base=http://HOST:PORT/v1"
            )

    def call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "temperature": self.temperature,
            "timeout": self.timeout,
            "max_retries": 0,  # retries are ours (backoff, Retry-After), not the provider SDK's
            **dict(self.extra),
        }
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = self.api_key()
        if key:
            kwargs["api_key"] = key
        return kwargs


def missing_keys(model: str) -> list[str]:
    """Environment variables a provider needs for `model` that are not set (none for local/...)."""
    from evalframe.local_embeddings import PROVIDER

    if model.startswith(f"{PROVIDER}/"):
        return []
    return list(lib().validate_environment(model=model).get("missing_keys") or [])


class ModelRejected(ConfigError):
    """The provider refused the request itself (bad key, unknown model): no point trying other items."""


def _transient_errors(litellm: Any) -> tuple[type[BaseException], ...]:
    return (
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
        litellm.Timeout,
    )


def _retry_after(error: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After header), if it said."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or getattr(error, "litellm_response_headers", None) or {}
    value = headers.get("retry-after") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def backoff(attempt: int, error: BaseException | None = None, base: float = 0.5, cap: float = 30.0) -> float:
    """Delay before retry number `attempt` (1-based): Retry-After if given, else full-jitter exponential."""
    asked = _retry_after(error) if error is not None else None
    if asked is not None:
        return min(asked, cap) + random.uniform(0, 0.1)
    return random.uniform(0, min(cap, base * 2**attempt))


_FENCED_JSON = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _strip_fences(text: str) -> str:
    match = _FENCED_JSON.match(text.strip())
    return match.group(1) if match else text


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


class LLM:
    """One model, sharing the run's concurrency limit, cache and stats with every other model."""

    def __init__(self, settings: ModelSettings, limiter: asyncio.Semaphore, cache: Cache, stats: Stats):
        self.settings = settings
        self.limiter = limiter
        self.cache = cache
        self.stats = stats
        # Identical requests within a run (the same ground truth extracted for several rows or scorers)
        # share one call, even while it is still in flight.
        self._shared: dict[str, asyncio.Future[StepResult]] = {}

    async def _complete(self, messages: list[Message], step: StepResult, **kwargs: Any) -> Any:
        """One completion, retried on rate limits, server errors and timeouts."""
        litellm = lib()
        transient = _transient_errors(litellm)
        for attempt in range(self.settings.max_retries + 1):
            started = time.perf_counter()
            try:
                async with self.limiter:
                    started = time.perf_counter()
                    self.stats.calls += 1
                    step.attempts += 1
                    response = await litellm.acompletion(
                        messages=messages, **self.settings.call_kwargs(), **kwargs
                    )
                step.latency += time.perf_counter() - started
                self._account(step, response)
                return response
            except transient as e:
                step.latency += time.perf_counter() - started
                if attempt == self.settings.max_retries:
                    raise
                await asyncio.sleep(backoff(attempt + 1, e))
            except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as e:
                raise ModelRejected(
                    f"the model {self.settings.name} rejected the request ({type(e).__name__}): "
                    f"{str(e)[:300]}. Check model.name and {self.settings.api_key_env or 'the API key'}"
                ) from None
        raise AssertionError("unreachable")

    def _account(self, step: StepResult, response: Any) -> None:
        usage = getattr(response, "usage", None)
        cost = float((getattr(response, "_hidden_params", None) or {}).get("response_cost") or 0.0)
        step.usage += Usage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cost=cost,
        )
        self.stats.cost += cost

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
                hit = await self.cache.claim(k, patience=self._patience())
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
            return step
        except BaseException as e:
            future.set_exception(e)
            raise

    def _from_cache(
        self, k: str, step_name: str, messages: list[Message], validate: Validate
    ) -> StepResult | None:
        hit = self.cache.get(k)
        return self._validated(hit, step_name, messages, validate) if hit else None

    def _patience(self) -> float:
        """How long another process may hold a claim on a request before this one asks itself: the
        longest a live process can take to get its reply (every attempt timing out, plus backoff)."""
        return (self.settings.timeout + 30.0) * (self.settings.max_retries + 1)

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
        `max_retries` the step carries the error and the last raw reply, and the caller marks the
        item unscored (never a silent 0).
        """
        fmt = response_format(reply_model)

        def validate(raw: str) -> dict[str, Any]:
            return reply_model.model_validate_json(_strip_fences(raw), context=context).model_dump()

        async def ask() -> StepResult:
            step = StepResult(step=step_name, messages=messages)
            conversation = list(messages)
            for attempt in range(self.settings.max_retries + 1):
                try:
                    response = await self._complete(conversation, step, response_format=fmt)
                except ModelRejected:
                    raise
                except Exception as e:  # one failed call must not end the run: the item is unscored
                    step.error = f"{type(e).__name__}: {str(e)[:500]}"
                    return step
                step.raw = response.choices[0].message.content or ""
                try:
                    step.reply, step.error = validate(step.raw), None
                    return step
                except ValidationError as e:
                    problem = "; ".join(
                        f"{'.'.join(map(str, err['loc'])) or 'reply'}: {err['msg']}" for err in e.errors()
                    )
                    step.error = f"invalid reply after {attempt + 1} attempt(s): {problem}"
                    conversation = [
                        *conversation,
                        {"role": "assistant", "content": step.raw},
                        {
                            "role": "user",
                            "content": f"That reply is invalid: {problem}. Reply again with only the "
                            "corrected JSON object, matching the schema.",
                        },
                    ]
            return step

        return await self._once(step_name, messages, fmt, validate, ask)

    async def text(self, step_name: str, messages: list[Message]) -> StepResult:
        """Free-text completion (the system under test)."""

        async def ask() -> StepResult:
            step = StepResult(step=step_name, messages=messages)
            try:
                response = await self._complete(messages, step)
            except ModelRejected:
                raise
            except Exception as e:  # one failed call must not end the run: the item gets no output
                step.error = f"{type(e).__name__}: {str(e)[:500]}"
                return step
            step.raw = response.choices[0].message.content or ""
            step.reply = {"text": step.raw}
            return step

        return await self._once(step_name, messages, None, lambda raw: {"text": raw}, ask)


def _chunker(model: str) -> Callable[[str], list[str]]:
    """How to split a text into pieces that fit `model`'s input window (identity when unknown)."""
    from evalframe import local_embeddings

    if model.startswith(f"{local_embeddings.PROVIDER}/"):
        name = model.removeprefix(f"{local_embeddings.PROVIDER}/")
        return lambda text: local_embeddings.chunks(name, text)
    litellm = lib()
    try:
        window = int(litellm.get_model_info(model).get("max_input_tokens") or 0)
    except Exception:  # a model LiteLLM has no facts about: send texts whole, the provider decides
        window = 0
    if not window:
        return lambda text: [text]

    def split(text: str) -> list[str]:
        tokens = litellm.encode(model=model, text=text)
        if len(tokens) <= window:
            return [text]
        return [
            litellm.decode(model=model, tokens=tokens[i : i + window]) for i in range(0, len(tokens), window)
        ]

    return split


async def embed(
    model: str,
    texts: list[str],
    limiter: asyncio.Semaphore,
    *,
    batch_size: int = 256,
    api_base: str | None = None,
    api_key: str | None = None,
    timeout: float = 120.0,
    max_retries: int = 3,
) -> tuple[np.ndarray, Usage]:
    """Embed texts in batches (a few calls for a whole dataset), L2-normalised rows.

    A text longer than the model's window is split into window-sized chunks whose embeddings are
    averaged (weighted by length), instead of being silently truncated to its beginning.
    """
    litellm = lib()
    split = _chunker(model)
    pieces: list[str] = []
    owners: list[int] = []
    for i, text in enumerate(texts):
        chunks = split(text)
        pieces += chunks
        owners += [i] * len(chunks)
    transient = _transient_errors(litellm)
    kwargs: dict[str, Any] = {"model": model, "timeout": timeout, "max_retries": 0}
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key

    async def one_batch(batch: list[str]) -> Any:
        for attempt in range(max_retries + 1):
            try:
                async with limiter:
                    return await litellm.aembedding(input=batch, **kwargs)
            except transient as e:
                if attempt == max_retries:
                    raise
                await asyncio.sleep(backoff(attempt + 1, e))
            except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as e:
                raise ModelRejected(
                    f"the embedding model {model} rejected the request: {str(e)[:300]}"
                ) from None
        raise AssertionError("unreachable")

    batches = [pieces[i : i + batch_size] for i in range(0, len(pieces), batch_size)]
    responses = await asyncio.gather(*(one_batch(b) for b in batches))
    vectors = np.asarray([item["embedding"] for r in responses for item in r.data], dtype=np.float64)
    if len(pieces) > len(texts):  # some texts were chunked: length-weighted mean per text
        weights = np.asarray([len(p) for p in pieces], dtype=np.float64)
        matrix = np.zeros((len(texts), vectors.shape[1]))
        np.add.at(matrix, owners, vectors * weights[:, None])
    else:
        matrix = vectors
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms == 0, 1.0, norms)
    usage = Usage()
    for response in responses:
        u = getattr(response, "usage", None)
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        usage += Usage(prompt_tokens=getattr(u, "prompt_tokens", 0) or 0, cost=float(cost or 0.0))
    return matrix, usage
