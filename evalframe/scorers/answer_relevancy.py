"""Answer relevancy (Mastra's semantics): how much of the output addresses the input question.

Steps: split the output into statements -> a verdict per statement (yes / no / unsure: relevant to the
question, not correct) -> pure score -> reason from the verdicts. Needs no ground truth.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import create_model

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import JudgeScorer, Reply, in_order, per_position, round_half_up
from evalframe.scorers.panel import Panel
from evalframe.scorers.prompts import PromptSet

# An output that is an error message answers nothing; scoring its statements would reward noise.
_ERROR_OUTPUT = re.compile(r"^\s*error\s*:", re.IGNORECASE)


class Statements(Reply):
    statements: list[str]


class Verdict(Reply):
    verdict: Literal["yes", "no", "unsure"]
    reason: str


@functools.cache
def verdicts_reply(statements: int) -> type[Reply]:
    """The verdicts step's reply schema for one request: exactly one verdict per statement, keyed by
    the statement's position."""
    return create_model(
        "Verdicts", __base__=Reply, verdicts=(per_position("StatementVerdicts", Verdict, statements), ...)
    )


def score(verdicts: list[Verdict], uncertainty_weight: float = 0.5, scale: float = 1.0) -> float:
    """(yes + w x unsure) / statements x scale, rounded half-up to 2 places; 0 without statements.

    Pure: the same verdicts re-score under another weight without a model call.
    """
    if not verdicts:
        return 0.0
    yes = sum(v.verdict == "yes" for v in verdicts)
    unsure = sum(v.verdict == "unsure" for v in verdicts)
    return round_half_up((yes + uncertainty_weight * unsure) / len(verdicts) * scale)


def _quote(statements: list[str]) -> str:
    return "; ".join(f"“{s}”" for s in statements)


def reason_from_verdicts(statements: list[str], verdicts: list[Verdict], value: float) -> str:
    """A reason derived from the same verdicts as the score, so the two can never disagree."""
    relevant = sum(v.verdict == "yes" for v in verdicts)
    parts = [f"Score {value}: {relevant} of {len(verdicts)} statements address the question."]
    for kind, label in (("no", "Irrelevant"), ("unsure", "Unsure")):
        picked = [s for s, v in zip(statements, verdicts, strict=True) if v.verdict == kind]
        if picked:
            parts.append(f"{label}: {_quote(picked)}.")
    return " ".join(parts)


class AnswerRelevancy(JudgeScorer):
    def __init__(
        self,
        model: Mapping[str, Any],
        uncertainty_weight: float = 0.5,
        require_ground_truth: bool = False,
        scale: float = 1.0,
        prompt_dir: str | None = None,
        models: list[Any] | None = None,
        aggregate: str = "mean",
        tolerance: float = 0.2,
        repeats: int = 1,
    ):
        if not 0.0 <= uncertainty_weight <= 1.0:
            raise ConfigError(f"uncertainty_weight={uncertainty_weight} must be between 0 and 1")
        self.panel = Panel.of(model, models, aggregate, tolerance, repeats, "scorers.answer_relevancy")
        self.uncertainty_weight = uncertainty_weight
        self.require_ground_truth = require_ground_truth
        self.scale = scale
        self.prompts = PromptSet(prompt_dir, "answer_relevancy")

    def validate(self, sample: Row) -> None:
        # Render every step once: a missing file or an undefined variable fails before any model call.
        self.prompts.render("statements", output=sample.output or "text")
        self.prompts.render("verdicts", input=sample.input, statements=["statement"])

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        if _ERROR_OUTPUT.match(output):
            return ScoreResult(0.0, "The output is an error message, not an answer: score 0.")
        llm = ctx.llm(settings)
        split = await llm.structured(
            "statements", self.prompts.render("statements", output=output), Statements
        )
        steps = [split]
        if not split.ok or split.reply is None:
            return ScoreResult.unscored(f"statements: {split.error}", steps)
        statements: list[str] = split.reply["statements"]
        if not statements:
            return ScoreResult(0.0, "The output contains no statements: score 0.", steps)
        messages = self.prompts.render("verdicts", input=row.input, statements=statements)
        judged = await llm.structured("verdicts", messages, verdicts_reply(len(statements)))
        steps.append(judged)
        if not judged.ok or judged.reply is None:
            return ScoreResult.unscored(f"verdicts: {judged.error}", steps)
        verdicts = [Verdict.model_validate(v) for v in in_order(judged.reply["verdicts"])]
        value = score(verdicts, self.uncertainty_weight, self.scale)
        details = {
            "statements": statements,
            "verdicts": [v.model_dump() for v in verdicts],
        }
        return ScoreResult(value, reason_from_verdicts(statements, verdicts, value), steps, details)
