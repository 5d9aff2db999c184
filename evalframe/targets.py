"""Targets: the system under test, producing one output per row."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from evalframe.data import Row, require
from evalframe.llm import ModelSettings
from evalframe.prompts import PromptFile
from evalframe.results import StepResult
from evalframe.scorers import Context


class Target(ABC):
    def models(self) -> list[ModelSettings]:
        return []

    def validate(self, rows: list[Row], source: str) -> None:  # noqa: B027 - optional hook
        """Check rows and prompts before any model call."""

    @abstractmethod
    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        """One (output, how it was made) per row, in order."""


class RecordedOutput(Target):
    """The outputs recorded in the dataset's output column."""

    def validate(self, rows: list[Row], source: str) -> None:
        require(rows, source, "output", "target=dataset evaluates (or use target=llm to generate outputs)")

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        return [(row.output or "", None) for row in rows]


class LLMTarget(Target):
    """Generate each output with a model and the user's Jinja2 prompt template."""

    def __init__(self, model: Mapping[str, Any], prompt: str | None = None):
        self.settings = ModelSettings.from_config(model)
        self.prompt = PromptFile(prompt, "target/answer.j2")

    def models(self) -> list[ModelSettings]:
        return [self.settings]

    def _render(self, row: Row) -> list[dict[str, str]]:
        return self.prompt.render(input=row.input, row=dict(row.extra))

    def validate(self, rows: list[Row], source: str) -> None:
        for row in rows:  # rendering is cheap; every row, so a column a template uses is never missing
            self._render(row)

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        llm = ctx.llm(self.settings)

        async def generate(row: Row) -> StepResult:
            step = await llm.text("target", self._render(row))
            ctx.advance()
            return step

        steps = await asyncio.gather(*(generate(row) for row in rows))
        return [(step.raw or "", step) for step in steps]
