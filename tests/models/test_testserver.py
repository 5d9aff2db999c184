"""The fake LLM server answers real LiteLLM calls in every protocol we use."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# Offline: LiteLLM otherwise downloads its price map / Anthropic beta-header config at import or call.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"] = "True"

import litellm
import pytest

from tests.conftest import default_sigint
from tests.testserver import (
    FakeLLMServer,
    FakeRequest,
    Fault,
    _example,
    echo_schema_responder,
)

ANSWER = {"answer": "ok", "n": 3}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["answer", "n"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "Ans", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "what is n?"}]


def _models(server: FakeLLMServer) -> dict[str, tuple[str, str]]:
    return {
        "openai": ("openai/gpt-4o-mini", server.openai_base),
        # haiku 3.5 gets the forced-tool form, sonnet 4.5 the native output_format form
        "anthropic-tool": ("anthropic/claude-3-5-haiku-20241022", server.base_url),
        "anthropic-native": ("anthropic/claude-sonnet-4-5", server.base_url),
        "gemini": ("gemini/gemini-2.0-flash", server.base_url),
        "ollama": ("ollama_chat/llama3.1", server.base_url),
    }


def _complete(model: str, api_base: str, **kw):
    return asyncio.run(
        litellm.acompletion(
            model=model,
            messages=MESSAGES,
            response_format=RESPONSE_FORMAT,
            api_base=api_base,
            api_key="sk-fake",
            timeout=kw.pop("timeout", 10),
            num_retries=0,
            max_retries=0,
            **kw,
        )
    )


@pytest.fixture
def server():
    with FakeLLMServer(responder=lambda req: ANSWER) as s:
        yield s


@pytest.mark.parametrize("kind", ["openai", "anthropic-tool", "anthropic-native", "gemini", "ollama"])
def test_structured_output_round_trip(server: FakeLLMServer, kind: str) -> None:
    model, base = _models(server)[kind]
    resp = _complete(model, base)
    assert json.loads(resp.choices[0].message.content) == ANSWER
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    assert server.count() == 1
    req = server.requests[0]
    assert req.protocol == kind.split("-")[0]
    assert req.schema is not None and req.schema["required"] == ["answer", "n"]
    assert req.messages[-1]["role"] == "user" and "what is n?" in req.messages[-1]["content"]
    assert any("be terse" in m["content"] for m in req.messages)
    # only OpenAI carries the json_schema name on the wire
    assert req.schema_name == ("Ans" if kind == "openai" else None)
    assert server.count("Ans") == (1 if kind == "openai" else 0)
    if kind == "anthropic-tool":  # pins which of LiteLLM's two Anthropic encodings each model gets
        assert req.body["tool_choice"] == {"type": "tool", "name": "json_tool_call"}
    if kind == "anthropic-native":
        assert req.body["output_format"]["type"] == "json_schema" and "tools" not in req.body


@pytest.mark.parametrize("kind", ["openai", "anthropic-tool", "gemini", "ollama"])
def test_invalid_json_is_passed_through_verbatim(server: FakeLLMServer, kind: str) -> None:
    server.responder = lambda req: '{"answer": "ok", '  # truncated on purpose
    model, base = _models(server)[kind]
    assert _complete(model, base).choices[0].message.content == '{"answer": "ok", '


def test_default_responder_echoes_schema() -> None:
    with FakeLLMServer() as s:
        resp = _complete("openai/gpt-4o-mini", s.openai_base)
    assert json.loads(resp.choices[0].message.content) == {"answer": "x", "n": 0}


def test_example_walks_refs_anyof_enums_arrays() -> None:
    schema = {
        "$defs": {"Item": {"type": "object", "properties": {"k": {"enum": ["b", "a"]}}, "required": ["k"]}},
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "flag": {"type": "boolean"},
            "optional": {"type": "string"},
        },
        "required": ["items", "maybe", "flag"],
    }
    assert _example(schema, schema) == {"items": [{"k": "b"}], "maybe": 0, "flag": False}
    req = FakeRequest("openai", "/", "m", [], None, None, [], {}, {})
    assert echo_schema_responder(req) == "ok"


def test_embeddings(server: FakeLLMServer) -> None:
    texts = ["the cat sat", "the cat sat", "The CAT sat!", "quantum chromodynamics"]
    resp = asyncio.run(
        litellm.aembedding(
            model="openai/text-embedding-3-small",
            input=texts,
            api_base=server.openai_base,
            api_key="sk-fake",
            timeout=10,
            max_retries=0,
        )
    )
    vecs = [d["embedding"] for d in resp.data]
    assert len(vecs) == 4 and all(len(v) == 16 for v in vecs)
    assert vecs[0] == vecs[1] == vecs[2]  # bag of lower-cased words
    assert math.isclose(sum(a * b for a, b in zip(vecs[0], vecs[0], strict=True)), 1.0)
    assert resp.usage.prompt_tokens > 0
    assert server.requests[0].protocol == "embeddings" and server.requests[0].inputs == texts


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (429, litellm.RateLimitError),
        (500, litellm.InternalServerError),
        (503, litellm.ServiceUnavailableError),
    ],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic-tool", "gemini", "ollama"])
def test_faults_raise_litellm_errors(server: FakeLLMServer, kind: str, status: int, exc: type) -> None:
    server.responder = lambda req: Fault(status=status, retry_after=0 if status == 429 else None)
    model, base = _models(server)[kind]
    with pytest.raises(exc):
        _complete(model, base)
    assert server.faults == 1 and server.count() == 0  # num_retries=0, max_retries=0: no retry


@pytest.mark.parametrize("kind", ["openai", "anthropic-tool", "gemini", "ollama"])
def test_delay_fault_times_out(server: FakeLLMServer, kind: str) -> None:
    server.responder = lambda req: Fault(status=200, delay=1.0, body=json.dumps({}))
    model, base = _models(server)[kind]
    with pytest.raises(litellm.Timeout):
        _complete(model, base, timeout=0.3)


def test_error_rate_is_seeded_and_counted() -> None:
    with FakeLLMServer(error_rate=1.0, error_statuses=(503,)) as s:
        with pytest.raises(litellm.ServiceUnavailableError):
            _complete("openai/gpt-4o-mini", s.openai_base)
        assert s.faults == 1
        s.reset()
        assert s.faults == 0 and s.count() == 0


def test_unknown_path_is_404(server: FakeLLMServer) -> None:
    import httpx

    r = httpx.post(server.base_url + "/nope", json={})
    assert r.status_code == 404 and "error" in r.json()


def test_latency_overlaps_across_concurrent_clients() -> None:
    async def burst(s: FakeLLMServer) -> list:
        calls = [
            litellm.acompletion(
                model="openai/gpt-4o-mini",
                messages=MESSAGES,
                response_format=RESPONSE_FORMAT,
                api_base=s.openai_base,
                api_key="sk-fake",
                timeout=10,
                num_retries=0,
                max_retries=0,
            )
            for _ in range(32)
        ]
        return await asyncio.gather(*calls)

    with FakeLLMServer(latency=0.3) as s:
        start = time.perf_counter()
        results = asyncio.run(burst(s))
        elapsed = time.perf_counter() - start
    assert len(results) == 32 and s.count("Ans") == 32
    assert elapsed < 3.0  # serial would be >= 9.6 s
    assert 2 <= s.peak_in_flight <= 32 and s.in_flight == 0  # overlapping, as the benchmark reports


@contextlib.contextmanager
def _server_cli(*args: str) -> Iterator[str]:
    """`python -m tests.testserver ARGS` as a user starts it; yields the URL it prints, and checks that
    Ctrl-C stops it cleanly."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.testserver", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().split()[4]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


@pytest.mark.slow
def test_cli_prints_base_url() -> None:
    with _server_cli("--port", "0") as url:
        assert url.startswith("http://127.0.0.1:")
        import httpx

        assert httpx.get(url + "/nope").status_code == 404


@pytest.mark.slow
def test_cli_constrained_answers_random_instances_of_the_schema() -> None:
    with _server_cli("--constrained", "--seed", "7") as url:
        replies = [
            json.loads(_complete("openai/gpt-4o-mini", url + "/v1").choices[0].message.content)
            for _ in range(20)
        ]
    assert all(set(r) == {"answer", "n"} and isinstance(r["n"], int) for r in replies)
    assert len({json.dumps(r) for r in replies}) > 10  # random, not one fixed example
