"""Scorers: one module each. A scorer turns (row, output) pairs into ScoreResults and returns them;
the pipeline records each item once every scorer has returned its result.

LLM scorers keep their score function pure (step results + weights -> score), so a result can be
re-scored with other weights without calling the model again.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo

from evalframe.context import Context
from evalframe.data import Row
from evalframe.llm import ModelSettings
from evalframe.results import ScoreResult


class Scorer(ABC):
    name: str = ""
    require_ground_truth: bool = True
    # How many items it is best given at once (an embedding batch); the run starts rows in chunks
    # of the largest of its scorers' and target's (one by one for judges, which score items apart).
    chunk: int = 1

    def models(self) -> list[ModelSettings]:
        """Chat models this scorer calls (their credentials are checked before the run)."""
        return []

    def validate(self, sample: Row) -> None:  # noqa: B027 - optional hook
        """Check prompts and settings before any model call; raise EvalframeError to stop the run."""

    @abstractmethod
    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        """Score every (row, output) pair; one ScoreResult per pair, in order."""

    def score_each(self, items: list[tuple[Row, str]], ctx: Context) -> list[Awaitable[ScoreResult]]:
        """One awaitable per pair, in order, done when that pair's score is: the pipeline records an
        item as soon as every scorer's awaitable for it is done. By default the batch is scored once
        (score) and every pair waits for it."""
        batch = asyncio.ensure_future(self.score(items, ctx))

        async def pick(i: int) -> ScoreResult:
            return (await asyncio.shield(batch))[i]

        return [pick(i) for i in range(len(items))]


class ItemScorer(Scorer):
    """A scorer that judges each item on its own (the LLM judges): all items start at once, and the
    shared limiter keeps `concurrency` requests in flight across items and steps, instead of waiting
    for one item's steps before starting the next; each item is done as soon as its own steps are."""

    def score_each(self, items: list[tuple[Row, str]], ctx: Context) -> list[Awaitable[ScoreResult]]:
        return [self.score_item(row, output, ctx) for row, output in items]

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        return list(await asyncio.gather(*self.score_each(items, ctx)))

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
