"""Semantic similarity: cosine of the embeddings of output and ground truth (seed 003).

The model door (LLM.cosines: embed.py) embeds all texts of a window in a few batched calls per model, not
one call per row, and answers each (output, ground truth) pair as a step: cached, costed, and replayed
by a re-score like any judge reply. Each model's score is kept in the item's details and the models
are aggregated (mean by default).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models import local_embeddings
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings, missing_keys
from evalframe.models.steps import StepResult
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import Scorer, no_truth
from evalframe.scorers.panel import Aggregate


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
        tolerance: float = 0.2,
        input_cost_per_token: float | None = None,
    ):
        if not models:
            raise ConfigError(
                "scorers.semantic_similarity.models is empty; name at least one embedding model"
            )
        if threshold is not None and not 0 <= threshold <= 1:
            raise ConfigError(f"threshold={threshold} must be between 0 and 1 (or null for raw cosine)")
        self.models_ = list(models)
        self.aggregate = Aggregate(aggregate, tolerance)  # as a panel of judges combines its judges
        self.threshold = threshold
        self.require_ground_truth = require_ground_truth
        self.batch_size = batch_size
        self.chunk = batch_size  # rows embedded together: a few calls per chunk, not one per row
        self.api_base = api_base
        self.api_key_env = api_key_env
        where = "scorers.semantic_similarity"
        self.embedders = [
            ModelSettings.from_config(
                {"name": m, "api_key_env": api_key_env, "api_base": api_base, "timeout": timeout}
                | {"input_cost_per_token": input_cost_per_token},
                where,
            )
            for m in models
        ]

    def validate(self, sample: Row) -> None:
        """Find a missing embedding key (LiteLLM knows each provider's variables), or a local model
        that cannot run here, before any call."""
        for model in self.models_:
            if model.startswith(f"{local_embeddings.PROVIDER}/"):
                local_embeddings.check(model.removeprefix(f"{local_embeddings.PROVIDER}/"))
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
        wanted = list(dict.fromkeys((o, g) for o, g in pairs if g is not None and g.strip() and o.strip()))
        per_model = [await ctx.llm(settings).cosines(wanted, self.batch_size) for settings in self.embedders]
        found = {pair: [steps[i] for steps in per_model] for i, pair in enumerate(wanted)}
        return [self._one(output, truth, found.get((output, truth or ""), [])) for output, truth in pairs]

    def _one(self, output: str, truth: str | None, steps: list[StepResult]) -> ScoreResult:
        if (missing := no_truth(truth)) is not None:
            return missing
        if not output.strip():
            return ScoreResult(0.0, "The output is empty: score 0.")
        failed = [f"{m}: {s.error}" for m, s in zip(self.models_, steps, strict=True) if not s.ok]
        if failed:
            return ScoreResult.unscored("; ".join(failed), steps)
        per_model: dict[str, float] = {}
        cosines: dict[str, float] = {}
        for model, step in zip(self.models_, steps, strict=True):
            assert step.reply is not None  # ok above
            # Negative similarity is 0. Kept unrounded: a re-score applies a threshold to it exactly.
            cosines[model] = float(np.clip(step.reply["cosine"], 0.0, 1.0))
            per_model[model] = (
                cosines[model] if self.threshold is None else float(cosines[model] >= self.threshold)
            )
        combined, problem = self.aggregate(per_model)
        details = {"cosine": cosines, "per_model": per_model}
        if problem:
            return ScoreResult(math.nan, f"unscored: {problem}", steps, details, problem)
        value = round(combined, 4)
        each = ", ".join(f"{m}: {c:.2f}" for m, c in cosines.items())
        if self.threshold is None:
            # Each number once: one model's cosine is the score ("0.87 (local/...)"); several models'
            # are what the score combines.
            of = f"{self.aggregate.how} of {each}" if len(cosines) > 1 else next(iter(cosines))
            reason = f"Cosine similarity {value:.2f} ({of})."
        else:
            verdict = "pass" if value >= 0.5 else "fail"
            reason = f"{verdict}: cosine {each} against threshold {self.threshold}."
        return ScoreResult(value, reason, steps, details)
