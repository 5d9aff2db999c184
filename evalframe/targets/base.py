"""What a target is: the system under test, producing one output per row (Target), and the simplest
one, the outputs recorded in the dataset (RecordedOutput). A target that fails on one row returns a
StepResult with the error: that item is unscored (and counted), never scored as an empty answer.

A live target may hand over more than its output (data.handed: contexts, context_ids, tool_calls),
in its step's reply; `handed` puts them on the row before the scorers see it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from evalframe.data import handed as handover
from evalframe.data.conversations import Conversation, Turn
from evalframe.data.rows import Row, require
from evalframe.data.values import printable
from evalframe.errors import DataError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import StepResult
from evalframe.scorers.base import Scorer

# What stands in for a field a target hands over, when scorers check their prompts before any call
# (messages: a simulated conversation, targets.conversing).
_PLACEHOLDERS: dict[str, Any] = {
    "contexts": ["text"],
    "context_ids": ["id"],
    "tool_calls": [],
    "messages": Conversation((Turn(1, "user", "text"), Turn(2, "assistant", "text"))),
}


class Target(ABC):
    # Whether outputs() advances the progress bar once per row (targets that do work per row).
    reports_progress = False
    chunk = 1  # rows given to outputs() at once (see Scorer.chunk)
    # The fields it hands over with every output (data.handed.HANDED): the rows need not have them, and
    # a reply without one a scorer needs leaves that item unscored, saying so.
    provides: frozenset[str] = frozenset()
    label = "the target"  # how errors name it: target.fn=..., target.url=...

    def models(self) -> list[ModelSettings]:
        return []

    def validate(self, rows: list[Row], source: str) -> None:  # noqa: B027 - optional hook
        """Check rows and prompts before any model call."""

    def identity(self) -> str:
        """What the outputs depend on beyond the config (a prompt file's text, a function's code): a
        run is not resumed once it changed."""
        return ""

    @abstractmethod
    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        """One (output, how it was made) per row, in order."""

    def from_rows(self, needs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (scorer, field) needs the dataset's rows must meet before any call: not those this
        target provides, which are checked on each of its replies instead (handed)."""
        return [(name, need) for name, need in needs if need not in self.provides]

    def sample(self, row: Row) -> Row:
        """The row scorers check their prompts against before any call: what this target provides
        stands in with placeholders where the row has none (it comes with each reply)."""
        missing: dict[str, Any] = {
            n: v for n, v in _PLACEHOLDERS.items() if n in self.provides and getattr(row, n) is None
        }
        return dataclasses.replace(row, **missing) if missing else row

    def handed(
        self, rows: list[Row], produced: list[tuple[str, StepResult | None]], scorers: Mapping[str, Scorer]
    ) -> list[tuple[Row, str, StepResult | None]]:
        """Each row with what the target handed over beside its output put on it, its output and step.
        A field a scorer needs that neither the reply nor the row has is that item's error: unscored
        with the reason, never judged as if nothing had been retrieved."""
        owed = [(name, need) for name, s in scorers.items() for need in s.required() if need in self.provides]
        done = []
        for row, (output, step) in zip(rows, produced, strict=True):
            if step is not None and step.error is None and step.reply:
                try:
                    row = handover.onto(row, handover.fields(step.reply, f"{self.label}, item {row.id}"))
                    extra = {**row.extra, **handover.notes(step.reply)}  # why a simulated user stopped
                    row = dataclasses.replace(row, extra=extra, **handover.trace_of(step.reply))
                except DataError as e:  # a stored reply of an older evalframe, say: that item only
                    step.error = str(e)
            missing = [(name, need) for name, need in owed if getattr(row, need) is None]
            if step is not None and step.error is None and missing:
                name, need = missing[0]
                step.error = (
                    f"{self.label} handed over no {need} for item {row.id}, and scorer {name} needs them: "
                    f"return {{'output': ..., '{need}': [...]}} ([] when there are none)"
                )
            done.append((row, output, step))
        return done


class RecordedOutput(Target):
    """The outputs recorded in the dataset's output column."""

    def validate(self, rows: list[Row], source: str) -> None:
        require(rows, source, "output", "target=dataset evaluates (or use target=llm to generate outputs)")

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        return [(row.output or "", None) for row in rows]


def error_text(e: BaseException) -> str:
    """`Type: message`, or the type alone when the message is empty."""
    return printable(f"{type(e).__name__}: {e}") if str(e) else type(e).__name__  # kept in results.jsonl
