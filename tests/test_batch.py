"""Batch judging (`model.batch=true`): the judge's requests go through OpenAI's Batch API on the local
test server (file upload, batch create, retrieve, file content), with the same prompts, validation
and cache as normal calls, dependent steps as successive batches, the batch price, and batches
journaled as they are created so that a killed run collects them on resume."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalframe import pipeline
from evalframe.batch import BOOK
from evalframe.errors import ConfigError
from evalframe.summary import Summary
from tests.conftest import PRICE, compose, fake_model
from tests.fake_judge import judge
from tests.testserver import FakeLLMServer, FakeRequest, Fault

FAKE_KEY = "sk-evalframe-batch-test-93b1"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(judge, batch_delay=0.2) as s:
        yield s


def _batched(server: FakeLLMServer, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "scorer=answer_similarity",
        *fake_model(server),
        "tracking=none",
        "dataset.limit=6",
        f"cache.dir={tmp_path / 'cache'}",
        *extra,
    ]


def test_a_batched_run_scores_as_normal_calls_do_at_half_price(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    normal = pipeline.evaluate(compose(_batched(server, tmp_path, "cache.mode=off")), tmp_path / "n")[0]
    normal_requests = len(server.requests)
    server.reset()

    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05")
    result = pipeline.evaluate(compose(overrides), tmp_path / "b")[0]
    # Every request went in a batch, none as a normal call; the same ones as without batching.
    assert server.batched == len(server.requests) == normal_requests == result.stats.batched
    # extract (answer and ground truth together), then analyze: two successive batches
    assert server.batch_api["create"] == server.batch_api["upload"] == 2
    assert [i.scores["answer_similarity"].score for i in result.items] == [
        i.scores["answer_similarity"].score for i in normal.items
    ]
    assert result.stats.batch_cost == pytest.approx(result.stats.unbatched_cost / 2)  # gpt-4o-mini: half
    assert result.usage.cost == pytest.approx(normal.usage.cost / 2)
    assert "without batching $" in Summary.of(result).totals()
    book = [json.loads(line) for line in (tmp_path / "b" / BOOK).read_text().splitlines()]
    assert len(book) == 2 and all(entry["batch"].startswith("batch_") for entry in book)
    assert sum(len(entry["requests"]) for entry in book) == server.batched
    assert FAKE_KEY not in (tmp_path / "b" / BOOK).read_text()

    # The replies are cached: a second run (or a sweep) sends nothing.
    server.reset()
    again = pipeline.evaluate(compose(overrides), tmp_path / "again")[0]
    assert server.batch_api == {} and again.stats.calls == 0
    assert again.means == result.means


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
            f"cost — (no price for openai/gpt-4o-mini: set its input_cost_per_token, output_cost_per_token) "
            f"({result.stats.batched} requests in batches at the batch price; without batching —)"
        )
    )


def test_an_invalid_or_failed_batch_reply_goes_again_in_the_next_batch(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    seen: set[str] = set()

    def flaky(request: FakeRequest) -> Any:
        first = request.schema_name not in seen
        seen.add(str(request.schema_name))
        if first and request.schema_name == "SemanticUnits":
            return Fault(status=503)  # that line fails: sent again in the next batch
        if first and request.schema_name == "Analysis":
            return "not JSON"  # invalid: given back to the model in the next batch
        return judge(request)

    server.responder = flaky
    overrides = _batched(server, tmp_path, "model.batch=true", "model.batch_poll=0.05", "cache.mode=off")
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


@pytest.mark.parametrize("key", ["model", "target.model"])
def test_batch_needs_an_openai_model_and_says_so_before_any_call(
    server: FakeLLMServer, tmp_path: Path, key: str
) -> None:
    pick = "model=claude" if key == "model" else f"model@{key}=claude"
    claude = [pick, f"{key}.api_base={server.base_url}", f"{key}.batch=true"]
    target = ["target=llm"] if key == "target.model" else []
    config = compose(["scorer=answer_similarity", *target, "tracking=none", *claude])
    match = rf"^{key}.batch=true: .* anthropic/claude-sonnet-4-5 is not an OpenAI model \(LiteLLM cannot"
    with pytest.raises(ConfigError, match=match):
        pipeline.evaluate(config, tmp_path / "o")
    assert server.requests == [] and server.batch_api == {}


@pytest.mark.slow
def test_batch_on_anthropic_exits_2_with_one_line_before_any_call(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    from tests.conftest import run_cli

    args = ["scorer=answer_similarity", *fake_model(server, "claude"), "model.batch=true", "tracking=none"]
    result = run_cli(args, cwd=tmp_path, env={"ANTHROPIC_API_KEY": FAKE_KEY})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "model.batch=true" in line]
    assert "LiteLLM cannot create Anthropic's Message Batches" in line and "model=gpt" in line
    assert server.requests == [] and server.batch_api == {}


@pytest.mark.filterwarnings("ignore:Item .* is using the `ReadOnly` qualifier")  # LiteLLM's own types
def test_litellm_still_cannot_create_anthropic_batches(server: FakeLLMServer) -> None:
    """Why model=claude cannot batch: LiteLLM 1.106 retrieves Anthropic's Message Batches and reads their
    results, but has no way to create one. When this fails, LiteLLM has one: lift the refusal in
    ModelSettings.check_credentials and give evalframe.batch the Anthropic path."""
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
@pytest.mark.parametrize("expired", [False, True])
def test_a_run_killed_while_its_batch_is_pending_collects_it_on_resume(tmp_path: Path, expired: bool) -> None:
    """Resumed, the run collects the batch it had sent; had the batch expired meanwhile (the provider
    gives up after 24 h), its requests go again in a new batch."""
    with FakeLLMServer(judge, batch_delay=600) as server:
        env = {
            **os.environ,
            "OPENAI_API_KEY": FAKE_KEY,
            "EVALFRAME_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        }
        args = [
            sys.executable,
            "-m",
            "evalframe",
            "scorer=answer_similarity",
            *fake_model(server),
            "tracking=none",
            "dataset.limit=6",
            "model.batch=true",
            "model.batch_poll=0.1",
        ]
        child = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not list(tmp_path.glob(f"outputs/*/*/{BOOK}")) and time.monotonic() < deadline:
                time.sleep(0.1)
            [book] = list(tmp_path.glob(f"outputs/*/*/{BOOK}"))
            assert server.batch_api.get("create") == 1 and child.poll() is None  # pending: waiting
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        pending = json.loads(book.read_text().splitlines()[0])
        assert server.batched == 0  # the batch was never answered before the kill

        server.batch_delay = 0.2
        if expired:
            server.batches[pending["batch"]]["status"] = "expired"
        resume = [*args, "resume=true"]
        resumed = subprocess.run(resume, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr
        assert f"batch {pending['batch']}" in resumed.stderr  # collected, and the console says how it went
        assert "Warning" not in resumed.stderr
        if expired:  # extraction sent again, then analyze
            assert server.batch_api["create"] == 3
            assert f"batch {pending['batch']} (openai/gpt-4o-mini): expired" in resumed.stderr
        else:  # only the analyze step went as a new batch: the journaled extraction was not paid twice
            assert server.batch_api["create"] == 2 and server.batch_api["upload"] == 2
        assert server.count("SemanticUnits") == len(pending["requests"])
        items = [json.loads(line) for line in (book.parent / "results.jsonl").read_text().splitlines()]
        assert sorted(i["id"] for i in items) == sorted({i["id"] for i in items}) and len(items) == 6


@pytest.mark.slow
def test_the_readmes_batch_command_runs_as_written(server: FakeLLMServer, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Batch judging", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    [command] = [line for line in block.splitlines() if line.strip()]
    assert command.startswith("evalframe ")
    here = [f"model.api_base={server.openai_base}", "model.batch_poll=0.1", "dataset.limit=3"]
    here += ["tracking=none", *PRICE]  # behind the server's api_base the price is the config's
    result = run_cli([*command.split()[1:], *here], cwd=tmp_path, env={"OPENAI_API_KEY": FAKE_KEY})
    assert result.returncode == 0, result.stderr
    assert "requests in batches at the batch price; without batching $" in result.stdout.replace("\n", " ")
    assert server.batched > 0 and server.batched == len(server.requests)
    assert "submitted " in result.stderr and "completed, " in result.stderr  # the batch state on the console
