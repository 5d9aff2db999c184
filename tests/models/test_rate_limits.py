"""Rate limits (issue 18): a run that meets the provider's limit slows down instead of losing items.

Against real HTTP (tests/testserver.py's rate-limit mode, or responders answering 429) and the model
door's own bookkeeping (evalframe/limits.py). Counts and order are asserted, never how long anything
took: a loaded machine only makes a client slower, so "no sooner than" holds and "within" would not.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from evalframe.errors import ConfigError
from evalframe.models.cache import Cache
from evalframe.models.limits import PARALLEL_JOBS, Deadline, ModelLimits, Overdue, duration, retry_after
from evalframe.models.llm import LLM
from evalframe.models.retry import with_retries
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats, StepResult
from evalframe.results.summary import Summary
from evalframe.run import pipeline
from evalframe.scorers.answer_similarity import SemanticUnits
from evalframe.sweep.callback import parallel_jobs
from tests.conftest import compose, fake_model, run_process, within
from tests.fake_judge import judge
from tests.scripted import NAME, ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest, Fault, RateLimit


def door(server: FakeLLMServer, concurrency: int = 4, **settings: Any) -> LLM:
    settings = {"timeout": 10, **settings}
    model = ModelSettings(name="openai/gpt-4o-mini", api_base=server.openai_base, **settings)
    return LLM(model, asyncio.Semaphore(concurrency), Cache("off"), Stats())


def extract(llm: LLM, n: int) -> list[StepResult]:
    """n different extraction requests, all at once."""

    async def all_of() -> list[StepResult]:
        texts = [f"<TEXT-00000000>\nSentence {i}.\n</TEXT-00000000>" for i in range(n)]
        messages = [[{"role": "user", "content": text}] for text in texts]
        return list(await asyncio.gather(*(llm.structured("extract", m, SemanticUnits) for m in messages)))

    return asyncio.run(all_of())


def refused(wait_ms: int) -> Fault:
    return Fault(status=429, headers={"retry-after-ms": str(wait_ms)})


# ------------------------------------------------------------------ the limits' bookkeeping
def test_the_in_flight_limit_is_cut_once_per_episode_and_grows_back_slowly() -> None:
    limits = ModelLimits(8)
    sent = time.monotonic()
    for _ in range(8):  # eight requests sent together, all refused: one episode, one cut
        limits.refused(sent, {"retry-after-ms": "0"})
    assert limits.current == 4 and limits.rate_limited == 8
    limits.refused(time.monotonic(), {"retry-after-ms": "0"})  # sent after the cut: a new episode
    assert limits.current == 2
    answers = 0
    while limits.current < 8:
        limits.answered(None, 0, 0)
        answers += 1
    assert answers == 2 + 3 + 4 + 5 + 6 + 7  # one more place for every `limit` answers
    for _ in range(100):
        limits.answered(None, 0, 0)
    assert limits.current == 8  # never above concurrency
    assert [limit for _, limit in limits.history] == [8, 4, 2, 3, 4, 5, 6, 7, 8]


def test_a_cool_down_holds_every_request_to_the_model() -> None:
    async def scenario() -> list[str]:
        limits = ModelLimits(4)
        limits.refused(time.monotonic(), {"retry-after-ms": "600"})
        order: list[str] = []

        async def request(name: str) -> None:
            await limits.ready(0)
            order.append(name)

        waiting = [asyncio.create_task(request(f"r{i}")) for i in range(3)]
        await asyncio.sleep(0.05)
        order.append("still cooling")  # nothing went in the first 50 ms of a 600 ms cool-down
        await asyncio.gather(*waiting)
        assert limits.waited > 0
        return order

    first, *then = asyncio.run(scenario())
    assert first == "still cooling" and sorted(then) == ["r0", "r1", "r2"]


def test_the_providers_remaining_count_slows_down_before_a_429() -> None:
    limits = ModelLimits(8)
    limits.observe({"x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "6m0s"})
    assert limits.take(0) and limits.take(0)  # two left in the provider's window
    assert not limits.take(0) and limits.delay(0) > 300  # the third waits for the window's reset
    tokens = ModelLimits(8)
    tokens.observe({"llm_provider-x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "20s"})
    assert tokens.delay(50) == 0 and tokens.delay(500) > 10


def in_(seconds: float) -> str:
    """A time `seconds` from now as Anthropic's -reset headers write it (RFC 3339, to the second)."""
    return datetime.fromtimestamp(time.time() + seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_anthropics_remaining_counts_slow_down_before_a_429() -> None:
    limits = ModelLimits(8)
    limits.observe(  # as LiteLLM passes them on: the -remaining also copied to x-ratelimit-*
        {
            "x-ratelimit-remaining-requests": "2",
            "llm_provider-anthropic-ratelimit-requests-remaining": "2",
            "llm_provider-anthropic-ratelimit-requests-reset": in_(360),
        }
    )
    assert limits.take(0) and limits.take(0)
    assert not limits.take(0) and limits.delay(0) > 300
    for kind in ("tokens", "input-tokens"):
        tokens = ModelLimits(8)
        tokens.observe(
            {f"anthropic-ratelimit-{kind}-remaining": "100", f"anthropic-ratelimit-{kind}-reset": in_(20)}
        )
        assert tokens.delay(50) == 0 and tokens.delay(500) > 10, kind
    output = ModelLimits(8)
    output.observe(
        {
            "anthropic-ratelimit-output-tokens-remaining": "0",
            "anthropic-ratelimit-output-tokens-reset": in_(20),
        }
    )
    assert output.delay(0) > 10  # used up: held whatever the request's size
    refused = ModelLimits(8)  # a 429 from Anthropic says Retry-After in whole seconds
    assert refused.refused(time.monotonic(), {"retry-after": "30"}) - time.monotonic() > 29


def test_rpm_and_tpm_budgets_space_requests_and_learn_from_usage() -> None:
    limits = ModelLimits(8, rpm=60)  # one a second
    assert limits.take(0) and not limits.take(0) and 0.5 < limits.delay(0) <= 1.0
    tokens = ModelLimits(8, tpm=600)  # ten a second
    assert tokens.take(100)  # estimated 100 tokens: the next may go 10 s later
    assert 9 < tokens.delay(0) <= 10
    tokens.answered(None, estimated=100, used=20)  # it used 20: 8 s sooner
    assert 1 < tokens.delay(0) <= 2


def test_budgets_are_checked_and_shared_by_a_sweeps_parallel_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (0, -5, "fast", True):
        with pytest.raises(ConfigError, match=r"model\.rpm"):
            ModelSettings.from_config({"name": "openai/x", "rpm": bad})
    settings = ModelSettings.from_config({"name": "openai/x", "rpm": 2400, "tpm": 100000})
    assert (settings.limits(8).rpm, settings.limits(8).tpm) == (2400, 100000)
    monkeypatch.setenv(PARALLEL_JOBS, "4")
    assert (settings.limits(8).rpm, settings.limits(8).tpm) == (600, 25000)

    def sweep(launcher: dict[str, Any], *overrides: str, sweeper: dict[str, Any] | None = None) -> int:
        hydra = {"launcher": launcher, "sweeper": sweeper or {}, "overrides": {"task": list(overrides)}}
        return parallel_jobs(OmegaConf.create({"hydra": hydra}))

    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    five = "model.temperature=0,0.1,0.2,0.3,0.4"
    assert sweep({"_target_": joblib, "n_jobs": 4}, five, "penalties.missing=0.1,0.2") == 4
    assert sweep({"_target_": joblib, "n_jobs": 8}, "penalties.missing=0.1,0.2,0.3") == 3
    assert sweep({"_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"}, five) == 5
    assert sweep({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, five) == 1
    optuna = {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper", "n_jobs": 2}
    assert sweep({"_target_": joblib, "n_jobs": 4}, sweeper=optuna) == 2


# ------------------------------------------------------------------ the model door, over HTTP
@pytest.mark.slow
def test_429s_do_not_use_up_the_retries_and_are_counted() -> None:
    # Two: each waits at least the backoff (0.5 s, 1 s), well within the 10 s deadline
    replies: Iterator[Fault | dict[str, Any]] = iter([*[refused(10)] * 2, {"units": ["A"]}])
    with FakeLLMServer(responder=lambda r: next(replies)) as server:
        llm = door(server, max_retries=0)
        [step] = extract(llm, 1)
    assert step.ok and step.attempts == 3 and llm.stats.rate_limited == 2
    assert llm.limits.current < 4  # cut by the episode, not yet grown back


def test_a_429_holds_the_models_other_requests_until_its_retry_after() -> None:
    """The first request is refused with retry-after-ms=800; a second request, asked once the 429 is
    in, reaches the server no sooner than that. Only the server's clock is read."""
    arrived: list[tuple[float, str]] = []

    def responder(request: FakeRequest) -> Any:
        arrived.append((time.monotonic(), request.messages[-1]["content"]))
        if len(arrived) == 1:
            return refused(800)
        return {"units": ["A"]}

    async def scenario(llm: LLM, server: FakeLLMServer) -> None:
        one = [{"role": "user", "content": "one"}]
        first = asyncio.create_task(llm.structured("extract", one, SemanticUnits))
        while llm.stats.rate_limited == 0 and not first.done():  # the 429 is in
            await asyncio.sleep(0.01)
        second = llm.structured("extract", [{"role": "user", "content": "two"}], SemanticUnits)
        assert all(s.ok for s in await asyncio.gather(first, second))

    with FakeLLMServer(responder=responder) as server:
        asyncio.run(scenario(door(server), server))
    (turned_away, _), *later = arrived
    assert sorted(text for _, text in later) == ["one", "two"]
    assert all(at - turned_away >= 0.8 for at, _ in later)


@pytest.mark.slow  # 5 s and more: episodes of 429s, each cool-down twice the last
def test_429s_without_headers_cut_the_limit_and_every_item_is_still_scored(tmp_path: Path) -> None:
    """A judge that refuses whatever is beyond two requests in flight, saying only 429: the limit
    comes down from concurrency, every item is scored, and the summary and MLflow say so (the 429s,
    the waiting, the in-flight limit over time as a metric with steps)."""
    from mlflow.tracking import MlflowClient

    lock, busy = threading.Lock(), [0]

    def two_at_a_time(request: FakeRequest) -> Any:
        with lock:
            if busy[0] >= 2:
                return Fault(status=429)
            busy[0] += 1
        try:
            time.sleep(0.05)
            return judge(request)
        finally:
            with lock:
                busy[0] -= 1

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with FakeLLMServer(responder=two_at_a_time) as server:
        overrides = ["scorer=answer_similarity", *fake_model(server), "dataset.limit=8", "concurrency=8"]
        config = compose([*overrides, "model.max_retries=0", f"tracking.uri={uri}"])
        result, code = pipeline.evaluate(config, tmp_path / "run")
        refused = server.faults
    assert code == 0 and result.summaries["answer_similarity"].unscored == 0
    assert refused > 0 and result.stats.rate_limited == refused
    [limits] = result.stats.limits.values()
    assert min(limit for _, limit in limits.history) < 8
    assert f"rate limited: {refused} (429s)" in Summary.of(result).totals()
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(str(result.run_id))
    assert run.data.metrics["usage/rate_limited"] == refused and "usage/rate_limit_wait" in run.data.metrics
    history = client.get_metric_history(run.info.run_id, "usage/in_flight_limit/openai/gpt-4o-mini")
    assert [m.value for m in history] == [limit for _, limit in limits.history]
    assert [m.step for m in history] == sorted(m.step for m in history) and history[0].step == 0


@pytest.mark.slow
def test_a_rate_limited_server_loses_no_item(tmp_path: Path) -> None:
    """The issue's case, scaled down: a judge allowing 20 requests per half second, concurrency 16.
    Every item is scored, no request comes back before its Retry-After, and the provider's
    x-ratelimit-* headers keep the 429s few."""
    with FakeLLMServer(responder=judge, rate_limit=RateLimit(20, 0.5), latency=0.05) as server:
        config = compose(["scorer=answer_similarity", *fake_model(server), "tracking=none", "concurrency=16"])
        result, code = pipeline.evaluate(config, tmp_path)
        answered, refused, early = server.count(), server.rate_limited, server.early
    assert code == 0 and result.summaries["answer_similarity"].unscored == 0
    assert early == 0
    assert refused <= 0.1 * (answered + refused)
    assert result.stats.rate_limited == refused


@pytest.mark.slow
def test_a_rate_limited_anthropic_server_loses_no_item(tmp_path: Path) -> None:
    """The same on Anthropic's wire (model=claude): its anthropic-ratelimit-* headers, whose resets
    are times to the second, keep the 429s few, and a 429's Retry-After is waited out."""
    with FakeLLMServer(responder=judge, rate_limit=RateLimit(4, 1.0), latency=0.05) as server:
        overrides = ["scorer=answer_similarity", *fake_model(server, "claude"), "dataset.limit=4"]
        result, code = pipeline.evaluate(compose([*overrides, "tracking=none", "concurrency=3"]), tmp_path)
        answered, refused, early = server.count(), server.rate_limited, server.early
        assert {r.protocol for r in server.requests} == {"anthropic"}
    assert code == 0 and result.summaries["answer_similarity"].unscored == 0
    assert early == 0 and answered > 8  # more than two windows' worth
    assert refused <= 0.1 * (answered + refused)
    assert result.stats.rate_limited == refused and result.stats.rate_wait > 0


def scripted_door(**settings: Any) -> LLM:
    return LLM(ModelSettings(name=NAME, **settings), asyncio.Semaphore(8), Cache("off"), Stats())


def test_model_rpm_spaces_the_requests(scripted: ScriptedModel) -> None:
    """Five requests at rpm=600 (one each 0.1 s): the first goes at once, the last no sooner than
    0.4 s later (the whole exchange can only take longer on a loaded machine, never shorter)."""
    extract(scripted_door(), 1)  # LiteLLM's first call sets itself up: not what is timed
    scripted.reset()
    started = time.monotonic()
    extract(scripted_door(rpm=600), 5)
    assert scripted.count() == 5 and time.monotonic() - started >= 4 * 0.1


def test_a_request_stops_waiting_out_429s_at_its_deadline(scripted: ScriptedModel) -> None:
    """A judge refusing for ever: the request gives up at timeout x (1 + max_retries) from its first
    attempt (here 2 s: room for a second attempt after the 0.5 s backoff on a loaded machine, where one
    attempt can take most of a second), then counts as any failure: its item is unscored, the run goes on."""
    extract(scripted_door(), 1)  # LiteLLM's first call sets itself up (a second, on a busy machine)
    scripted.responder = lambda r: Fault(status=429, retry_after=0.05)
    [step] = extract(scripted_door(timeout=2, max_retries=0), 1)
    assert not step.ok and step.error is not None and step.error.startswith("RateLimitError")
    assert step.attempts >= 2


# Waits a judge answering 429 for ever asks for (issue 27): absurd, infinite, in milliseconds, a far
# HTTP date; and none at all, or not a number, where the client's backoff decides.
HOSTILE_WAITS = {
    "1e9 s": {"Retry-After": "1000000000"},
    "inf": {"Retry-After": "inf"},
    "1e12 ms": {"retry-after-ms": "1e12"},
    "year 2099": {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"},
    "no header": {},
    "not a number": {"Retry-After": "soon"},
}


@pytest.mark.parametrize("headers", HOSTILE_WAITS.values(), ids=list(HOSTILE_WAITS))
@pytest.mark.slow
def test_no_wait_a_judge_asks_for_holds_a_request_past_its_deadline(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    """A judge answering 429 for ever, asking to wait 31 years: each request ends by its deadline,
    timeout × (1 + max_retries) = 1 s (the cool-down it set lasts no longer), and the run ends with its
    items unscored, not lost (exit code 4). It hung: pending requests slept in the limiter until the
    cool-down's end."""
    with FakeLLMServer(responder=lambda r: Fault(status=429, headers=headers)) as server:
        overrides = ["scorer=answer_similarity", *fake_model(server), "dataset.limit=2", "tracking=none"]
        config = compose([*overrides, "model.timeout=0.5", "model.max_retries=1", "cache.mode=off"])
        result, code = within(60, lambda: pipeline.evaluate(config, tmp_path))
        assert server.first is not None
        taken = time.time() - server.first
    assert code == 4 and len(result.items) == 2 and result.summaries["answer_similarity"].unscored == 2
    assert taken < 1 + 3  # the requests wait together, each within its 1 s; 3 s for the report


def test_the_providers_waits_never_outlive_the_requests_they_hold() -> None:
    """Whatever a 429 or a window's reset says, the model's cool-down ends within the longest deadline
    of a request (its horizon); a request already sent (its deadline running) that the limits would hold
    past its deadline ends at once (Overdue) instead of sleeping."""
    for headers in [*HOSTILE_WAITS.values(), {"retry-after": "1e308"}]:
        limits = ModelLimits(8, horizon=2)
        assert (
            limits.refused(time.monotonic(), {k.lower(): v for k, v in headers.items()})
            <= time.monotonic() + 2
        )
    for reset in ({"x-ratelimit-reset-requests": "inf"}, {"x-ratelimit-reset-requests": "1000000000s"}):
        window = ModelLimits(8, horizon=2)
        window.observe({"x-ratelimit-remaining-requests": "0", **reset})
        assert 0 < window.delay(0) <= 2
    anthropic = ModelLimits(8, horizon=2)
    anthropic.observe(
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "9999-12-31T00:00:00Z",
        }
    )
    assert 0 < anthropic.delay(0) <= 2

    async def held() -> float:
        limits = ModelLimits(8, horizon=2)
        deadline = Deadline(0.5)
        deadline.start()  # sent once: half a second left
        limits.refused(time.monotonic(), {"retry-after": "1000000000"})  # a cool-down of 2 s
        started = time.monotonic()
        with pytest.raises(Overdue, match="past the request's deadline"):
            await limits.send(asyncio.Semaphore(8), 0, lambda: asyncio.sleep(0), deadline)
        return time.monotonic() - started

    assert within(10, lambda: asyncio.run(held())) < 0.5

    class Unavailable(Exception):  # a 503 asking for 31 years: not retried, as a 429 past the deadline
        response = type("Response", (), {"headers": {"retry-after": "1000000000"}})

    async def unavailable() -> None:
        raise Unavailable

    async def retried() -> float:
        deadline = Deadline(2)
        deadline.start()
        started = time.monotonic()
        with pytest.raises(Unavailable):
            await with_retries(unavailable, 3, lambda e: True, deadline=deadline)
        return time.monotonic() - started

    assert within(10, lambda: asyncio.run(retried())) < 0.5


# Waits that are no wait at all (issue 27): zero, negative, NaN, a date past. A judge answering 429 with
# one of them for ever got 270-290 requests in 13 s for two items.
NONSENSE_WAITS = {
    "0": {"Retry-After": "0"},
    "-5": {"Retry-After": "-5"},
    "nan": {"Retry-After": "nan"},
    "-100 ms": {"retry-after-ms": "-100"},
    "nan ms": {"retry-after-ms": "nan"},
    "1 ms": {"retry-after-ms": "1"},
    "year 1970": {"Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT"},
}


@pytest.mark.parametrize("headers", NONSENSE_WAITS.values(), ids=list(NONSENSE_WAITS))
@pytest.mark.slow
def test_a_wait_of_nothing_is_the_backoff_never_less(headers: dict[str, str]) -> None:
    """A judge answering 429 for ever, saying to come back at once (or a millisecond, or before now):
    the request backs off as for a 429 naming no wait (0.5 s, then 1 s...), so its 2 s deadline
    (timeout × (1 + max_retries)) holds three attempts, not hundreds."""
    arrived: list[float] = []

    def refuse(request: FakeRequest) -> Fault:
        arrived.append(time.monotonic())
        return Fault(status=429, headers=headers)

    with FakeLLMServer(responder=refuse) as server:
        [step] = within(30, lambda: extract(door(server, timeout=1, max_retries=1), 1))
    assert not step.ok and step.error is not None and step.error.startswith("RateLimitError")
    assert 2 <= len(arrived) <= 4, len(arrived)
    assert all(later - earlier >= 0.5 for earlier, later in itertools.pairwise(arrived))


def test_retry_after_is_read_in_seconds_milliseconds_or_as_an_http_date() -> None:
    assert retry_after({"retry-after": "7"}) == 7 and retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after-ms": "-100", "retry-after": "3"}) == 3  # the one that names a wait
    when = email.utils.formatdate(time.time() + 30, usegmt=True)  # "Wed, 21 Oct 2099 07:28:00 GMT"
    assert 28 < (retry_after({"retry-after": when}) or 0) <= 30
    for headers in [*NONSENSE_WAITS.values(), {"Retry-After": "soon"}, {}]:
        said = {k.lower(): v for k, v in headers.items()}
        assert retry_after(said) is None or headers == NONSENSE_WAITS["1 ms"], headers
        cooled = ModelLimits(8).refused(time.monotonic(), said)
        assert cooled - time.monotonic() > 0.45  # the first backoff, 0.5 s, whatever was said
    assert duration("-5s") is None and duration("nan") is None and duration("1.5s") == 1.5


@pytest.mark.slow
def test_a_parallel_sweeps_jobs_share_model_rpm(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    """Four joblib jobs on two worker processes, each job needing its own judge calls (temperature is
    in the request), with model.rpm=480: two jobs run at once, each keeping to 240 a minute (4 a
    second), so together they keep to the budget."""
    result = run_process(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "dataset.limit=4",
            "tracking=none",
            "model.rpm=480",
            "model.temperature=0.0,0.1,0.2,0.3",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    by_job: dict[float, list[float]] = {}
    for request in judge_server.requests:
        by_job.setdefault(request.body["temperature"], []).append(request.arrived)
    assert sorted(by_job) == [0.0, 0.1, 0.2, 0.3]
    for arrivals in by_job.values():
        arrivals.sort()
        assert len(arrivals) > 5
        # Sent 60 / 240 = 0.25 s apart, or later. A request reaches the server a little after it was
        # let go (LiteLLM's own work first: most for a process's first request, which is left out),
        # so one gap of slack; without the split the gaps are 0.125 s.
        assert arrivals[-1] - arrivals[1] >= (len(arrivals) - 3) * 0.25


def test_the_servers_rate_limit_mode_answers_429_with_the_headers_and_counts_early_returns() -> None:
    import litellm

    async def ask(base: str) -> Any:
        try:
            return await litellm.acompletion(
                model="openai/gpt-4o-mini",
                messages=[{"role": "user", "content": "hi"}],
                api_base=base,
                api_key="sk-x",
                max_retries=0,
            )
        except litellm.RateLimitError as e:
            return e

    with FakeLLMServer(rate_limit=RateLimit(2, window=60)) as server:
        answered = [asyncio.run(ask(server.openai_base)) for _ in range(2)]
        refusals = [asyncio.run(ask(server.openai_base)) for _ in range(2)]  # the second one too soon
        assert server.count() == 2 and server.rate_limited == 2 and server.early == 1
    remaining = [r._hidden_params["additional_headers"]["x-ratelimit-remaining-requests"] for r in answered]
    assert remaining == ["1", "0"]
    headers = refusals[0].litellm_response_headers
    assert int(headers["retry-after"]) >= 59 and int(headers["retry-after-ms"]) > 58_000
    assert headers["x-ratelimit-limit-requests"] == "2" and headers["x-ratelimit-remaining-requests"] == "0"


BUDGETS = [["concurrency=32", "model.rpm=2400"], ["model.rpm=500", "model.tpm=200000"]]


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_readmes_budgets(scripted: ScriptedModel, tmp_path: Path, budget: list[str]) -> None:
    """The README's commands (Rate limits), on the scripted judge and one row (with more, the tpm
    budget spaces their first requests over seconds: tests/test_readme.py runs them on a few)."""
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=1", "tracking=none"]
    result, code = pipeline.evaluate(compose([*overrides, *budget]), tmp_path)
    assert code == 0 and result.summaries["answer_similarity"].scored == 1
    [limits] = result.stats.limits.values()
    given = dict(o.split("=") for o in budget)
    assert limits.rpm == float(given["model.rpm"])
    assert limits.tpm == (float(given["model.tpm"]) if "model.tpm" in given else None)


def test_the_progress_line_shows_429s_and_a_cut_limit() -> None:
    from evalframe.report.console import rate_limits

    stats = Stats()
    stats.limits["openai/gpt-4o-mini"] = limits = ModelLimits(8)
    assert rate_limits(stats) == ""
    limits.refused(time.monotonic(), {"retry-after-ms": "0"})
    assert rate_limits(stats) == "429s 1  in flight ≤ 4 of 8"
