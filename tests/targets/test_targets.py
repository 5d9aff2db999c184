"""The python and http targets: from the command line and from code, against a real local HTTP service."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalframe import evaluate
from evalframe.data.rows import Row
from evalframe.errors import ConfigError, PromptError
from evalframe.targets import HTTPTarget, PythonTarget
from evalframe.targets.http import extract
from evalframe.targets.traced import FROM_TRACE
from tests.conftest import compose, run_cli, run_process, within
from tests.targets.conftest import CAPITALS, Call, Reply, Service

ROWS = [
    {"id": "fr", "input": "What is the capital of France?", "ground_truth": "Paris", "lang": "fr"},
    {"id": "de", "input": "What is the capital of Germany?", "ground_truth": "Berlin", "lang": "de"},
    {"id": "it", "input": "What is the capital of Italy?", "ground_truth": "Rome", "lang": "it"},
]
LENIENT = ["max_unscored_rate=1"]  # tests that make items fail on purpose: no exit code 4


def capital(question: str) -> str:
    return next((city for country, city in CAPITALS.items() if country in question), "I do not know")


def run_http(tmp_path: Path, target: HTTPTarget, rows: list[dict[str, Any]] = ROWS, **options: Any) -> Any:
    return evaluate(rows, "exact_match", target=target, output_dir=tmp_path / "run", **options)


# --- http --------------------------------------------------------------------------------------------


def test_http_target_posts_each_input_and_reads_the_answer(tmp_path: Path, service: Service) -> None:
    result = run_http(tmp_path, HTTPTarget(url=service.url))
    assert result.mean("exact_match") == 1.0
    assert sorted(c.body["input"] for c in service.calls) == sorted(r["input"] for r in ROWS)
    assert {c.path for c in service.calls} == {"/answer"}
    assert list(result.items["output"]) == ["Paris", "Berlin", "Rome"]
    step = result.result.items[0].target_step
    assert step is not None and step.attempts == 1 and json.loads(step.raw or "") == {"answer": "Paris"}


def test_http_body_template_nested_output_path_and_bearer_token(
    tmp_path: Path, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "tok-123")
    service.reply = lambda call: (
        200,
        {"choices": [{"message": {"content": capital(call.body["messages"][0]["content"])}}]},
        {},
    )
    target = HTTPTarget(
        url=service.url,
        body={
            "model": "mine",
            "messages": [{"role": "user", "content": "{{ input }}"}],
            "lang": "{{ row.lang }}",
            "stream": False,
        },
        output_path="choices.0.message.content",
        headers={"X-Team": "qa"},
        api_key_env="SERVICE_TOKEN",
    )
    result = run_http(tmp_path, target)
    assert result.mean("exact_match") == 1.0
    first = next(c for c in service.calls if c.body["lang"] == "fr")
    assert first.body == {
        "model": "mine",
        "messages": [{"role": "user", "content": ROWS[0]["input"]}],
        "lang": "fr",
        "stream": False,
    }
    assert first.headers["authorization"] == "Bearer tok-123" and first.headers["x-team"] == "qa"
    assert "tok-123" not in (tmp_path / "run" / "results.jsonl").read_text()


@pytest.mark.usefixtures("quick_retries")
@pytest.mark.slow
def test_rate_limits_and_server_errors_are_retried(tmp_path: Path, service: Service) -> None:
    seen: dict[str, int] = {}

    def flaky(call: Call) -> Reply:
        n = seen[call.body["input"]] = seen.get(call.body["input"], 0) + 1
        if n == 1:
            return 429, {"error": "slow down"}, {"Retry-After": "0"}
        if n == 2:
            return 503, {"error": "busy"}, {}
        return 200, {"answer": capital(call.body["input"])}, {}

    service.reply = flaky
    result = run_http(tmp_path, HTTPTarget(url=service.url, max_retries=2))
    assert result.mean("exact_match") == 1.0 and len(service.calls) == 3 * 3
    assert all(i.target_step is not None and i.target_step.attempts == 3 for i in result.result.items)


@pytest.mark.parametrize(("headers", "wait"), [({"Retry-After": "1"}, 1.0), ({}, 0.5)])
@pytest.mark.slow
def test_a_429_cools_the_service_down_without_using_the_retries(
    tmp_path: Path, service: Service, headers: dict[str, str], wait: float
) -> None:
    """The first request is refused: no request reaches the service until the wait it asked for (else
    the first backoff, 0.5 s) has passed, and the refused row is sent again although max_retries=0.
    Only the service's clock is read, and only "no sooner than" is asserted."""
    arrived: list[float] = []

    def refuse_the_first(call: Call) -> Reply:
        arrived.append(time.monotonic())
        if len(arrived) == 1:
            return 429, {"error": "slow down"}, dict(headers)
        return 200, {"answer": capital(call.body["input"])}, {}

    service.reply = refuse_the_first
    result = run_http(tmp_path, HTTPTarget(url=service.url, max_retries=0))
    assert result.mean("exact_match") == 1.0 and len(arrived) == len(ROWS) + 1
    refused, *later = arrived
    assert all(at - refused >= wait for at in later)
    assert sorted(i.target_step.attempts for i in result.result.items if i.target_step) == [1, 1, 2]
    assert result.result.stats.rate_limited == 1 and result.result.stats.limits["target"].waited > 0


@pytest.mark.slow
def test_a_service_asking_to_wait_31_years_costs_each_row_its_deadline(
    tmp_path: Path, service: Service
) -> None:
    """The judge's rule for the service too (issue 27): its cool-down lasts no longer than a request's
    deadline, timeout × (1 + max_retries) = 2 s, and each row ends unscored with the 429, not a hang."""
    service.reply = lambda call: (429, {"error": "slow down"}, {"Retry-After": "1000000000"})
    target = HTTPTarget(url=service.url, timeout=1, max_retries=1)
    started = time.monotonic()
    result = within(60, lambda: run_http(tmp_path, target, overrides=LENIENT))
    assert time.monotonic() - started < 2 + 5  # the deadline, and the run's own work
    assert all("HTTP 429" in error for error in result.items["exact_match/error"])
    assert len(service.calls) <= 2 * len(ROWS)


def test_failures_leave_the_item_unscored_with_a_reason(tmp_path: Path, service: Service) -> None:
    def broken(call: Call) -> Reply:
        question = call.body["input"]
        if "France" in question:
            return 500, {"error": "boom"}, {}  # stays broken: retried, then unscored
        if "Germany" in question:
            return 404, {"error": "no such agent"}, {}  # not retried
        return 200, {"result": "Rome", "meta": {}}, {}  # no `answer` key

    service.reply = broken
    result = run_http(tmp_path, HTTPTarget(url=service.url, max_retries=1), overrides=LENIENT)
    errors = dict(zip(result.items["id"], result.items["exact_match/error"], strict=True))
    assert "HTTP 500" in errors["fr"] and "after 2 attempt(s)" in errors["fr"]
    assert "HTTP 404" in errors["de"] and "no such agent" in errors["de"]
    assert "no 'answer' at the top level (keys there: result, meta)" in errors["it"]
    assert len([c for c in service.calls if "France" in c.body["input"]]) == 2
    assert len([c for c in service.calls if "Germany" in c.body["input"]]) == 1
    assert result.summaries["exact_match"].unscored == 3
    assert result.exit_code == 0  # max_unscored_rate=1 allows it


def test_a_plain_text_service_and_a_non_json_reply(tmp_path: Path, service: Service) -> None:
    service.reply = lambda call: (200, capital(call.body["input"]), {"Content-Type": "text/plain"})
    text = run_http(tmp_path / "a", HTTPTarget(url=service.url, output_path=None))
    assert text.mean("exact_match") == 1.0
    strict = run_http(tmp_path / "b", HTTPTarget(url=service.url), overrides=LENIENT)
    assert "the reply is not JSON (text/plain)" in strict.items["exact_match/error"][0]
    assert "output_path=null" in strict.items["exact_match/error"][0]


def test_timeouts_are_retried_then_reported(tmp_path: Path, service: Service) -> None:
    def slow(call: Call) -> Reply:
        time.sleep(0.5)
        return 200, {"answer": "late"}, {}

    service.reply = slow
    target = HTTPTarget(url=service.url, timeout=0.1, max_retries=1)
    result = run_http(tmp_path, target, rows=ROWS[:1], overrides=LENIENT)
    assert "no reply from" in result.items["exact_match/error"][0]
    assert "target.timeout=0.1" in result.items["exact_match/error"][0]
    assert len(service.calls) == 2


def test_an_http_service_answering_a_cut_emoji_leaves_that_item_unscored(
    tmp_path: Path, service: Service
) -> None:
    def half_an_emoji(call: Call) -> Reply:
        answer = capital(call.body["input"])
        return 200, {"answer": answer + ("\ud83d" if answer == "Paris" else "")}, {}

    service.reply = half_an_emoji  # sent as JSON's "\\ud83d" escape, read back as a lone surrogate
    result = run_http(tmp_path, HTTPTarget(url=service.url), overrides=LENIENT)
    items = result.items.set_index("id")
    assert items.loc["fr", "exact_match/error"] == (
        "target: the reply's answer is not valid Unicode text (a lone surrogate, '\\ud83d', at character 5); "
        "the service must send whole characters"
    )
    assert items.loc["de", "exact_match/score"] == 1.0 and items.loc["it", "exact_match/score"] == 1.0
    assert len((tmp_path / "run" / "results.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def test_a_refused_credential_stops_the_run(tmp_path: Path, service: Service) -> None:
    service.reply = lambda call: (401, {"error": "bad token"}, {})
    with pytest.raises(ConfigError, match=r"refused the request \(HTTP 401.*target\.api_key_env"):
        run_http(tmp_path, HTTPTarget(url=service.url))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "localhost:8000/answer"}, r"not an http\(s\) URL"),
        ({"url": "ftp://example.org/x"}, r"not an http\(s\) URL"),
        ({"url": "http://127.0.0.1:1/x", "method": "GET"}, "use POST, PUT or PATCH"),
    ],
)
def test_bad_http_settings_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HTTPTarget(**options)


def test_http_errors_found_before_any_request(tmp_path: Path, service: Service) -> None:
    with pytest.raises(ConfigError, match="NO_SUCH_TOKEN is not set"):
        run_http(tmp_path, HTTPTarget(url=service.url, api_key_env="NO_SUCH_TOKEN"))
    with pytest.raises(PromptError, match=r"target\.body\.q: .*'dict object' has no attribute 'topic'"):
        run_http(tmp_path, HTTPTarget(url=service.url, body={"q": "{{ row.topic }}"}))
    with pytest.raises(PromptError, match=r"target\.body\.q="):
        HTTPTarget(url=service.url, body={"q": "{{ input "})
    assert service.calls == []


def test_output_path_walks_objects_and_lists() -> None:
    reply = {"choices": [{"message": {"content": "hi"}}], "n": 1}
    assert extract(reply, "choices.0.message.content") == "hi"
    assert extract(reply, None) == reply
    with pytest.raises(Exception, match="a list of 1 at choices, and '3' is not an index"):
        extract(reply, "choices.3.message")
    with pytest.raises(Exception, match="has int 1 at n, not an object"):
        extract(reply, "n.value")


# --- python -----------------------------------------------------------------------------------------


def test_python_target_exceptions_none_and_non_string_answers(tmp_path: Path) -> None:
    def agent(question: str) -> Any:
        if "France" in question:
            raise RuntimeError("the agent fell over")
        if "Germany" in question:
            return None
        return ["Rome"]  # a list; a mapping is the answer with what the app retrieved (test_handed_fields)

    result = evaluate(ROWS, "exact_match", target=agent, output_dir=tmp_path, overrides=LENIENT)
    items = result.items.set_index("id")
    assert "agent raised RuntimeError: the agent fell over at " in items.loc["fr", "exact_match/error"]
    raised_at = agent.__code__.co_firstlineno + 2  # the `raise` line
    assert items.loc["fr", "exact_match/error"].endswith(f"test_targets.py:{raised_at}")
    assert "returned None; return the answer" in items.loc["de", "exact_match/error"]
    assert items.loc["it", "output"] == '["Rome"]'  # JSON text, as non-string data values
    assert pd.isna(items.loc["it", "exact_match/error"])
    assert result.summaries["exact_match"].unscored == 2


def test_python_target_pass_row_and_timeout(tmp_path: Path) -> None:
    def by_language(question: str, row: dict[str, Any]) -> str:
        if row["lang"] == "it":
            time.sleep(1)
        return {"fr": "Paris", "de": "Berlin"}.get(row["lang"], "?")

    target = PythonTarget(by_language, pass_row=True, timeout=0.3)
    result = evaluate(ROWS, "exact_match", target=target, output_dir=tmp_path, overrides=LENIENT)
    items = result.items.set_index("id")
    assert items.loc["fr", "exact_match/score"] == 1.0 and items.loc["de", "exact_match/score"] == 1.0
    assert "did not return within target.timeout=0.3 s" in items.loc["it", "exact_match/error"]


def test_python_target_answering_a_cut_emoji_leaves_that_item_unscored_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """A lone surrogate (half an emoji) cannot be written as UTF-8: checked at the door, as a dataset's
    text is, it is that item's target error, and every other item is scored and stored."""

    def agent(question: str) -> Any:
        if "France" in question:
            return "Paris \ud83d"
        if "Germany" in question:
            return {"output": "Berlin", "contexts": ["Berlin is \udc00"]}
        if "Italy" in question:
            raise RuntimeError("broken \ud83d")  # an error message is stored too
        return "Rome"

    rows = [*ROWS, {"id": "ok", "input": "Capital?", "ground_truth": "Rome"}]
    result = evaluate(rows, "exact_match", target=agent, output_dir=tmp_path, overrides=LENIENT)
    items = result.items.set_index("id")
    assert items.loc["fr", "exact_match/error"].endswith(
        "returned text that cannot be stored: its answer is not valid Unicode text (a lone surrogate, "
        "'\\ud83d', at character 6); return whole characters"
    )
    assert "its answer.contexts[0] is not valid Unicode text" in items.loc["de", "exact_match/error"]
    assert "raised RuntimeError: broken \\ud83d at " in items.loc["it", "exact_match/error"]
    assert items.loc["ok", "exact_match/score"] == 1.0
    saved = (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(saved) == 4 and json.loads((tmp_path / "run.json").read_text())["status"] != "running"


def test_python_target_signature_and_path_are_checked_up_front(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"called as fn\(input\), or as fn\(input, row\) with target"):
        PythonTarget(lambda: "x")
    with pytest.raises(ConfigError, match=r"called as fn\(input, row\)"):
        PythonTarget(capital, pass_row=True)
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_module'.*PYTHONPATH"):
        PythonTarget("no_such_module:answer")
    with pytest.raises(ConfigError, match=r"'tests\.targets\.test_targets' has no 'nope'"):
        PythonTarget("tests.targets.test_targets:nope")
    with pytest.raises(ConfigError, match="is a list, not a function"):
        PythonTarget("tests.targets.test_targets:ROWS")
    with pytest.raises(ConfigError, match="name a function as module:function"):
        PythonTarget("answer")
    assert PythonTarget("tests.targets.test_targets.capital").fn is capital
    assert PythonTarget("tests.targets.test_targets:capital").name == "tests.targets.test_targets:capital"


def test_every_target_option_composes() -> None:
    python = compose(["target=python", "target.fn=mypkg.agent:answer"])["target"]
    assert python == {
        "_target_": "evalframe.targets.PythonTarget",
        "fn": "mypkg.agent:answer",
        "pass_row": False,
        "timeout": None,
        "provides": [],
        "from_trace": FROM_TRACE,  # a traced function's trace read by dataset=mlflow_traces' selectors
        # a simulated user (conf/simulate_base.yaml): off until user_model is set
        "simulate": {"user_model": None, "max_turns": 5, "first_message": None, "prompt": None},
    }
    assert (
        PythonTarget(fn=str.upper).from_trace.keys() == FROM_TRACE.keys()
    )  # the API's default is the YAML's
    http = compose(["target=http", "target.url=http://127.0.0.1:9/a", "target.output_path=choices.0.text"])
    assert http["target"]["body"] is None and http["target"]["method"] == "POST"
    assert http["target"]["output_path"] == "choices.0.text"
    HTTPTarget(**{k: v for k, v in http["target"].items() if k != "_target_"})  # the YAML's keys build it


def test_the_readmes_http_body_override() -> None:
    chat = compose(
        [
            "target=http",
            "target.url=https://api.example.com/v1/chat",
            'target.body={model: my-agent, messages: [{role: user, content: "{{ input }}"}], '
            'user: "{{ row.id }}"}',
        ]
    )["target"]
    target = HTTPTarget(**{k: v for k, v in chat.items() if k != "_target_"})
    row = Row("q1", "Capital of France?", None, None, 1, {"id": "q1"})
    assert target.request_body(row) == {
        "model": "my-agent",
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "user": "q1",
    }


# --- from the command line --------------------------------------------------------------------------

AGENT = """
import asyncio


async def answer(question):
    await asyncio.sleep(0)
    return {"France": "Paris", "Germany": "Berlin"}.get(question.split()[-1].rstrip("?"), "?")
"""


@pytest.mark.slow
def test_cli_python_target_imports_the_users_module_from_pythonpath(tmp_path: Path) -> None:
    code = tmp_path / "code" / "mypkg"
    code.mkdir(parents=True)
    (code / "__init__.py").write_text("")
    (code / "agent.py").write_text(AGENT)
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["dataset=jsonl", f"dataset.path={data}", "scorer=exact_match", "tracking=none", *LENIENT]
    path = os.pathsep.join([str(tmp_path / "code"), os.environ.get("PYTHONPATH", "")])
    ok = run_process([*args, "target=python", "target.fn=mypkg.agent:answer"], tmp_path, {"PYTHONPATH": path})
    assert ok.returncode == 0, ok.stderr
    [saved] = tmp_path.glob("outputs/*/*/results.jsonl")
    outputs = {i["id"]: i["output"] for i in map(json.loads, saved.read_text().splitlines())}
    assert outputs == {"fr": "Paris", "de": "Berlin", "it": "?"}

    bad = run_process([*args, "target=python", "target.fn=mypkg.agent:answr"], tmp_path, {"PYTHONPATH": path})
    assert bad.returncode == 2 and "'mypkg.agent' has no 'answr'" in bad.stderr
    missing = run_process([*args, "target=python"], tmp_path)
    assert missing.returncode == 2 and "target.fn is required" in missing.stderr


SLEEPY = """
import time


def answer(question):
    time.sleep(3600)  # an agent stuck for an hour
    return "never"
"""


@pytest.mark.slow
def test_a_function_stuck_past_its_timeout_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """Python cannot stop a thread: the stuck call is given up, and the process still ends with its
    work (a worker thread joined at exit would hold a CI job for the hour)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "sleepy.py").write_text(SLEEPY)
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    args = ["dataset=jsonl", f"dataset.path={data}", "scorer=exact_match", "tracking=none", *LENIENT]
    target = ["target=python", "target.fn=sleepy:answer", "target.timeout=0.5"]
    path = os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])
    started = time.monotonic()
    done = run_process([*args, *target], tmp_path, {"PYTHONPATH": path}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    [saved] = tmp_path.glob("outputs/*/*/results.jsonl")
    errors = [i["scores"]["exact_match"]["error"] for i in map(json.loads, saved.read_text().splitlines())]
    assert errors == ["target: sleepy:answer did not return within target.timeout=0.5 s"] * 2


@pytest.mark.slow
def test_cli_http_target(tmp_path: Path, service: Service) -> None:
    service.reply = lambda call: (200, {"answer": capital(call.body["question"])}, {})
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    result = run_cli(
        [
            "dataset=jsonl",
            f"dataset.path={data}",
            "scorer=exact_match",
            "tracking=none",
            "target=http",
            f"target.url={service.url}",
            "target.body={question: '{{ input }}', lang: '{{ row.lang }}'}",
            "target.output_path=answer",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(c.body["lang"] for c in service.calls) == ["de", "fr", "it"]
