"""The report's heavy imports (matplotlib, scipy.stats) start once the run's first request is out, not
before it (they would share the interpreter lock with litellm's import and the first request)."""

from __future__ import annotations

import asyncio
import math

import pytest

from evalframe.models.steps import Stats
from evalframe.run import warmup


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(warmup.html_report, "preload", lambda: calls.append("matplotlib"))
    monkeypatch.setattr(warmup.intervals, "preload", lambda: calls.append("scipy.stats"))
    monkeypatch.setattr(warmup.store, "preload", lambda uri: calls.append(f"mlflow {uri}"))
    monkeypatch.setattr(warmup, "POLL", 0.001)
    return calls


def test_a_run_without_chat_models_imports_at_once(started: list[str]) -> None:
    warmup.Warmup(Stats(), asks_models=False)
    assert started == ["matplotlib", "scipy.stats"]


def test_a_run_logged_to_mlflow_imports_mlflow_too(started: list[str]) -> None:
    warmup.Warmup(Stats(), asks_models=False, logs="sqlite:///mlflow.db")
    assert started == ["matplotlib", "scipy.stats", "mlflow sqlite:///mlflow.db"]


def test_nothing_starts_before_the_first_reply(started: list[str]) -> None:
    stats = Stats()
    warm = warmup.Warmup(stats, asks_models=True)
    seen: list[list[str]] = []

    async def work() -> str:
        for _ in range(10):  # ten looks of the watcher: no request yet
            await asyncio.sleep(warmup.POLL)
        seen.append(list(started))
        stats.calls = 1  # the first request counted: being built, then on the wire
        for _ in range(10):
            await asyncio.sleep(warmup.POLL)
        seen.append(list(started))
        stats.add_cost(math.nan, "openai/gpt-4o-mini")  # its reply: unpriced
        while not warm.started:
            await asyncio.sleep(warmup.POLL)
        return "done"

    assert asyncio.run(asyncio.wait_for(warm.during(work()), 10)) == "done"
    assert seen == [[], []]
    assert started == ["matplotlib", "scipy.stats"]  # once, whoever asks again
    warm.start()
    assert started == ["matplotlib", "scipy.stats"]


def test_without_a_reply_they_start_a_while_after_the_first_request(
    started: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warmup, "PATIENCE", 0.0)
    stats = Stats()
    warm = warmup.Warmup(stats, asks_models=True)

    async def work() -> None:
        stats.calls = 1  # a request that fails, or a free model's reply (its cost 0)
        while not warm.started:
            await asyncio.sleep(warmup.POLL)

    asyncio.run(asyncio.wait_for(warm.during(work()), 10))
    assert started == ["matplotlib", "scipy.stats"]


def test_an_item_from_the_cache_starts_them_an_item_without_a_model_does_not(started: list[str]) -> None:
    stats = Stats()
    warm = warmup.Warmup(stats, asks_models=True)
    advanced: list[int] = []
    step = warm.counting(lambda: advanced.append(1))
    step()  # an unscored item (no output): no model, no cache
    assert started == [] and advanced == [1]
    stats.hits = 1
    step()
    assert started == ["matplotlib", "scipy.stats"] and advanced == [1, 1]
