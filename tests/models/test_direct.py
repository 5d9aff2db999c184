"""An OpenAI-compatible server's calls on LiteLLM's lower-level path (evalframe.models.direct) give the
door what litellm.acompletion gives it: the same reply (content, usage, the headers the rate limits read)
and, for every failure, the same LiteLLM exception class, status, message and Retry-After, so retries,
refusals and rate limits (transport.py) work as before. The bodies on the wire: test_wire_bodies."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from evalframe.models import direct, retry, transport
from evalframe.models.cache import Cache
from evalframe.models.llm import LLM, response_format
from evalframe.models.loader import lib
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats
from evalframe.scorers.answer_similarity import SemanticUnits
from tests.testserver import FakeLLMServer, FakeRequest, Fault, RateLimit

MESSAGES = [{"role": "user", "content": "<TEXT-00000000>\nA. B.\n</TEXT-00000000>"}]


def settings(base: str, **extra: Any) -> ModelSettings:
    given = {"timeout": 5, "max_tokens": 64, **extra}
    return ModelSettings(name="openai/gpt-4o-mini", api_base=base, **given)


async def both(s: ModelSettings) -> tuple[Any, Any]:
    """What acompletion and the direct path each give for the same call (a reply or an exception)."""
    fmt = {"response_format": response_format(SemanticUnits)}
    litellm = lib()
    outcomes = []
    for call in (
        lambda: litellm.acompletion(messages=MESSAGES, **s.call_kwargs(), **fmt),
        lambda: direct.Direct(s).complete(MESSAGES, **fmt),
    ):
        try:
            outcomes.append(await call())
        except Exception as e:
            outcomes.append(e)
    return outcomes[0], outcomes[1]


def test_only_an_openai_compatible_server_without_extra_arguments_takes_the_direct_path() -> None:
    assert direct.usable(settings("http://127.0.0.1:1/v1"))
    assert not direct.usable(ModelSettings(name="openai/gpt-4o-mini"))  # OpenAI itself: its org, project...
    assert not direct.usable(settings("http://127.0.0.1:1/v1", extra={"top_p": 0.5}))
    assert not direct.usable(ModelSettings(name="anthropic/claude-sonnet-4-5", api_base="http://127.0.0.1:1"))


def test_the_door_sends_an_openai_compatible_servers_calls_on_the_direct_path() -> None:
    def door(s: ModelSettings) -> Any:
        return LLM(s, asyncio.Semaphore(1), Cache("off"), Stats())._direct

    assert isinstance(door(settings("http://127.0.0.1:1/v1")), direct.Direct)
    assert door(ModelSettings(name="anthropic/claude-sonnet-4-5", api_base="http://127.0.0.1:1")) is None


def test_a_reply_is_the_one_acompletion_gives() -> None:
    limit = RateLimit(requests=100, window=60)
    with FakeLLMServer(responder=lambda r: {"units": ["A", "B"]}, rate_limit=limit) as server:
        sdk, ours = asyncio.run(both(settings(server.openai_base)))
    assert ours.choices[0].message.content == sdk.choices[0].message.content == '{"units": ["A", "B"]}'
    assert ours.choices[0].finish_reason == sdk.choices[0].finish_reason
    assert ours.usage.prompt_tokens == sdk.usage.prompt_tokens > 0
    assert ours.usage.completion_tokens == sdk.usage.completion_tokens > 0
    mine, theirs = ours._hidden_params["additional_headers"], sdk._hidden_params["additional_headers"]
    assert set(mine) == set(theirs)  # what the rate limits read (limits.window): the same
    rate = [h for h in mine if "ratelimit-limit" in h]  # (remaining and reset: one request apart)
    assert {h: mine[h] for h in rate} == {h: theirs[h] for h in rate} != {}
    assert ours.model == sdk.model


FAULTS = {
    "bad key": Fault(401, body=json.dumps({"error": {"message": "Incorrect API key", "type": "invalid"}})),
    "no permission": Fault(403),
    "unknown model": Fault(404),
    "rate limited": Fault(429, retry_after=3, headers={"retry-after-ms": "2500"}),
    "quota": Fault(429, body=json.dumps({"error": {"message": "exceeded", "code": "insufficient_quota"}})),
    "bad request": Fault(400),
    "server error": Fault(500),
    "unavailable": Fault(503, retry_after=1),
    "bad gateway": Fault(502),
    "not json": Fault(500, body="<html>oops</html>"),
    "a 200 not json": Fault(200, body="<html>oops</html>"),
    "a 200 without choices": Fault(200, body="{}"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_failure_is_the_exception_acompletion_raises(fault: str) -> None:
    def refuse(request: FakeRequest) -> Fault:
        return FAULTS[fault]

    with FakeLLMServer(responder=refuse) as server:
        sdk, ours = asyncio.run(both(settings(server.openai_base)))
    assert isinstance(sdk, Exception) and isinstance(ours, Exception)
    assert type(ours) is type(sdk)
    assert getattr(ours, "status_code", None) == getattr(sdk, "status_code", None)
    assert retry.retry_after(ours) == retry.retry_after(sdk)
    litellm = lib()
    assert transport._refusal(litellm, ours) == transport._refusal(litellm, sdk)
    transient = transport.transient_errors(litellm)
    assert isinstance(ours, transient) == isinstance(sdk, transient)
    if "200" not in fault:  # (where the SDK fills the keys a reply lacks with None, the text differs)
        assert str(ours) == str(sdk)


def test_no_server_is_the_connection_error_acompletion_raises() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    sdk, ours = asyncio.run(both(settings(base, max_retries=0)))
    assert type(ours) is type(sdk)
    assert isinstance(ours, transport.transient_errors(lib()))


def test_a_reply_past_the_timeout_is_the_timeout_acompletion_raises() -> None:
    with FakeLLMServer(responder=lambda r: Fault(200, delay=1.0, body="{}")) as server:
        sdk, ours = asyncio.run(both(settings(server.openai_base, timeout=0.3)))
    assert type(ours) is type(sdk) is lib().Timeout
