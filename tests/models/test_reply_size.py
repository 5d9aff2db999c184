"""A huge judge reply is stored once, or cut to its head and its size (`raw_reply_limit`): a runaway
judge must not turn a few items into hundreds of megabytes of results, MLflow artifacts and cache.
Real LiteLLM calls to the fake server, whose responders send the huge replies."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from evalframe.results.results_file import read_items
from evalframe.run import pipeline
from evalframe.run.rescore import replayed
from evalframe.tracking.log import prompts_log
from tests.conftest import compose, fake_model
from tests.fake_judge import judge
from tests.testserver import FakeLLMServer, FakeRequest

PAD = "y" * 300_000  # well over the default raw_reply_limit (20,000 characters)
MB5 = 5_000_000
EXPLANATION, REASON = "e" * MB5, "r" * MB5  # a runaway judge's valid replies, told apart by their letter


def first(matches: Any) -> dict[str, Any]:
    """The first ground-truth unit's match: the reply keys them by position ("0", "1", ...)."""
    return matches["0"] if isinstance(matches, dict) else matches[0]


def padded(request: FakeRequest) -> str | dict[str, Any]:
    """A valid analysis whose first explanation is 300,000 characters long."""
    reply = judge(request)
    if isinstance(reply, dict) and reply.get("matches"):
        first(reply["matches"])["explanation"] = PAD
    return reply


def runaway(request: FakeRequest) -> str | dict[str, Any]:
    """300,000 characters of prose, no JSON, for every judge request."""
    return judge(request) if request.schema is None else "The answer is " + "very " * 60_000


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def run(server: FakeLLMServer, out: Path, *extra: str) -> tuple[list[str], dict[str, Any]]:
    config = compose(
        ["scorer=answer_similarity", *fake_model(server), "dataset.limit=2", "tracking=none", *extra]
    )
    pipeline.evaluate(config, out)
    return (out / "results.jsonl").read_text().splitlines(), config


def test_a_huge_valid_reply_is_stored_once_parsed_and_replays(
    judge_server: FakeLLMServer, tmp_path: Path, key: None
) -> None:
    judge_server.responder = padded
    lines, config = run(judge_server, tmp_path / "run")
    for line in lines:
        # the parsed reply only: neither the raw text nor the scorer's details repeat it
        assert line.count(PAD) == 1
        [analysis] = [
            s for s in json.loads(line)["scores"]["answer_similarity"]["steps"] if s["step"] == "analyze"
        ]
        assert analysis["raw"] is None and first(analysis["reply"]["matches"])["explanation"] == PAD
    # A re-score replays the stored reply without asking the judge, with the same scores
    asked = judge_server.count()
    items = read_items(tmp_path / "run" / "results.jsonl")
    again, _ = pipeline.evaluate(config, tmp_path / "again", given=replayed(items, "the run"))
    assert judge_server.count() == asked
    assert [i.scores["answer_similarity"].score for i in again.items] == [
        i.scores["answer_similarity"].score for i in items
    ]


def test_a_huge_unusable_reply_keeps_its_head_and_its_size(
    judge_server: FakeLLMServer, tmp_path: Path, key: None
) -> None:
    judge_server.responder = runaway
    lines, _ = run(judge_server, tmp_path / "run", "raw_reply_limit=1000")
    for line in lines:
        item = json.loads(line)
        [step] = item["scores"]["answer_similarity"]["steps"][:1]
        assert step["error"] and step["raw"].startswith("The answer is very very")
        assert step["raw"].endswith("… [raw reply cut: 300014 characters, the first 1000 kept]")
        assert len(line) < 20_000  # was 300,000 characters per unusable step


def test_mlflow_prompts_log_cuts_long_messages(
    judge_server: FakeLLMServer, tmp_path: Path, key: None
) -> None:
    judge_server.responder = padded
    config = compose(
        ["scorer=answer_similarity", *fake_model(judge_server), "dataset.limit=1", "tracking=none"]
    )
    result, _ = pipeline.evaluate(config, tmp_path)
    [item] = result.items
    item.scores["answer_similarity"].steps[0].messages[-1]["content"] += PAD  # a prompt quoting a huge reply
    log = prompts_log(result, limit=5000)
    assert PAD not in log and "message cut: " in log


def huge(request: FakeRequest) -> str | dict[str, Any]:
    """Valid replies: an analysis whose first explanation is 5 MB, and a 5 MB prose reason."""
    reply = judge(request)
    if isinstance(reply, dict) and reply.get("matches"):
        first(reply["matches"])["explanation"] = EXPLANATION
    elif isinstance(reply, dict) and "reason" in reply:
        reply["reason"] = REASON
    return reply


def sizes(folder: Path) -> tuple[int, dict[str, int]]:
    """The bytes of the files under `folder`, and how many whole copies of each huge reply they hold."""
    files = [p.read_bytes() for p in folder.rglob("*") if p.is_file()]
    found = {t[0]: sum(f.count(t.encode()) for f in files) for t in (EXPLANATION, REASON)}
    return sum(len(f) for f in files), found


@pytest.mark.slow
def test_a_5_mb_valid_reply_is_stored_once_in_the_run_directory_mlflow_and_the_cache(
    judge_server: FakeLLMServer, tmp_path: Path, key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sink of a run with two 5 MB valid replies (reason=llm: the reason step's prompt quotes the
    whole analysis): the item's reason, its details, the next step's prompt, items.json, reasons.md,
    report.html and the traces' assessments show them cut; the validated replies hold them whole."""
    judge_server.responder = huge
    monkeypatch.chdir(tmp_path)  # MLflow puts a SQLite store's artifacts in ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = ["scorer=answer_similarity", "reason=llm", f"tracking.uri={uri}"]
    config = compose([*overrides, *fake_model(judge_server), "dataset.limit=1"])
    result, code = pipeline.evaluate(config, tmp_path / "run")
    assert code == 0 and result.run_id
    [item] = result.items
    replies = {s.step: s.reply or {} for s in item.scores["answer_similarity"].steps}
    assert first(replies["analyze"]["matches"])["explanation"] == EXPLANATION
    assert replies["reason"] == {"reason": REASON}

    both = 2 * MB5
    written, copies = sizes(tmp_path / "run")  # results.jsonl, run.json, report.html, plots
    assert copies == {"e": 1, "r": 1} and written < both + 500_000
    logged, copies = sizes(tmp_path / "mlruns")  # results.jsonl, items.json, prompts.jsonl, reasons.md, ...
    assert copies == {"e": 1, "r": 1} and logged < both + 500_000
    assert (tmp_path / "mlflow.db").stat().st_size < 3_000_000  # the traces' assessments: reasons cut
    cache = sqlite3.connect(tmp_path / "cache" / "replies.sqlite")  # the raw replies, once each
    [(cached,)] = cache.execute("SELECT sum(length(value)) FROM replies").fetchall()
    cache.close()
    assert both <= cached < both + 100_000
