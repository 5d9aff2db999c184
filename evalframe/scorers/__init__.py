"""Scorers: one module each. A scorer turns (row, output) pairs into ScoreResults.

LLM scorers keep their score function pure (step results + weights -> score), so a result can be
re-scored with other weights without calling the model again.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo

from evalframe.cache import Cache
from evalframe.data import Row
from evalframe.llm import LLM, ModelSettings, Stats
from evalframe.results import ScoreResult


@dataclass
class Context:
    """What scorers and targets share while running: the limit on requests in flight, the cache, the
    running totals, and two callbacks: `scored` as each item's score is ready (the run journals an
    item as soon as every scorer has scored it) and `advance` for the progress bar."""

    limiter: asyncio.Semaphore
    cache: Cache = field(default_factory=lambda: Cache("off"))
    stats: Stats = field(default_factory=Stats)
    scored: Callable[[str, Row, ScoreResult], None] = lambda scorer, row, result: None
    advance: Callable[[], None] = lambda: None
    _llms: dict[ModelSettings, LLM] = field(default_factory=dict)

    def llm(self, settings: ModelSettings) -> LLM:
        if settings not in self._llms:
            self._llms[settings] = LLM(settings, self.limiter, self.cache, self.stats)
        return self._llms[settings]


class Scorer(ABC):
    name: str = ""
    require_ground_truth: bool = True

    def models(self) -> list[ModelSettings]:
        """Chat models this scorer calls (their credentials are checked before the run)."""
        return []

    def validate(self, sample: Row) -> None:  # noqa: B027 - optional hook
        """Check prompts and settings before any model call; raise EvalframeError to stop the run."""

    @abstractmethod
    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        """Score every (row, output) pair; one ScoreResult per pair, in order."""


class ItemScorer(Scorer):
    """A scorer that judges each item on its own (the LLM judges): all items start at once, and the
    shared limiter keeps `concurrency` requests in flight across items and steps, instead of waiting
    for one item's steps before starting the next."""

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        async def one(row: Row, output: str) -> ScoreResult:
            result = await self.score_item(row, output, ctx)
            ctx.scored(self.name, row, result)
            return result

        return list(await asyncio.gather(*(one(row, output) for row, output in items)))

    @abstractmethod
    async def score_item(self, row: Row, output: str, ctx: Context) -> ScoreResult:
        """Score one item."""


class Reply(BaseModel):
    """Base of every structured judge reply. extra="forbid" writes additionalProperties: false into
    the JSON schema, which OpenAI's strict structured output requires."""

    model_config = ConfigDict(extra="forbid")


def check_count(entries: list[Any], info: ValidationInfo, key: str, what: str, entry: str, per: str) -> None:
    """Reject a reply with one entry too many or too few (the count comes in the validation context,
    under `key`); the message is given back to the model so it can correct itself."""
    expected = (info.context or {}).get(key)
    if expected is not None and len(entries) != expected:
        raise ValueError(
            f"'{what}' has {len(entries)} entries but there are {expected} {per}s; "
            f"give exactly one {entry} per {per}, in order"
        )


def no_truth(truth: str | None) -> ScoreResult | None:
    """The score of an item without usable ground truth (0, with the reason), or None if it has one.

    A missing ground truth only gets here with require_ground_truth=false: the run checks the rest.
    """
    if truth is None:
        return ScoreResult(0.0, "No ground truth to compare with: score 0.")
    if not truth.strip():
        return ScoreResult(0.0, "The ground truth is empty: score 0.")
    return None


def round_half_up(value: float, places: int = 2) -> float:
    """0.625 -> 0.63 as the reference system rounds (Python's round() gives 0.62).

    Rounding to 10 places first washes out float noise such as 0.6249999999999999.
    """
    exact = Decimal(repr(round(value, 10)))
    return float(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))
