"""Batch judging (`model.batch=true`): the judge's requests go through OpenAI's Batch API (file upload,
batch create, retrieve, file content) or Anthropic's Message Batches (create, retrieve, results) on the
local test server, with the same prompts, request bodies, validation and cache as normal calls,
dependent steps as successive batches, the batch price, and batches journaled as they are created so
that a killed run collects them on resume."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import ConfigError
from evalframe.models import batch as batch_module
from evalframe.models.batch import BOOK, Batcher, BatchError
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats
from evalframe.models.transport import ModelRejected
from evalframe.results.summary import Summary
from evalframe.run import pipeline
from tests.conftest import PRICE, compose, fake_model, run_cli
from tests.fake_judge import judge, step_of
from tests.testserver import FakeLLMServer, FakeRequest, Fault

# Faults are retried after a tenth of the real backoff here: these tests count what is sent again.
pytestmark = pytest.mark.usefixtures("quick_retries")

FAKE_KEY = "sk-evalframe-batch-test-93b1"
# model option -> the variable holding its key, its model name, how its batch ids begin
WIRES = {
    "gpt": ("OPENAI_API_KEY", "openai/gpt-4o-mini", "batch_"),
    "claude": ("ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-5", "msgbatch_"),
}


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(judge, batch_delay=0.1) as s:
        yield s


def _batched(server: FakeLLMServer, tmp_path: Path, *extra: str, option: str = "gpt") -> list[str]:
    return [
        "scorer=answer_similarity",
        *fake_model(server, option),
        "tracking=none",
        "dataset.limit=6",
        f"cache.dir={tmp_path / 'cache'}",
        *extra,
    ]


def _bodies(server: FakeLLMServer) -> list[str]:
    return sorted(json.dumps(r.body, sort_keys=True) for r in server.requests)


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("gpt", None),
        ("claude", None),  # claude-sonnet-4-5: structured output as output_format
        ("claude", "anthropic/claude-3-5-haiku-20241022"),  # as a forced tool (LiteLLM has no price for it)
    ],
)
@pytest.mark.slow
def test_a_batched_run_scores_as_normal_calls_do_at_half_price(
    server: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    name: str | None,
) -> None:
    key_env, _, prefix = WIRES[option]
    monkeypatch.setenv(key_env, FAKE_KEY)
    model = [f"model.name={name}"] if name else []
    overrides = _batched(server, tmp_path, "cache.mode=off", *model, option=option)
    normal = pipeline.evaluate(compose(overrides), tmp_path / "n")[0]
    normal_bodies, normal_betas = _bodies(server), {r.headers.get("anthropic-beta") for r in server.requests}
    server.reset()

    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05", *model, option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "b")[0]
    # Every request went in a batch, none as a normal call; the same ones as without batching, byte for
    # byte the bodies a normal call sends (LiteLLM's own transformation, structured output included).
    assert server.batched == len(server.requests) == len(normal_bodies) == result.stats.batched
    assert _bodies(server) == normal_bodies
    if option == "claude":  # the structured-output beta a normal call sends, with the batches beta
        [betas] = {r.headers["anthropic-beta"] for r in server.requests}
        assert set(betas.split(",")) == {*normal_betas, "message-batches-2024-09-24"} - {None}
        assert {r.headers["x-api-key"] for r in server.requests} == {FAKE_KEY}
    # extract (answer and ground truth together), then analyze: two successive batches
    assert server.batch_api["create"] == 2 and server.batch_api.get("upload", 2) == 2
    assert [i.scores["answer_similarity"].score for i in result.items] == [
        i.scores["answer_similarity"].score for i in normal.items
    ]
    assert result.stats.batch_cost == pytest.approx(result.stats.unbatched_cost / 2)  # LiteLLM's batch rates
    assert result.usage.cost == pytest.approx(normal.usage.cost / 2) and (result.usage.cost > 0 or name)
    assert "without batching $" in Summary.of(result).totals()
    book = [json.loads(line) for line in (tmp_path / "b" / BOOK).read_text().splitlines()]
    assert len(book) == 2 and all(entry["batch"].startswith(prefix) for entry in book)
    assert sum(len(entry["requests"]) for entry in book) == server.batched
    assert FAKE_KEY not in (tmp_path / "b" / BOOK).read_text() + str(capsys.readouterr())

    # The replies are cached: a second run (or a sweep) sends nothing.
    server.reset()
    again = pipeline.evaluate(compose(overrides), tmp_path / "again")[0]
    assert server.batch_api == {} and again.stats.calls == 0
    assert again.means == result.means


@pytest.mark.slow
def test_a_batched_model_without_a_price_costs_unknown_not_half_of_a_guess(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05")
    unpriced = [o for o in overrides if o not in PRICE]  # behind the server's api_base: no known price
    result = pipeline.evaluate(compose(unpriced), tmp_path / "b")[0]
    assert result.stats.batched == len(server.requests) > 0
    assert math.isnan(result.stats.batch_cost) and math.isnan(result.usage.cost)
    assert (
        Summary.of(result)
        .totals()
        .endswith(
            "cost — (openai/gpt-4o-mini at a custom api_base, whose price LiteLLM cannot know: set its "
            "input_cost_per_token, output_cost_per_token, 0 for a free local server) "
            f"({result.stats.batched} requests in batches at the batch price; without batching —)"
        )
    )


@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_an_invalid_or_failed_batch_reply_goes_again_in_the_next_batch(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.setenv(WIRES[option][0], FAKE_KEY)
    seen: set[str] = set()

    def flaky(request: FakeRequest) -> Any:
        step = str(step_of(request))
        first = step not in seen
        seen.add(step)
        if first and step == "SemanticUnits":
            return Fault(status=503)  # that line fails: sent again in the next batch
        if first and step == "Analysis":
            return "not JSON"  # invalid: given back to the model in the next batch
        return judge(request)

    server.responder = flaky
    batched = ("model.batch=true", "model.batch_poll=0.05", "cache.mode=off")
    overrides = _batched(server, tmp_path, *batched, option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "o")[0]
    assert result.summaries["answer_similarity"].scored == 6
    # extract; the failed line again with every analyze; the correction with the last analyze
    assert server.batch_api["create"] == 3
    assert len(server.requests) == server.batched  # still no normal call

    server.responder = lambda request: "never JSON"
    server.reset()
    result = pipeline.evaluate(compose(overrides), tmp_path / "p")[0]
    assert result.summaries["answer_similarity"].unscored == 6  # after reply_retries: unscored
    assert "invalid reply after 3 attempt(s)" in str(result.items[0].scores["answer_similarity"].error)
    assert server.batch_api["create"] == 3


@pytest.mark.parametrize("broken", ["malformed", "no custom_id", "null"])
@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_a_broken_line_of_a_batchs_results_costs_only_its_own_request(
    server: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    broken: str,
) -> None:
    """Issue 27: one line of the results cut short, without its custom_id, or null lost the whole batch
    (JSONDecodeError, KeyError, TypeError: every item unscored). Each line stands alone: the broken
    one's request goes again in the next batch, as one the batch did not answer."""
    monkeypatch.setenv(WIRES[option][0], FAKE_KEY)
    server.broken_lines = [broken]
    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05", option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "o")[0]
    assert result.summaries["answer_similarity"].scored == 6
    assert server.batch_api["create"] == 3  # extract; the broken line's again with analyze; its analyze
    first = json.loads((tmp_path / "o" / BOOK).read_text().splitlines()[0])["batch"]
    assert f"batch {first} ({WIRES[option][1]}): 1 not in its results (sent again" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["model", "target.model"])
def test_batch_needs_openai_or_anthropic_and_says_so_before_any_call(
    server: FakeLLMServer, tmp_path: Path, key: str
) -> None:
    pick = "model=gemini" if key == "model" else f"model@{key}=gemini"
    gemini = [pick, f"{key}.api_base={server.base_url}", f"{key}.batch=true"]
    target = ["target=llm"] if key == "target.model" else []
    config = compose(["scorer=answer_similarity", *target, "tracking=none", *gemini])
    match = rf"^{key}.batch=true: .*Message Batches, and gemini/gemini-2.5-flash is neither"
    with pytest.raises(ConfigError, match=match):
        pipeline.evaluate(config, tmp_path / "o")
    assert server.requests == [] and server.batch_api == {}


@pytest.mark.slow
def test_batch_on_gemini_exits_2_with_one_line_before_any_call(server: FakeLLMServer, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    args = ["scorer=answer_similarity", *fake_model(server, "gemini"), "model.batch=true", "tracking=none"]
    result = run_cli(args, cwd=tmp_path, env={"GEMINI_API_KEY": FAKE_KEY})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "model.batch=true" in line]
    assert "is neither" in line and "model=gpt" in line and "model=claude" in line
    assert server.requests == [] and server.batch_api == {}


@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_an_expired_batch_goes_again_in_the_next_batch(
    server: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
) -> None:
    """The provider gave up on the first batch (OpenAI: the batch expired; Anthropic: it ended with every
    request expired): its requests go again in the next batch, and the console says so."""
    key_env, name, _ = WIRES[option]
    monkeypatch.setenv(key_env, FAKE_KEY)
    server.expire_next = 1
    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05", option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "o")[0]
    assert result.summaries["answer_similarity"].scored == 6
    assert server.batch_api["create"] == 3  # extract (expired), extract again, analyze
    first = json.loads((tmp_path / "o" / BOOK).read_text().splitlines()[0])
    assert server.batches[first["batch"]]["_expires"]
    said = "expired" if option == "gpt" else f"{len(first['requests'])} expired"
    assert f"batch {first['batch']} ({name}): {said}" in capsys.readouterr().err
    assert result.stats.batched == server.batched + len(first["requests"])  # the expired ones went twice
    assert len(server.requests) == server.batched  # none as a normal call


@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_the_batch_apis_errors_are_retried_or_end_the_run_without_the_key(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """A 5xx from any batch endpoint is retried and a refused key ends the run, as on a normal call
    (LiteLLM lets Anthropic's retrieve errors through as httpx's: evalframe maps them as LiteLLM does)."""
    key_env, name, _ = WIRES[option]
    monkeypatch.setenv(key_env, FAKE_KEY)
    server.batch_faults = {"create": [Fault(503)], "retrieve": [Fault(500)], "content": [Fault(502)]}
    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05", option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "o")[0]
    assert result.summaries["answer_similarity"].scored == 6 and server.faults == 3
    assert server.batch_api["create"] == 2 and len(server.requests) == server.batched

    refused = f"invalid x-api-key {FAKE_KEY}"  # a provider that echoes the key it refuses
    body = {"type": "error", "error": {"type": "authentication_error", "message": refused}}
    server.batch_faults = {"create": [Fault(401, body=json.dumps(body))]}
    server.reset()
    match = rf"^the batch API of {name} rejected the request \(AuthenticationError\)"
    with pytest.raises(ModelRejected, match=match) as rejected:
        pipeline.evaluate(compose([*overrides, "cache.mode=off"]), tmp_path / "r")
    assert FAKE_KEY not in str(rejected.value) and server.batched == 0


@pytest.mark.slow
@pytest.mark.parametrize("option", WIRES)
def test_model_max_retries_counts_every_request_to_the_batch_api(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """model.max_retries=0: a 503 to the batch's creation is not sent again, by evalframe nor by the
    provider's client. Before: OpenAI's client retried it twice more on its own (with its own
    backoff), so an OpenAI batch went out where an Anthropic one did not."""
    monkeypatch.setenv(WIRES[option][0], FAKE_KEY)
    server.batch_faults = {"create": [Fault(503)]}
    batched = ("model.batch=true", "model.batch_poll=0.05", "model.max_retries=0")
    result, code = pipeline.evaluate(compose(_batched(server, tmp_path, *batched, option=option)), tmp_path)
    assert server.faults == 1 and server.batch_api.get("create", 0) == 0
    assert code == 4 and result.summaries["answer_similarity"].unscored == 6


@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_a_batch_whose_status_cannot_be_read_is_asked_again_not_abandoned(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """Issue 27: the batch's status answered 500 more times than model.max_retries absorbs: the batch
    (created, paid for) was abandoned and every item unscored. A transient error while polling is
    asked again, with a growing pause, until the batch is due."""
    monkeypatch.setenv(WIRES[option][0], FAKE_KEY)
    server.batch_faults = {"retrieve": [Fault(500)] * 6}
    batched = ("model.batch=true", "model.batch_poll=0.05", "model.max_retries=1")
    overrides = _batched(server, tmp_path, *batched, option=option)
    result = pipeline.evaluate(compose(overrides), tmp_path / "o")[0]
    assert result.summaries["answer_similarity"].scored == 6 and server.faults == 6
    assert server.batch_api["create"] == 2 and server.batch_api.get("cancel", 0) == 0


@pytest.mark.parametrize("why", ["its status unreadable until due", "still pending long after due"])
@pytest.mark.parametrize("option", WIRES)
@pytest.mark.slow
def test_a_batch_given_up_for_good_is_cancelled(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, option: str, why: str
) -> None:
    """A batch given up (its requests go again in a new one) is cancelled, so that it is not paid for
    too should it end after all: LiteLLM's acancel_batch for OpenAI, POST .../cancel for Anthropic."""
    server.batch_delay = 3600
    _, name, _ = WIRES[option]
    base = server.openai_base if option == "gpt" else server.base_url
    settings = ModelSettings(name=name, api_base=base, api_key_env=None, batch_poll=0.05, max_retries=0)
    batcher = Batcher(settings, Stats(), None)
    monkeypatch.setattr(batch_module, "EXPIRY_GRACE", 1.0)

    async def go() -> None:
        request = batcher.wire.request(batcher, [{"role": "user", "content": "hi"}], {})
        batch_id = await batcher.wire.create(batcher, {"r1": request})
        due = time.time() - (0 if why.startswith("its status") else 5)  # due now, or long ago
        server.batches[batch_id]["expires_at"] = _when(due, option)
        server.batch_faults = {"retrieve": [None, *[Fault(500)] * 1000]}  # read once, then never
        with pytest.raises(BatchError, match=rf"batch {batch_id} .*; cancelled"):
            await asyncio.wait_for(batcher._wait(batch_id), 30)
        assert server.batches[batch_id].get("status", server.batches[batch_id].get("processing_status")) in (
            "cancelling",
            "canceling",
        )

    asyncio.run(go())
    assert server.batched == 0 and server.batch_api["cancel"] == 1


def _when(epoch: float, option: str) -> Any:
    """A batch's expires_at as each provider writes it: OpenAI's in epoch seconds, Anthropic's in RFC 3339."""
    return int(epoch) if option == "gpt" else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def test_a_message_batch_still_pending_long_after_it_was_due_counts_as_expired(server: FakeLLMServer) -> None:
    """LiteLLM reads any Anthropic processing_status but ended and canceling as in_progress: a batch that
    stays pending past its expires_at (and a grace) is taken for expired, not waited for forever."""
    server.batch_delay = 3600
    settings = ModelSettings(name="anthropic/claude-sonnet-4-5", api_base=server.base_url, batch_poll=0.05)
    batcher = Batcher(settings, Stats(), None)

    async def go() -> None:
        request = batcher.wire.request(batcher, [{"role": "user", "content": "hi"}], {})
        batch_id = await batcher.wire.create(batcher, {"r1": request})
        server.batches[batch_id]["expires_at"] = "2020-01-01T00:00:00Z"
        with pytest.raises(BatchError, match=rf"batch {batch_id} expired: still in_progress"):
            await batcher._wait(batch_id)

    asyncio.run(go())
    assert server.batched == 0 and server.batch_api["retrieve"] == 1


@pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier")  # LiteLLM's own types
def test_litellm_still_cannot_create_anthropic_batches(server: FakeLLMServer) -> None:
    """Why evalframe.batch creates Anthropic's Message Batches by hand (its one call not through LiteLLM):
    LiteLLM 1.106 retrieves them and reads their results, but has no way to create one
    (BerriAI/litellm#17265). When this fails, LiteLLM has one: use it in batch_wires.AnthropicWire."""
    import litellm

    with pytest.raises(litellm.BadRequestError, match="doesn't support custom_llm_provider=anthropic"):
        asyncio.run(
            litellm.acreate_batch(
                completion_window="24h",
                endpoint="/v1/chat/completions",
                input_file_id="file_1",
                custom_llm_provider="anthropic",
                model="anthropic/claude-sonnet-4-5",
                api_base=server.base_url,
                api_key=FAKE_KEY,
            )
        )
    assert server.batch_api == {} and server.requests == []


@pytest.mark.slow
@pytest.mark.parametrize("option", WIRES)
@pytest.mark.parametrize("expired", [False, True])
def test_a_run_killed_while_its_batch_is_pending_collects_it_on_resume(
    tmp_path: Path, expired: bool, option: str
) -> None:
    """Resumed, the run collects the batch it had sent; had the batch expired meanwhile (the provider
    gives up after 24 h), its requests go again in a new batch."""
    key_env, name, _ = WIRES[option]
    with FakeLLMServer(judge, batch_delay=600) as server:
        env = {
            **os.environ,
            key_env: FAKE_KEY,
            "EVALFRAME_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        overrides = [
            "scorer=answer_similarity",
            *fake_model(server, option),
            "tracking=none",
            "dataset.limit=6",
            "model.batch=true",
            "model.batch_poll=0.1",
        ]
        args = [sys.executable, "-m", "evalframe", *overrides]
        child = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while (
                time.monotonic() < deadline
                and child.poll() is None
                and not (list(tmp_path.glob(f"outputs/*/*/{BOOK}")) and server.batch_api.get("create") == 1)
            ):
                time.sleep(0.1)
            books = list(tmp_path.glob(f"outputs/*/*/{BOOK}"))
            if child.poll() is not None or not books:
                child.kill()
                _, err = child.communicate()
                raise AssertionError(f"no pending batch (exit {child.returncode}): {err.decode()[-3000:]}")
            [book] = books
            assert server.batch_api.get("create") == 1 and child.poll() is None  # pending: waiting
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        pending = json.loads(book.read_text().splitlines()[0])
        assert server.batched == 0  # the batch was never answered before the kill

        server.batch_delay = 0.2
        if expired:
            server.expire(pending["batch"])
        # Only the killed run needs a process of its own: the resume runs in process, where a warning
        # it gives is recorded here, not printed.
        with warnings.catch_warnings(record=True) as given:
            warnings.simplefilter("always")
            resumed = run_cli([*overrides, "resume=true"], tmp_path, {key_env: FAKE_KEY})
        assert resumed.returncode == 0, resumed.stderr
        assert f"batch {pending['batch']}" in resumed.stderr  # collected, and the console says how it went
        assert "Warning" not in resumed.stderr
        # As a user runs it: Python shows every warning but ResourceWarning (ignored unless asked for).
        assert [str(w.message) for w in given if not issubclass(w.category, ResourceWarning)] == []
        if expired:  # extraction sent again, then analyze
            assert server.batch_api["create"] == 3
            said = "expired" if option == "gpt" else f"{len(pending['requests'])} expired"
            assert f"batch {pending['batch']} ({name}): {said}" in resumed.stderr
        else:  # only the analyze step went as a new batch: the journaled extraction was not paid twice
            assert server.batch_api["create"] == 2 and server.batch_api.get("upload", 2) == 2
        assert sum(step_of(r) == "SemanticUnits" for r in server.requests) == len(pending["requests"])
        items = [json.loads(line) for line in (book.parent / "results.jsonl").read_text().splitlines()]
        assert sorted(i["id"] for i in items) == sorted({i["id"] for i in items}) and len(items) == 6


@pytest.mark.slow
@pytest.mark.parametrize("option", WIRES)
def test_the_readmes_batch_command_runs_as_written(
    server: FakeLLMServer, tmp_path: Path, option: str
) -> None:
    """As written, and with model=claude, as the README's next lines say."""
    from tests.conftest import run_cli

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Batch judging", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    [command] = [line for line in block.splitlines() if line.strip()]
    assert command.startswith("evalframe ") and "`model=claude model.batch=true` goes through" in section
    args = command.split()[1:]
    if option == "claude":
        args[args.index("model=gpt")] = "model=claude"
    base = server.openai_base if option == "gpt" else server.base_url
    here = [f"model.api_base={base}", "model.batch_poll=0.1", "dataset.limit=3", "tracking=none"]
    here += PRICE  # behind the server's api_base the price is the config's
    result = run_cli([*args, *here], cwd=tmp_path, env={WIRES[option][0]: FAKE_KEY})
    assert result.returncode == 0, result.stderr
    assert "requests in batches at the batch price; without batching $" in " ".join(result.stdout.split())
    assert server.batched > 0 and server.batched == len(server.requests)
    assert "submitted " in result.stderr and "completed, " in result.stderr  # the batch state on the console
