"""What the target and the scorers share while a run executes: the one door to the models.

The limiter keeps `concurrency` requests in flight across items, steps and models; the cache and the
running totals are the run's; `advance` moves the progress bar for work done per row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evalframe.models.batch import Batcher
from evalframe.models.cache import Cache
from evalframe.models.limits import ModelLimits
from evalframe.models.llm import LLM
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats


@dataclass
class Context:
    limiter: asyncio.Semaphore
    cache: Cache = field(default_factory=lambda: Cache("off"))
    stats: Stats = field(default_factory=Stats)
    advance: Callable[[], None] = lambda: None
    run_dir: Path | None = None  # where a batched model journals its batches (batches.jsonl)
    _llms: dict[ModelSettings, LLM] = field(default_factory=dict)
    # Where each model's adaptive in-flight limit starts and stops: the limiter's size, read before
    # any request holds a place in it.
    _concurrency: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._concurrency = self.limiter._value

    def llm(self, settings: ModelSettings) -> LLM:
        if settings not in self._llms:
            llm = self._llms[settings] = LLM(
                settings, self.limiter, self.cache, self.stats, self._concurrency
            )
            if settings.batch:
                llm.batcher = Batcher(settings, self.stats, self.run_dir).complete
        return self._llms[settings]

    def limits(self, name: str, horizon: float) -> ModelLimits:
        """The rate limits of a service that is not a model (the HTTP target), kept with the models';
        `horizon`: the longest deadline of its requests."""
        if name not in self.stats.limits:
            self.stats.limits[name] = ModelLimits(self._concurrency, horizon=horizon)
        return self.stats.limits[name]
