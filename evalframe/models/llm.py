"""Model calls: every judge, target and embedding call goes through here.

So retries, timeouts, structured-output validation, usage and cost work the same for OpenAI, Anthropic,
Gemini, Ollama, any OpenAI-compatible server and the local embedding model. litellm comes from
loader.lib(), imported on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from evalframe.models.cache import Cache, key as cache_key
from evalframe.models.calls import Message, Stats, StepResult, Usage
from evalframe.models.loader import lib
from evalframe.models.retry import Budget
from evalframe.models.settings import ModelSettings
from evalframe.models.transport import ModelRejected, Transport

if TYPE_CHECKING:  # numpy only for embeddings: a judge's run starts without it
    import numpy as np

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

    def _patience(self) -> float:
        """How long another process may hold a claim on a request before this one asks itself: the
        longest a live process can take to get its reply (every attempt timing out, plus backoff)."""
        return (self.settings.timeout + 30.0) * (self.settings.max_retries + self.settings.reply_retries + 1)

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

        async def ask() -> StepResult:
            step = StepResult(step=step_name, messages=messages)
            conversation = list(messages)
            budget = Budget(self.settings.max_retries)
            for attempt in range(self.settings.reply_retries + 1):
                try:
                    response = await self._complete(conversation, step, budget, response_format=fmt)
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
            budget = Budget(self.settings.max_retries)
            for attempt in range(self.settings.reply_retries + 1):
                try:
                    response = await self._complete(messages, step, budget)
                except ModelRejected:
                    raise
                except Exception as e:  # one failed call must not end the run: the item gets no output
                    step.error = f"{type(e).__name__}: {str(e)[:500]}"
                    return step
                malformed = _malformed(response)
                if malformed:  # asked again, as an invalid structured reply is
                    step.error = f"{malformed} after {attempt + 1} attempt(s)"
                    continue
                step.raw, step.error = response.choices[0].message.content or "", None
                step.reply = {"text": step.raw}
                return step
            return step

        return await self._once(step_name, messages, None, lambda raw: {"text": raw}, ask)

    def _embedding_key(self, kind: str, value: Any) -> str:
        # Only what changes a vector: the model and where it is served.
        return cache_key(
            {"embedding_model": self.settings.name, "api_base": self.settings.api_base, kind: value}
        )

    async def cosines(self, pairs: list[tuple[str, str]], batch_size: int = 256) -> list[StepResult]:
        """The cosine similarity of each pair of texts under this embedding model, one step per pair,
        keyed like a judge reply: served by the cache (or a re-score's stored steps) when it holds the
        pair, else computed from the texts' vectors, cached or embedded in batches. A failed embedding
        is each pair's error (the items are unscored), never a crash of the run."""
        keys = [self._embedding_key("cosine", list(pair)) for pair in pairs]
        steps = self._stored_cosines(keys, range(len(pairs)))
        missing = [i for i in range(len(pairs)) if i not in steps]
        if missing:
            self.cache.before_asking("embed", self.settings.name)  # a replay raises here instead
            # The jobs of a parallel sweep embed the same window at once: one process claims these
            # pairs (one claim for all, as they are embedded in shared batches), the others wait.
            claim = self._embedding_key("pairs", [keys[i] for i in missing])
            batches = -(-2 * len(missing) // batch_size)  # at most two new texts per pair
            if await self.cache.claim(claim, patience=self._patience() * batches):
                steps.update(self._stored_cosines(keys, missing))
            try:
                todo = [i for i in missing if i not in steps]
                if todo:
                    steps.update(await self._computed(pairs, keys, todo, batch_size))
                if all(steps[i].ok for i in missing):
                    self.cache.put(claim, {"raw": ""})  # tells the waiting processes to read the cache
            finally:
                self.cache.release(claim)  # failed: a waiting process embeds them itself
        return [steps[i] for i in range(len(pairs))]

    def _stored_cosines(self, keys: list[str], indexes: Iterable[int]) -> dict[int, StepResult]:
        steps: dict[int, StepResult] = {}
        for i in indexes:
            hit = self.cache.get(keys[i])
            try:
                value = None if not hit or hit.get("error") else {"cosine": float(hit["raw"])}
            except ValueError:  # a damaged cache row: embed it again
                continue
            if hit:
                self.stats.hits += 1
                steps[i] = StepResult(
                    "embed",
                    [],
                    reply=value,
                    raw=hit.get("raw"),
                    error=hit.get("error"),
                    cached=True,
                    key=keys[i],
                )
        return steps

    async def _computed(
        self, pairs: list[tuple[str, str]], keys: list[str], todo: list[int], batch_size: int
    ) -> dict[int, StepResult]:
        """The cosines of the pairs `todo`, cached, each step with its share of the embedding cost."""
        texts = list(dict.fromkeys(text for i in todo for text in pairs[i]))
        usage: dict[str, Usage] = {}  # each embedded text's share of what its batch cost
        try:
            vectors = await self._vectors(texts, batch_size, usage)
        except ModelRejected:
            raise
        except Exception as e:  # the run goes on: these items are unscored, with the reason
            error = f"{type(e).__name__}: {str(e)[:500]}"
            failed = {i: StepResult("embed", [], error=error, key=keys[i]) for i in todo}
            failed[todo[0]].usage = sum(usage.values(), Usage())  # the batches that answered are paid for
            return failed
        steps: dict[int, StepResult] = {}
        paid: set[str] = set()
        for i in todo:
            a, b = pairs[i]
            cosine = float(vectors[a] @ vectors[b])  # unit vectors: the dot product is the cosine
            share = sum((usage[t] for t in (a, b) if t in usage and t not in paid), Usage())
            paid.update((a, b))  # a text embedded for several pairs is paid for once
            self.cache.put(keys[i], {"raw": repr(cosine)})
            steps[i] = StepResult(
                "embed", [], reply={"cosine": cosine}, raw=repr(cosine), usage=share, key=keys[i]
            )
        return steps

    async def _vectors(
        self, texts: list[str], batch_size: int, usage: dict[str, Usage]
    ) -> dict[str, np.ndarray]:
        """Unit vectors of `texts`, from the cache where it has them; the others are embedded and
        cached, each with its share of what embedding it cost in `usage`."""
        import numpy as np

        vectors: dict[str, np.ndarray] = {}
        for text in texts:
            hit = self.cache.get(self._embedding_key("text", text))
            if hit:
                with contextlib.suppress(ValueError, TypeError):  # a damaged cache row: embed it again
                    vectors[text] = np.asarray(json.loads(hit["raw"]), dtype=np.float64)
        todo = [t for t in texts if t not in vectors]
        if not todo:
            return vectors
        matrix = await self._embed(todo, batch_size, usage)
        for text, vector in zip(todo, matrix, strict=True):
            vectors[text] = vector
            self.cache.put(self._embedding_key("text", text), {"raw": json.dumps(vector.tolist())})
        return vectors

    async def _embed(self, texts: list[str], batch_size: int, usage: dict[str, Usage]) -> np.ndarray:
        """Embed texts in batches (a few calls for a whole dataset), L2-normalised rows; each batch's
        tokens and cost are shared out in `usage` over the texts its pieces belong to, also when
        another batch fails (what was paid for is counted).

        A text longer than the model's window is split into window-sized chunks whose embeddings are
        averaged (weighted by length), instead of being silently truncated to its beginning.
        """
        import numpy as np

        litellm = lib()
        split = _chunker(self.settings.name)
        pieces: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            chunks = split(text)
            pieces += chunks
            owners += [i] * len(chunks)
        kwargs = {
            k: v for k, v in self.settings.call_kwargs().items() if k not in ("temperature", "max_tokens")
        }

        async def one_batch(batch: list[str]) -> Any:
            return await self.transport.request(
                lambda: litellm.aembedding(input=batch, **kwargs), self.settings.max_retries
            )

        starts = range(0, len(pieces), batch_size)
        responses = await asyncio.gather(
            *(one_batch(pieces[i : i + batch_size]) for i in starts), return_exceptions=True
        )
        for start, response in zip(starts, responses, strict=True):
            if isinstance(response, BaseException):
                continue
            u = getattr(response, "usage", None)
            cost = self.transport.pricing.of(response)
            self.stats.add_cost(cost, self.settings.name)
            batch = owners[start : start + batch_size]
            tokens, extra = divmod(getattr(u, "prompt_tokens", 0) or 0, len(batch))
            for n, owner in enumerate(batch):  # the remainder of the division goes to the first pieces
                share = Usage(prompt_tokens=tokens + (n < extra), cost=cost / len(batch))
                usage[texts[owner]] = usage.get(texts[owner], Usage()) + share
        failures = [r for r in responses if isinstance(r, BaseException)]
        if failures:  # a rejected model ends the run, before any other failure
            raise next((f for f in failures if isinstance(f, ModelRejected)), failures[0])
        answered = cast(list[Any], responses)  # no failure among them
        vectors = np.asarray([item["embedding"] for r in answered for item in r.data], dtype=np.float64)
        weights = np.asarray([len(p) for p in pieces], dtype=np.float64)
        matrix = np.zeros((len(texts), vectors.shape[1]))
        np.add.at(matrix, owners, vectors * weights[:, None])  # a chunked text: length-weighted mean
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1.0, norms)


def _chunker(model: str) -> Callable[[str], list[str]]:
    """How to split a text into pieces that fit `model`'s input window (identity when unknown)."""
    from evalframe.models import local_embeddings

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
