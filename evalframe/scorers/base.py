"""Scorers: one module each. A scorer turns (row, output) pairs into ScoreResults and returns them;
the pipeline records each item once every scorer has returned its result.

LLM scorers keep their score function pure (step results + weights -> score), so a result can be
re-scored with other weights without calling the model again.
"""

from __future__ import annotations

import asyncio
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.results.scores import ScoreResult
from evalframe.scorers.panel import Panel
from evalframe.scorers.prompts import PromptFile, PromptSet

EMPTY_OUTPUT = "empty output"  # the reason of an empty output's 0


class Scorer(ABC):
    name: str = ""
    require_ground_truth: bool = True
    # How many items it is best given at once (an embedding batch); the run starts rows in chunks
    # of the largest of its scorers' and target's (one by one for judges, which score items apart).
    chunk: int = 1

    # Row fields every row must have (data.LISTS: contexts, tool_calls, ...), checked before any call
    needs: tuple[str, ...] = ()
    # The figures it reports per item beside its score (details["figures"]): run means logged as
    # <scorer>/<figure>, which a sweep's objective.metric may name
    figures: tuple[str, ...] = ()
    # Which scores are good: "lower" (hallucination) is marked in the summary and gated by max_score
    better: str = "higher"

    def models(self) -> list[ModelSettings]:
        """Chat models this scorer calls (their credentials are checked before the run)."""
        return []

    def identity(self) -> str:
        """What its verdicts depend on beyond its config: the text of its prompt files (a PromptSet or
        PromptFile attribute, or a mapping of them: a judge's steps), not where they are."""
        texts = []
        for name, value in sorted(vars(self).items()):
            found = value.items() if isinstance(value, Mapping) else [("", value)]
            texts += [f"{name}.{k}\n{p.text()}" for k, p in found if isinstance(p, PromptSet | PromptFile)]
        return "\n".join(texts)

    def required(self) -> tuple[str, ...]:
        """The row fields this scorer cannot score without."""
        return ("ground_truth", *self.needs) if self.require_ground_truth else self.needs

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

    # "zero": an empty or whitespace-only output scores 0 ("empty output") without a model call;
    # "judge": the judge sees it too (a custom judge of refusals may want to)
    empty_output: str = "zero"

    def score_each(self, items: list[tuple[Row, str]], ctx: Context) -> list[Awaitable[ScoreResult]]:
        return [self._score_unless_empty(row, output, ctx) for row, output in items]

    async def _score_unless_empty(self, row: Row, output: str, ctx: Context) -> ScoreResult:
        if self.empty_output == "zero" and not output.strip():
            return ScoreResult(0.0, EMPTY_OUTPUT)
        return await self.score_item(row, output, ctx)

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        return list(await asyncio.gather(*self.score_each(items, ctx)))

    @abstractmethod
    async def score_item(self, row: Row, output: str, ctx: Context) -> ScoreResult:
        """Score one item."""


class JudgeScorer(ItemScorer):
    """An LLM judge: its whole chain runs once per judge of its panel and per repeat (`models`,
    `repeats`), and the item's score aggregates them (evalframe.scorers.panel); one judge asked once is the
    plain case."""

    panel: Panel

    def models(self) -> list[ModelSettings]:
        return self.panel.models()

    async def score_item(self, row: Row, output: str, ctx: Context) -> ScoreResult:
        return await self.panel.score(lambda settings: self.chain(row, output, ctx, settings))

    @abstractmethod
    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        """Score one item with the judge `settings` describe."""


def bound_work(scorers: Mapping[str, Scorer], rows: int | None, cap: int | None) -> None:
    """Work is bounded before it starts: a run of more judgments (one judge's chain on one item, once
    per repeat: one model request or more) than `cap` (max_judgments) stops before any call, instead of
    running for days or filling memory with judgments. `rows` None: before the rows are counted."""
    panels = {name: s.panel for name, s in scorers.items() if isinstance(s, JudgeScorer)}
    per_row = sum(len(p.judges) * p.repeats for p in panels.values())
    if cap is None or (rows or 1) * per_row <= cap:
        return
    each = ", ".join(f"{n}: {len(p.judges)} judge(s) x {p.repeats:,} repeat(s)" for n, p in panels.items())
    count = f"{rows:,} rows x {per_row:,}" if rows else f"at least {per_row:,}"
    raise ConfigError(
        f"max_judgments={cap:,}: this run would ask for {count} judgments ({each} per row), each one "
        "model request or more; lower repeats, the panel (scorers.NAME.models) or dataset.limit, or "
        "raise max_judgments (null: no cap)"
    )


class Reply(BaseModel):
    """Base of every structured judge reply. extra="forbid" writes additionalProperties: false into
    the JSON schema, which OpenAI's strict structured output requires."""

    model_config = ConfigDict(extra="forbid")


def position(n: int) -> Any:
    """An int that can only name one of `n` positions (0 to n-1): an integer enum in the schema, which
    every provider's structured output keeps, and a Literal for pydantic. Written as an enum even for
    one position (pydantic would write `const`, which fewer providers accept)."""
    values = tuple(range(n))
    return Annotated[Literal.__getitem__(values), WithJsonSchema({"type": "integer", "enum": list(values)})]


@functools.cache
def per_position(name: str, entry: type[BaseModel], n: int) -> type[Reply]:
    """An object with exactly one `entry` per position, keyed "0" to "n-1", all required: the count is
    in the schema's required keys and additionalProperties: false, which OpenAI, Anthropic, Gemini and
    Ollama all enforce (minItems/maxItems are not kept on Anthropic's wire), and the judge never echoes
    the text it judges. Cached: one class per size, so its response format is built once."""
    fields: dict[str, Any] = {f"p{i}": (entry, Field(alias=str(i))) for i in range(n)}
    return create_model(name, __base__=Reply, **fields)


def enum_of(names: list[str]) -> Any:
    """Literal["a", "b", ...] built at run time, written as a JSON-schema enum (also for a single
    name, which pydantic would write as `const`)."""
    return Annotated[Literal.__getitem__(tuple(names)), WithJsonSchema({"type": "string", "enum": names})]


def weights_of(table: Any, key: str) -> dict[str, float]:
    """A {name: weight} table from YAML, every weight a number in [0, 1]."""
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(
            f"{key} must be a non-empty mapping of name: score, e.g. {{same: 1.0, different: 0.0}}"
        )
    weights = {}
    for name, weight in table.items():
        # YAML 1.1 reads the bare keys yes/no as booleans; a verdict table means the words.
        label = ("yes" if name else "no") if isinstance(name, bool) else str(name)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
            raise ConfigError(f"{key}.{label}={weight!r}: a score must be a number between 0 and 1")
        weights[label] = float(weight)
    return weights


def in_order(keyed: dict[str, Any]) -> list[Any]:
    """The entries of a per_position reply (as dumped by alias), by position."""
    return [keyed[str(i)] for i in range(len(keyed))]


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


# `empty`: what a scorer gives an item with nothing to measure (no claims, no contexts, no call expected
# and none made): unscored (NaN, with the reason; left out of the mean and counted as not applicable,
# not as a failure), 0 or 1.
EMPTY_RULES = {"unscored": math.nan, "0": 0.0, "1": 1.0}
# `compat`: the tools whose formulas and empty cases a scorer can reproduce instead of its own
COMPATS = ("ragas", "deepeval", "mastra")


def empty_rule(value: Any, where: str) -> float:
    """The score an `empty` setting gives (NaN: unscored); YAML reads `empty: 1` as a number, and 0.5
    or true is no rule."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    key = {0: "0", 1: "1"}.get(value, value) if number else value
    if not isinstance(key, str) or key not in EMPTY_RULES:
        raise ConfigError(f"{where}.empty={value!r} is not a rule; use unscored, 0 or 1")
    return EMPTY_RULES[key]


def when_empty(rule: float, why: str) -> ScoreResult:
    """The result of an item with nothing to measure, under its `empty` rule, saying why."""
    if math.isnan(rule):
        return ScoreResult.empty(why)
    return ScoreResult(rule, f"{why[:1].upper()}{why[1:]}: score {rule:g} (empty={rule:g}).")


def choice(value: Any, options: tuple[str | None, ...], where: str) -> Any:
    """A setting that must be one of `options`, or a one-line error saying which to choose."""
    if value not in options:
        raise ConfigError(f"{where}={value!r}: choose one of {', '.join(str(o) for o in options)}")
    return value
