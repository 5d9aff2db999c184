"""The guideline writer of `evalframe align align.method=guidelines`: the judge's own model reads the
training part's disagreements with people (the item, the judge's verdict and reason, people's verdict
and comment) and writes short rules (prompts/align/guidelines.j2). A scorer of one row, so that its call
goes through the run's lifecycle as every judge call does: cached, counted and costed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from evalframe.data.rows import Row
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.paths import PROMPTS_DIR
from evalframe.results.alignment import Example
from evalframe.results.scores import ScoreResult
from evalframe.scorers.aligned import verdict_words
from evalframe.scorers.base import JudgeScorer, Reply
from evalframe.scorers.panel import Panel
from evalframe.scorers.prompts import PromptFile

PROMPT = PROMPTS_DIR / "align" / "guidelines.j2"
MOST_SHOWN = 30  # disagreements in the writer's prompt: the largest first


class Guidelines(Reply):
    reason: str
    rules: list[str] = Field(max_length=20)


def distinct(rules: Sequence[str]) -> list[str]:
    """The rules in order, each once: the same words in any case, spacing or final punctuation are one."""
    seen, kept = set(), []
    for rule in rules:
        key = re.sub(r"\W+", " ", rule).strip().lower()
        if key and key not in seen:
            seen.add(key)
            kept.append(rule.strip())
    return kept


class GuidelineWriter(JudgeScorer):
    require_ground_truth = False

    def __init__(
        self, model: Mapping[str, Any], examples: Sequence[Example], output: Mapping[str, Any], most: int
    ):
        self.panel = Panel.of(model, key="model")
        self.prompt = PromptFile(PROMPT, "")
        self.most = most
        wrong = sorted((e for e in examples if e.disagrees), key=lambda e: -abs(e.judge - e.normalized))
        self.disagreements = [
            {
                "input": e.input,
                "ground_truth": e.ground_truth,
                "output": e.output,
                "judge": e.judge_reason,
                "people": verdict_words(output, e.normalized, e.human),
                "comment": e.comment,
            }
            for e in wrong[:MOST_SHOWN]
        ]

    def validate(self, sample: Row) -> None:
        self.prompt.render(disagreements=self.disagreements, most=self.most)

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        messages = self.prompt.render(disagreements=self.disagreements, most=self.most)
        step = await ctx.llm(settings).structured("guidelines", messages, Guidelines)
        if not step.ok or step.reply is None:
            return ScoreResult.unscored(f"guidelines: {step.error}", [step])
        rules = distinct(step.reply["rules"])[: self.most]
        return ScoreResult(1.0, f"{len(rules)} rules: {step.reply['reason']}", [step], {"rules": rules})
