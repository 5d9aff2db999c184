"""Semantic similarity: cosine of the embeddings of output and ground truth (seed 003).

All texts of the run are embedded in a few batched calls per model, not one call per row; each
model's score is kept in the item's details and the models are aggregated (mean by default).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from evalframe.cache import Replay
from evalframe.context import Context
from evalframe.data import Row
from evalframe.errors import ConfigError
from evalframe.llm import embed, missing_keys
from evalframe.results import ScoreResult
from evalframe.scorers import Scorer, no_truth

Cosine = Callable[[str, str, str], float]  # (model, text, text) -> cosine similarity

AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": statistics.fmean,
    "median": statistics.median,
    "min": min,
    "max": max,
}


class SemanticSimilarity(Scorer):
    def __init__(
        self,
        models: Sequence[str] = ("local/all-MiniLM-L6-v2",),
        aggregate: str = "mean",
        threshold: float | None = None,
        require_ground_truth: bool = True,
        batch_size: int = 256,
        api_base: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 120.0,
    ):
        if not models:
            raise ConfigError(
                "scorers.semantic_similarity.models is empty; name at least one embedding model"
            )
        if aggregate not in AGGREGATES:
            raise ConfigError(f"aggregate={aggregate!r} is not an option; use one of {', '.join(AGGREGATES)}")
        if threshold is not None and not 0 <= threshold <= 1:
            raise ConfigError(f"threshold={threshold} must be between 0 and 1 (or null for raw cosine)")
        self.models_ = list(models)
        self.aggregate = aggregate
        self.threshold = threshold
        self.require_ground_truth = require_ground_truth
        self.batch_size = batch_size
        self.api_base = api_base
        self.api_key_env = api_key_env
        # A self-hosted server usually needs no key, but the OpenAI client refuses to start without one.
        self.api_key = (os.environ.get(api_key_env) if api_key_env else None) or (
            "no-key" if api_base else None
        )
        self.timeout = timeout

    def validate(self, sample: Row) -> None:
        """Find a missing embedding key before any call (LiteLLM knows each provider's variables)."""
        if self.api_base or (self.api_key_env and os.environ.get(self.api_key_env)):
            return
        for model in self.models_:
            missing = missing_keys(model)
            if missing:
                raise ConfigError(
                    f"{', '.join(missing)} not set, and the embedding model {model} needs it: set it, or use "
                    "scorers.semantic_similarity.models=[local/all-MiniLM-L6-v2] (offline, no key)"
                )

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        pairs = [(output, row.ground_truth) for row, output in items]
        if isinstance(ctx.cache, Replay):  # a re-score: the logged run's cosines, no embedding call
            replay = ctx.cache
            cosine: Cosine = lambda model, a, b: replay.cosine(model, a, b)  # noqa: E731
            errors: dict[str, str] = {}
        else:
            cosine, errors = await self._embed(pairs, ctx)
        return [self._one(output, truth, cosine, errors) for output, truth in pairs]

    async def _embed(
        self, pairs: list[tuple[str, str | None]], ctx: Context
    ) -> tuple[Cosine, dict[str, str]]:
        """Embed every text of the run once per model: the cosine of two texts, each failed model's error."""
        texts = sorted({t for pair in pairs for t in pair if t and t.strip()})
        index = {t: i for i, t in enumerate(texts)}
        per_model: dict[str, np.ndarray] = {}
        errors: dict[str, str] = {}
        for model in self.models_:
            try:
                per_model[model], _ = await embed(
                    model,
                    texts,
                    ctx.limiter,
                    batch_size=self.batch_size,
                    api_base=self.api_base,
                    api_key=self.api_key,
                    timeout=self.timeout,
                )
            except Exception as e:  # the run goes on; these items are unscored, with the reason
                errors[model] = f"{type(e).__name__}: {str(e)[:500]}"

        def cosine(model: str, a: str, b: str) -> float:
            # Rows are unit length, so the dot product is the cosine.
            return float(per_model[model][index[a]] @ per_model[model][index[b]])

        return cosine, errors

    def _one(self, output: str, truth: str | None, cosine: Cosine, errors: dict[str, str]) -> ScoreResult:
        if (missing := no_truth(truth)) is not None:
            return missing
        assert truth is not None  # no_truth() answered otherwise
        if not output.strip():
            return ScoreResult(0.0, "The output is empty: score 0.")
        if errors:
            return ScoreResult.unscored("; ".join(f"{m}: {e}" for m, e in errors.items()))
        per_model: dict[str, float] = {}
        cosines: dict[str, float] = {}
        for model in self.models_:
            # Negative similarity is 0. Kept unrounded: a re-score applies a threshold to it exactly.
            cosines[model] = float(np.clip(cosine(model, output, truth), 0.0, 1.0))
            per_model[model] = (
                cosines[model] if self.threshold is None else float(cosines[model] >= self.threshold)
            )
        value = round(AGGREGATES[self.aggregate](list(per_model.values())), 4)
        described = ", ".join(f"{m}: {c:.2f}" for m, c in cosines.items())
        if self.threshold is None:
            reason = f"Cosine similarity {value:.2f} ({described})."
        else:
            verdict = "pass" if value >= 0.5 else "fail"
            reason = f"{verdict}: cosine {described} against threshold {self.threshold}."
        return ScoreResult(value, reason, details={"cosine": cosines, "per_model": per_model})
