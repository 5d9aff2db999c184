"""The scripted model answers through LiteLLM as a real provider does: the reply schema reaches the
responder, usage and cost come back, and a Fault becomes the error LiteLLM raises for a real provider's
failure, which evalframe's model door retries or gives up on as it would for the real thing."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import litellm
import pytest

from evalframe.models.cache import Cache
from evalframe.models.llm import LLM
from evalframe.models.retry import retry_after
from evalframe.models.settings import ModelSettings, missing_keys
from evalframe.models.steps import Stats, StepResult
from evalframe.models.transport import ModelRejected
from evalframe.scorers.answer_similarity import SemanticUnits
from tests.scripted import EMBED, NAME, ScriptedModel
from tests.testserver import FakeRequest, Fault

MESSAGES = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "A. B."}]


def llm(**settings: Any) -> LLM:
    settings = {"timeout": 5, **settings}
    return LLM(ModelSettings(name=NAME, **settings), asyncio.Semaphore(4), Cache("off"), Stats())


def ask(model: LLM) -> StepResult:
    return asyncio.run(model.structured("extract", list(MESSAGES), SemanticUnits))


def complete(**kw: Any) -> Any:
    return asyncio.run(litellm.acompletion(model=NAME, messages=MESSAGES, max_retries=0, **kw))


def test_the_schema_reaches_the_responder_and_usage_and_cost_come_back(scripted: ScriptedModel) -> None:
    scripted.responder = lambda req: {"units": ["A", "B"]}
    step = ask(llm())
    assert step.ok and step.reply == {"units": ["A", "B"]} and step.attempts == 1
    [request] = scripted.requests
    assert request.schema_name == "SemanticUnits" and request.schema == SemanticUnits.model_json_schema()
    assert request.messages == MESSAGES and scripted.count("SemanticUnits") == 1
    assert step.usage.prompt_tokens > 0 and step.usage.completion_tokens > 0 and step.usage.cost > 0


def test_no_key_is_needed(scripted: ScriptedModel) -> None:
    assert missing_keys(NAME) == []
    ModelSettings(name=NAME).check_credentials()  # no api_key_env: nothing to check


def test_the_default_responder_answers_anything_its_schema_allows(scripted: ScriptedModel) -> None:
    from tests.testserver import echo_schema_responder

    scripted.responder = echo_schema_responder
    step = ask(llm())
    assert step.ok and isinstance(step.reply["units"], list)  # type: ignore[index]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, litellm.BadRequestError),
        (401, litellm.AuthenticationError),
        (404, litellm.NotFoundError),
        (429, litellm.RateLimitError),
        (500, litellm.InternalServerError),
        (503, litellm.ServiceUnavailableError),
    ],
)
def test_faults_raise_the_errors_litellm_raises_for_a_provider(
    scripted: ScriptedModel, status: int, error: type[Exception]
) -> None:
    scripted.responder = lambda req: Fault(status=status, retry_after=1.5 if status == 429 else None)
    with pytest.raises(error) as raised:
        complete()
    assert retry_after(raised.value) == (1.5 if status == 429 else None)
    assert scripted.faults == 1 and scripted.count() == 0  # as the server: only answers are logged


def test_a_stall_past_the_timeout_is_a_timeout(scripted: ScriptedModel) -> None:
    scripted.responder = lambda req: Fault(status=200, delay=30)
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        complete(timeout=0.2)
    assert time.monotonic() - started < 5


@pytest.mark.usefixtures("quick_retries")
@pytest.mark.slow
def test_the_door_retries_timeouts_rate_limits_and_server_errors(scripted: ScriptedModel) -> None:
    faults = [Fault(status=200, delay=30), Fault(status=429, retry_after=0.3)]
    asked: list[float] = []

    def flaky(req: FakeRequest) -> Any:
        asked.append(time.monotonic())
        return faults.pop(0) if faults else {"units": ["A"]}

    scripted.responder = flaky
    # The 429 comes within the request's deadline, 0.5 s × (1 + 4), whatever the backoff after the
    # timeout (up to 0.1 s here): a 429 past it would end the request (tests/test_rate_limits.py).
    step = ask(llm(timeout=0.5, max_retries=4))
    assert step.ok and step.attempts == 3 and scripted.faults == 2 and scripted.count() == 1
    assert asked[2] - asked[1] >= 0.3  # Retry-After honoured
    scripted.reset()
    faults[:] = [Fault(status=503)] * 2
    step = ask(llm(max_retries=1))
    assert not step.ok and step.error and step.error.startswith("ServiceUnavailableError")
    assert scripted.faults == 2  # the first try and 1 retry, then the item's step carries the error


def test_a_refused_key_ends_the_run_at_once(scripted: ScriptedModel) -> None:
    scripted.responder = lambda req: Fault(status=401)
    with pytest.raises(ModelRejected, match="rejected the request"):
        ask(llm(max_retries=3))
    assert scripted.faults == 1  # not retried


def test_embeddings_are_the_servers_vectors_with_usage_and_cost(scripted: ScriptedModel) -> None:
    model = LLM(ModelSettings(name=EMBED), asyncio.Semaphore(4), Cache("off"), Stats())
    pairs = [("Paris is big.", "Paris is big."), ("Paris is big.", "Tokyo is far away.")]
    same, different = asyncio.run(model.cosines(pairs))
    assert same.reply and different.reply
    assert math.isclose(same.reply["cosine"], 1.0) and different.reply["cosine"] < 0.9
    [request] = scripted.requests
    assert request.protocol == "embeddings" and sorted(request.inputs) == sorted(
        {t for p in pairs for t in p}
    )
    assert same.usage.prompt_tokens > 0 and model.stats.cost > 0
