"""Answer similarity (Mastra's semantics): how much of the ground truth the answer conveys.

Steps: extract semantic units of the output and of the ground truth -> analyse each ground-truth unit
(exact / semantic / partial / missing), contradictions and extra information -> pure score -> reason.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import StepResult
from evalframe.results.scores import ScoreResult
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


class Penalties(BaseModel):
    """The weights of the score formula (the `penalties` config group)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    exact_match_bonus: float = 0.2
    semantic_threshold: float = 0.8
    missing: float = 0.15
    contradiction: float = 1.0
    extra_info: float = 0.05
    extra_info_cap: float = 0.2


class SemanticUnits(Reply):
    units: list[str]


MatchType = Literal["exact", "semantic", "partial", "missing"]


class Match(Reply):
    ground_truth_unit: str
    match_type: MatchType
    output_unit: str | None
    explanation: str


class Contradiction(Reply):
    output_unit: str
    ground_truth_unit: str
    explanation: str


class Analysis(Reply):
    """The analysis the score is computed from, with the units' texts (kept in each item's details)."""

    matches: list[Match]
    contradictions: list[Contradiction]
    extra_info: list[str]


@functools.cache
def analysis_reply(truth_units: int, output_units: int) -> type[Reply]:
    """The analyze step's reply schema for one request: exactly one match per ground-truth unit (keyed
    by its position), and units named by position, so an index can only name a unit that exists and
    the judge never echoes (or misquotes) a unit's text."""
    output_index: Any = position(output_units)  # types built at run time
    truth_index: Any = position(truth_units)
    match = create_model(
        "UnitMatch",
        __base__=Reply,
        match_type=(MatchType, ...),
        output_index=(output_index | None, ...),
        explanation=(str, ...),
    )
    contradiction = create_model(
        "UnitContradiction",
        __base__=Reply,
        output_index=(output_index, ...),
        ground_truth_index=(truth_index, ...),
        explanation=(str, ...),
    )
    return create_model(
        "Analysis",
        __base__=Reply,
        matches=(per_position("Matches", match, truth_units), ...),
        contradictions=(list[contradiction], ...),  # type: ignore[valid-type]  # built at run time
        extra_info=(list[output_index], ...),
    )


def analysis_from_reply(
    reply: Mapping[str, Any], truth_units: list[str], output_units: list[str]
) -> Analysis:
    """The judge's positions turned back into the units they name."""
    return Analysis(
        matches=[
            Match(
                ground_truth_unit=truth,
                match_type=m["match_type"],
                output_unit=None if m["output_index"] is None else output_units[m["output_index"]],
                explanation=m["explanation"],
            )
            for truth, m in zip(truth_units, in_order(reply["matches"]), strict=True)
        ],
        contradictions=[
            Contradiction(
                output_unit=output_units[c["output_index"]],
                ground_truth_unit=truth_units[c["ground_truth_index"]],
                explanation=c["explanation"],
            )
            for c in reply["contradictions"]
        ],
        extra_info=[output_units[i] for i in reply["extra_info"]],
    )


class Reason(Reply):
    reason: str


async def extract(prompts: PromptSet, settings: ModelSettings, text: str, ctx: Context) -> StepResult:
    """The semantic units of one text. Shared with ground-truth similarity: the request depends on the
    text alone, so both scorers (and every row with the same ground truth) share one call."""
    messages = prompts.render("extract", text=text)
    return await ctx.llm(settings).structured("extract", messages, SemanticUnits)


def score(analysis: Analysis, penalties: Penalties, scale: float = 1.0) -> float:
    """The reference formula. Pure: the same analysis re-scores under any weights without a model call.

    points per ground-truth unit: exact 1+bonus, semantic threshold, partial threshold/2, missing -penalty;
    base = points / (N * (1+bonus)); minus contradiction x count, minus capped extra-info penalty;
    clamped to [0, 1], times scale, rounded half-up to 2 places.
    """
    n = len(analysis.matches)
    if n == 0:
        return 0.0
    p = penalties
    points = {
        "exact": 1 + p.exact_match_bonus,
        "semantic": p.semantic_threshold,
        "partial": p.semantic_threshold / 2,
        "missing": -p.missing,
    }
    base = sum(points[m.match_type] for m in analysis.matches) / (n * (1 + p.exact_match_bonus))
    raw = (
        base
        - p.contradiction * len(analysis.contradictions)
        - min(p.extra_info * len(analysis.extra_info), p.extra_info_cap)
    )
    return round_half_up(min(max(raw, 0.0), 1.0) * scale)


def _quote(units: list[str]) -> str:
    return "; ".join(f"“{u}”" for u in units)


def reason_from_analysis(analysis: Analysis, value: float) -> str:
    """A reason derived from the same analysis as the score, so the two can never disagree."""
    matches = analysis.matches
    counts = {kind: sum(m.match_type == kind for m in matches) for kind in ("exact", "semantic", "partial")}
    found = sum(counts.values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    parts = [
        f"Score {value}: {found} of {len(matches)} ground-truth units conveyed"
        + (f" ({kinds})." if kinds else ".")
    ]
    partial = [m.ground_truth_unit for m in matches if m.match_type == "partial"]
    missing = [m.ground_truth_unit for m in matches if m.match_type == "missing"]
    if partial:
        parts.append(f"Only partly: {_quote(partial)}.")
    if missing:
        parts.append(f"Missing: {_quote(missing)}.")
    if analysis.contradictions:
        parts.append(
            "Contradicts: "
            + "; ".join(f"“{c.output_unit}” vs “{c.ground_truth_unit}”" for c in analysis.contradictions)
            + "."
        )
    if analysis.extra_info:
        parts.append(f"Extra information: {_quote(analysis.extra_info)}.")
    return " ".join(parts)


class AnswerSimilarity(JudgeScorer):
    def __init__(
        self,
        model: Mapping[str, Any],
        penalties: Mapping[str, Any] | None = None,
        reason: str = "analysis",
        require_ground_truth: bool = True,
        scale: float = 1.0,
        prompt_dir: str | None = None,
        models: list[Any] | None = None,
        aggregate: str = "mean",
        tolerance: float = 0.2,
        repeats: int = 1,
    ):
        if reason not in ("analysis", "llm"):
            raise ConfigError(f"reason={reason!r} is not an option; use reason=analysis or reason=llm")
        self.panel = Panel.of(model, models, aggregate, tolerance, repeats, "scorers.answer_similarity")
        try:
            self.penalties = Penalties(**dict(penalties or {}))
        except ValueError as e:
            raise ConfigError(f"penalties: {e}") from None
        self.reason = reason
        self.require_ground_truth = require_ground_truth
        self.scale = scale
        self.prompts = PromptSet(prompt_dir, "answer_similarity")

    def validate(self, sample: Row) -> None:
        # Render every step once with realistic values: a missing file or an undefined variable
        # fails here, before the first model call.
        self.prompts.render("extract", text=sample.output or "text")
        units = ["unit"]
        self.prompts.render("analyze", input=sample.input, ground_truth_units=units, output_units=units)
        if self.reason == "llm":
            analysis = Analysis(matches=[], contradictions=[], extra_info=[]).model_dump()
            self.prompts.render("reason", input=sample.input, analysis=analysis, score=0.5, scale=self.scale)

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        truth = row.ground_truth
        if (missing := no_truth(truth)) is not None:
            return missing
        assert truth is not None  # no_truth() answered otherwise
        llm = ctx.llm(settings)
        output_step, truth_step = await asyncio.gather(
            extract(self.prompts, settings, output, ctx), extract(self.prompts, settings, truth, ctx)
        )
        steps = [output_step, truth_step]
        failed = next((s for s in steps if not s.ok), None)
        if failed:
            return ScoreResult.unscored(f"{failed.step}: {failed.error}", steps)
        output_units = output_step.reply["units"] if output_step.reply else []
        truth_units = truth_step.reply["units"] if truth_step.reply else []
        if not truth_units:
            return ScoreResult(0.0, "The ground truth has no semantic units: score 0.", steps)
        if not output_units:
            # Nothing to compare: every ground-truth unit is missing; no need to ask the judge.
            analysis = Analysis(
                matches=[
                    Match(
                        ground_truth_unit=u,
                        match_type="missing",
                        output_unit=None,
                        explanation="the output has no units",
                    )
                    for u in truth_units
                ],
                contradictions=[],
                extra_info=[],
            )
        else:
            messages = self.prompts.render(
                "analyze", input=row.input, ground_truth_units=truth_units, output_units=output_units
            )
            reply_model = analysis_reply(len(truth_units), len(output_units))
            analyze = await llm.structured("analyze", messages, reply_model)
            steps.append(analyze)
            if not analyze.ok or analyze.reply is None:
                return ScoreResult.unscored(f"analyze: {analyze.error}", steps)
            analysis = analysis_from_reply(analyze.reply, truth_units, output_units)
        value = score(analysis, self.penalties, self.scale)
        reason = reason_from_analysis(analysis, value)
        if self.reason == "llm":
            messages = self.prompts.render(
                "reason", input=row.input, analysis=analysis.model_dump(), score=value, scale=self.scale
            )
            written = await llm.structured("reason", messages, Reason)
            steps.append(written)
            if written.ok and written.reply:
                reason = written.reply["reason"]
            # A failed prose reason keeps the analysis reason: the score itself is sound.
        details = {
            "output_units": output_units,
            "ground_truth_units": truth_units,
            "analysis": analysis.model_dump(),
        }
        return ScoreResult(value, reason, steps, details)
