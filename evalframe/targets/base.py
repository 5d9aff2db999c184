"""What a target is: the system under test, producing one output per row (Target), and the simplest
one, the outputs recorded in the dataset (RecordedOutput). A target that fails on one row returns a
StepResult with the error: that item is unscored (and counted), never scored as an empty answer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from evalframe.data.rows import Row, require
from evalframe.models.calls import StepResult
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings


class Target(ABC):
    # Whether outputs() advances the progress bar once per row (targets that do work per row).
    reports_progress = False
    chunk = 1  # rows given to outputs() at once (see Scorer.chunk)

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


class RecordedOutput(Target):
    """The outputs recorded in the dataset's output column."""

    def validate(self, rows: list[Row], source: str) -> None:
        require(rows, source, "output", "target=dataset evaluates (or use target=llm to generate outputs)")

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        return [(row.output or "", None) for row in rows]


def error_text(e: BaseException) -> str:
    """`Type: message`, or the type alone when the message is empty."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
