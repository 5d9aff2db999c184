"""The model door: retries on transient faults, validation retries, usage, real HTTP throughout."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalframe.models.cache import Cache
from evalframe.models.llm import LLM
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats, StepResult
from evalframe.run import pipeline
from evalframe.scorers.answer_similarity import SemanticUnits
from tests.conftest import compose, fake_model
from tests.fake_judge import judge
from tests.testserver import FakeLLMServer, FakeRequest, Fault


def settings(server: FakeLLMServer, **extra: Any) -> ModelSettings:
    price = {"input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7}  # unknown behind an api_base
    return ModelSettings(
        name="openai/gpt-4o-mini", api_base=server.openai_base, **{"timeout": 5, **price, **extra}
    )


def ask(server: FakeLLMServer, **extra: Any) -> StepResult:
    llm = LLM(settings(server, **extra), asyncio.Semaphore(4), Cache("off"), Stats())
    messages = [{"role": "user", "content": "<TEXT-00000000>\nA. B.\n</TEXT-00000000>"}]
    return asyncio.run(llm.structured("extract", messages, SemanticUnits))


@pytest.mark.usefixtures("quick_retries")
@pytest.mark.slow
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
        step = ask(server, reply_retries=2)
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


@pytest.mark.usefixtures("quick_retries")
@pytest.mark.slow
def test_a_step_sends_at_most_one_plus_its_transport_and_reply_retries() -> None:
    """Transport retries (max_retries) and invalid-reply retries (reply_retries) add up, never multiply:
    a judge that fails three times then answers out of shape, over and over, gets 1 + 3 + 2 requests
    at most, not (3 + 1) x (2 + 1)."""
    sent: list[str] = []

    def judge_that(reply: Callable[[int], Fault | str]) -> Callable[[FakeRequest], Fault | str]:
        sent.clear()

        def responder(request: FakeRequest) -> Fault | str:
            sent.append(request.path)
            return reply(len(sent))

        return responder

    with FakeLLMServer(responder=judge_that(lambda n: "not JSON" if n % 4 == 0 else Fault(status=500))) as s:
        step = ask(s, max_retries=3, reply_retries=2)
    assert not step.ok and step.error and len(sent) <= 1 + 3 + 2
    with FakeLLMServer(responder=judge_that(lambda n: Fault(status=500))) as down:
        assert not ask(down, max_retries=3, reply_retries=2).ok
    assert len(sent) == 4  # the first try and 3 transport retries; an error is not a reply to correct
    with FakeLLMServer(responder=judge_that(lambda n: "not JSON")) as wrong:
        assert not ask(wrong, max_retries=3, reply_retries=2).ok
    assert len(sent) == 3  # the first try and 2 corrections


def chat_reply(choices: list[Any]) -> str:
    """An OpenAI chat completion's body, with the given choices."""
    usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": choices}
    return json.dumps({**body, "usage": usage})


def test_a_reply_without_choices_is_an_invalid_reply_asked_again(tmp_path: Path) -> None:
    """Issue 14.2: `"choices": []` crashed the run (IndexError). Now it is asked again like an invalid
    reply; a judge that keeps sending it leaves its items unscored, and the run goes on."""
    empty = Fault(status=200, body=chat_reply([]))
    replies: Iterator[str | Fault] = iter([empty, json.dumps({"units": ["A"]})])
    with FakeLLMServer(responder=lambda r: next(replies)) as server:
        step = ask(server)
    assert step.ok and step.attempts == 2 and step.reply == {"units": ["A"]}

    def sometimes_empty(request: FakeRequest) -> str | dict[str, Any] | Fault:
        text = " ".join(m["content"] for m in request.messages)
        return empty if "Paris" in text else judge(request)

    with FakeLLMServer(responder=sometimes_empty) as server:
        config = compose(["scorer=answer_similarity", *fake_model(server), "tracking=none"])
        result, _ = pipeline.evaluate(config, tmp_path)
    unscored = [i for i in result.items if not i.scores["answer_similarity"].scored]
    assert unscored and len(unscored) < result.count
    error = unscored[0].scores["answer_similarity"].error
    assert error is not None and "malformed reply: no choices[0].message after 3 attempt(s)" in error


@pytest.mark.slow
def test_the_timeout_is_a_deadline_for_the_whole_reply() -> None:
    """Issue 14.10: model.timeout bounded each read, so a judge trickling its reply a byte at a time
    kept a request busy for minutes. Here every byte comes within the timeout, the whole reply does
    not: the request fails with a timeout (and is retried as one) instead of being waited out."""
    trickled = Fault(status=200, body=chat_reply([{"message": {"role": "assistant", "content": "{}"}}]))
    trickled.trickle = 0.05  # ~250 bytes: 12 s for the reply, 0.05 s for each read
    with FakeLLMServer(responder=lambda r: trickled) as server:
        step = ask(server, timeout=1, max_retries=1)
        assert server.faults == 2  # the first try and one transport retry
    assert not step.ok and step.attempts == 2
    assert step.error == "TimeoutError: no complete reply within model.timeout=1 s"


def test_no_permission_or_no_quota_stops_the_run_at_the_first_reply() -> None:
    """Issue 14.12: a 403, or a 429 saying the quota is used up, is no transient failure: the run
    stops (as on a 401) instead of retrying it on every item."""
    from evalframe.models.transport import ModelRejected

    quota = {"message": "You exceeded your current quota", "type": "insufficient_quota"}
    no_quota = json.dumps({"error": {**quota, "code": "insufficient_quota"}})
    for fault in (Fault(status=403), Fault(status=429, retry_after=0.01, body=no_quota)):
        with FakeLLMServer(responder=functools.partial(lambda f, r: f, fault)) as server:
            try:
                ask(server, max_retries=3)
            except ModelRejected as e:
                assert "rejected the request" in str(e)
            else:
                raise AssertionError(f"a {fault.status} did not stop the run")
            assert server.faults == 1


@pytest.mark.slow  # a fresh interpreter importing litellm: 3 s
def test_preload_imports_litellm_on_a_thread_while_the_caller_goes_on() -> None:
    import subprocess
    import sys

    code = """
import gc, sys, threading
from evalframe.models import loader
loader.preload()
assert not gc.isenabled()  # no GC passes over the import's objects
assert [t for t in threading.enumerate() if t.name == "import-litellm"]
litellm = loader.lib()  # waits for the thread's import
assert litellm.drop_params and sys.modules["litellm"] is litellm
assert gc.isenabled() and gc.get_freeze_count() > 0  # back on, litellm's objects frozen
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_identical_requests_share_a_bounded_number_of_answers(monkeypatch: Any) -> None:
    """An identical request shares the answer of one asked shortly before; only the last SHARED are
    kept (older ones come from the disk cache), so memory stays flat on a long run."""
    from evalframe.models import replies

    monkeypatch.setattr(replies, "SHARED", 3)
    with FakeLLMServer(responder=judge) as server:
        model = LLM(settings(server), asyncio.Semaphore(4), Cache("off"), Stats())

        steps: list[Any] = []

        async def run() -> None:
            for text in ["A. B.", "C. D.", "A. B.", "E.", "F.", "G.", "A. B."]:
                messages = [{"role": "user", "content": f"<TEXT-00000000>\n{text}\n</TEXT-00000000>"}]
                steps.append(await model.structured("extract", messages, SemanticUnits))
                assert len(model.replies._shared) <= 3
                # What is kept to share holds no prompt (most of a step's size): 3 KB a request on a
                # long run; each sharer has the same messages already.
                assert all(f.result().messages == [] for f in model.replies._shared.values())

        asyncio.run(run())
        assert model.stats.hits == 1 and server.count() == 6  # the second "A. B." shared, the third asked
        first, shared = steps[0], steps[2]
        assert shared.cached and shared.messages == first.messages and shared.reply == first.reply
