"""The model door: retries on transient faults, validation retries, usage, real HTTP throughout."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from evalframe import pipeline
from evalframe.cache import Cache
from evalframe.llm import LLM, ModelSettings
from evalframe.results import Stats, StepResult
from evalframe.scorers.answer_similarity import SemanticUnits
from evalframe.testserver import FakeLLMServer, FakeRequest, Fault
from tests.conftest import compose, fake_model
from tests.fake_judge import judge


def settings(server: FakeLLMServer, **extra: Any) -> ModelSettings:
    return ModelSettings(name="openai/gpt-4o-mini", api_base=server.openai_base, timeout=5, **extra)


def ask(server: FakeLLMServer, **extra: Any) -> StepResult:
    llm = LLM(settings(server, **extra), asyncio.Semaphore(4), Cache("off"), Stats())
    messages = [{"role": "user", "content": "<TEXT-00000000>\nA. B.\n</TEXT-00000000>"}]
    return asyncio.run(llm.structured("extract", messages, SemanticUnits))


def test_transient_faults_on_a_fifth_of_calls_still_score_every_item(tmp_path: Path) -> None:
    with FakeLLMServer(responder=judge, error_rate=0.2, error_statuses=(429, 500, 503), seed=7) as flaky:
        config = compose(
            ["scorer=answer_similarity", *fake_model(flaky), "tracking=none", "model.max_retries=6"]
        )
        result, _ = pipeline.evaluate(config, tmp_path)
        assert flaky.faults > 5
    summary = result.summaries["answer_similarity"]
    assert summary.scored == 28 and summary.unscored == 0


def test_invalid_reply_is_retried_with_the_validation_error() -> None:
    replies = iter(['{"units": "not a list"}', json.dumps({"units": ["A", "B"]})])
    seen: list[FakeRequest] = []

    def responder(request: FakeRequest) -> str:
        seen.append(request)
        return next(replies)

    with FakeLLMServer(responder=responder) as server:
        step = ask(server)
    assert step.ok and step.reply == {"units": ["A", "B"]} and step.attempts == 2
    correction = seen[1].messages[-1]["content"]
    assert "units: Input should be a valid array" in correction
    assert seen[1].messages[-2] == {"role": "assistant", "content": '{"units": "not a list"}'}
    assert step.usage.prompt_tokens > 0 and step.usage.cost > 0  # both attempts are paid for


def test_a_reply_that_stays_invalid_is_an_error_with_the_raw_text() -> None:
    with FakeLLMServer(responder=lambda r: "Sure! Here are the units: A, B") as server:
        step = ask(server, max_retries=2)
        assert server.count() == 3
    assert not step.ok and step.raw == "Sure! Here are the units: A, B"
    assert step.error is not None and step.error.startswith("invalid reply after 3 attempt(s)")


def test_retry_after_is_honoured() -> None:
    calls: list[float] = []

    def responder(request: FakeRequest) -> Fault | dict[str, list[str]]:
        import time

        calls.append(time.monotonic())
        return Fault(status=429, retry_after=0.6) if len(calls) == 1 else {"units": ["A"]}

    with FakeLLMServer(responder=responder) as server:
        step = ask(server)
    assert step.ok and len(calls) == 2
    assert calls[1] - calls[0] >= 0.6


def test_json_in_a_markdown_fence_is_accepted() -> None:
    with FakeLLMServer(responder=lambda r: '```json\n{"units": ["A"]}\n```') as server:
        step = ask(server)
    assert step.ok and step.reply == {"units": ["A"]} and step.attempts == 1
