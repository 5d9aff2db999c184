"""Embeddings: the cosine similarity of pairs of texts under one embedding model, served by the cache
when it holds the pair, else computed from the texts' unit vectors (cached, or embedded in a few
batched calls; a text longer than the model's window in chunks)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from evalframe.models.cache import Cache, key as cache_key
from evalframe.models.loader import lib
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats, StepResult, Usage
from evalframe.models.transport import ModelRejected, Transport

if TYPE_CHECKING:  # numpy only for embeddings: a judge's run starts without it
    import numpy as np


class Embedder:
    """One embedding model's cosines, sharing the run's cache and stats, and the model's transport."""

    def __init__(self, settings: ModelSettings, cache: Cache, stats: Stats, transport: Transport):
        self.settings = settings
        self.cache = cache
        self.stats = stats
        self.transport = transport

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
            if await self.cache.claim(claim, patience=self.settings.patience() * batches):
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
            self.stats.add_cost(cost, self.settings.name, self.settings.api_base)
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
