"""Ground-truth similarity: the share of the reference's statements the response states, with the
same meaning.

Steps: extract the statements of the reference (ground truth) and of the response (output) with
answer similarity's own extraction step -> for each reference statement, the response statement that
states it (or none) -> pure score -> reason from the comparisons.

The extraction requests are byte-identical to answer similarity's (same prompt files, same reply
model), so a run with both scorers asks for each extraction once (the LLM layer shares identical
requests, and the cache stores them under one key).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, create_model

from evalframe.data.rows import Row
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.results.scores import ScoreResult
from evalframe.scorers.answer_similarity import extract
from evalframe.scorers.base import (
    JudgeScorer,
    Reply,
    in_order,
    no_truth,
    per_position,
    position,
    round_half_up,
)
from evalframe.scorers.panel import Panel
from evalframe.scorers.prompts import PromptSet


class Comparison(BaseModel):
    """One reference statement's comparison, with its text (kept in each item's details)."""

    reference_statement: str
    response_index: int | None  # 0-based position of the response statement stating it; null: none
    explanation: str


@functools.cache
def comparisons_reply(reference_statements: int, response_statements: int) -> type[Reply]:
    """The compare step's reply schema for one request: exactly one entry per reference statement
    (keyed by its position), each naming a response statement that exists, or null."""
    entry = create_model(
        "StatementComparison",
        __base__=Reply,
        response_index=(position(response_statements) | None, ...),
        explanation=(str, ...),
    )
    keyed = per_position("ReferenceComparisons", entry, reference_statements)
    return create_model("Comparisons", __base__=Reply, comparisons=(keyed, ...))


def score(comparisons: list[Comparison], response_statements: int, scale: float = 1.0) -> float:
    """present / max(#reference, #response) x scale, rounded half-up to 2 places; 0 if a side is empty.

    Dividing by the larger side means extra response statements dilute the score as missing ones do.
    Several reference statements may be stated by one response statement: each counts.
    """
    if not comparisons or not response_statements:
        return 0.0
    present = sum(c.response_index is not None for c in comparisons)
    return round_half_up(present / max(len(comparisons), response_statements) * scale)


def reason_from_comparisons(comparisons: list[Comparison], response_statements: int, value: float) -> str:
    """A reason derived from the same comparisons as the score, so the two can never disagree."""
    present = sum(c.response_index is not None for c in comparisons)
    parts = [
        f"Score {value}: the response states {present} of {len(comparisons)} reference statements "
        f"with the same meaning; the response makes {response_statements} statement(s) in all."
    ]
    absent = [c.reference_statement for c in comparisons if c.response_index is None]
    if absent:
        parts.append("Not stated (or stated differently): " + "; ".join(f"“{s}”" for s in absent) + ".")
    return " ".join(parts)


class GroundTruthSimilarity(JudgeScorer):
    def __init__(
        self,
        model: Mapping[str, Any],
        require_ground_truth: bool = True,
        scale: float = 1.0,
        prompt_dir: str | None = None,
        extract_prompt_dir: str | None = None,
        models: list[Any] | None = None,
        aggregate: str = "mean",
        tolerance: float = 0.2,
        repeats: int = 1,
    ):
        self.panel = Panel.of(model, models, aggregate, tolerance, repeats, "scorers.ground_truth_similarity")
        self.require_ground_truth = require_ground_truth
        self.scale = scale
        self.prompts = PromptSet(prompt_dir, "ground_truth_similarity")
        # answer similarity's extraction prompts, so the two scorers send identical requests
        self.extract_prompts = PromptSet(extract_prompt_dir, "answer_similarity")

    def validate(self, sample: Row) -> None:
        # Render every step once: a missing file or an undefined variable fails before any model call.
        self.extract_prompts.render("extract", text=sample.output or "text")
        statements = ["statement"]
        self.prompts.render(
            "compare", input=sample.input, reference_statements=statements, response_statements=statements
        )

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        truth = row.ground_truth
        if (missing := no_truth(truth)) is not None:
            return missing
        assert truth is not None  # no_truth() answered otherwise
        response_step, reference_step = await asyncio.gather(
            extract(self.extract_prompts, settings, output, ctx),
            extract(self.extract_prompts, settings, truth, ctx),
        )
        steps = [response_step, reference_step]
        failed = next((s for s in steps if not s.ok), None)
        if failed:
            return ScoreResult.unscored(f"{failed.step}: {failed.error}", steps)
        response: list[str] = (response_step.reply or {})["units"]
        reference: list[str] = (reference_step.reply or {})["units"]
        details: dict[str, Any] = {"reference_statements": reference, "response_statements": response}
        if not reference or not response:
            side = "ground truth" if not reference else "output"
            return ScoreResult(0.0, f"The {side} has no statements: score 0.", steps, details)
        messages = self.prompts.render(
            "compare", input=row.input, reference_statements=reference, response_statements=response
        )
        reply_model = comparisons_reply(len(reference), len(response))
        compare = await ctx.llm(settings).structured("compare", messages, reply_model)
        steps.append(compare)
        if not compare.ok or compare.reply is None:
            return ScoreResult.unscored(f"compare: {compare.error}", steps)
        comparisons = [
            Comparison(reference_statement=statement, **entry)
            for statement, entry in zip(reference, in_order(compare.reply["comparisons"]), strict=True)
        ]
        value = score(comparisons, len(response), self.scale)
        details["comparisons"] = [c.model_dump() for c in comparisons]
        return ScoreResult(value, reason_from_comparisons(comparisons, len(response), value), steps, details)
