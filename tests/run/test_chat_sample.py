"""The bundled conversation sample (dataset=chat_sample) holds what its config promises, and the same
conversations written as DeepEval's goldens (one JSON array) and as RAGAS' multi-turn samples (JSONL)
are the same items: identical rows, and a run on either after a run on the OpenAI form is answered by
the judge cache, with 0 requests (issue 25's first done-when, for the file forms): the judges are real
conversation judges, so what the cache keys is the whole conversation as a judge reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalframe.data.conversations import transcript
from evalframe.data.rows import Row, load_rows, resolve_path
from tests.conftest import compose, fake_model, run_cli
from tests.conversation_oracle import Oracle
from tests.scripted import ScriptedModel

CATEGORIES = {
    "remembered fact",
    "forgotten fact",
    "out of role",
    "unfinished request",
    "yes please follow-up",
    "tool calls",
    "rag contexts",
    "clean success",
    "goal not reached",
    "irrelevant turn",
}
PER_TURN = ("knowledge_retention", "role_adherence", "turn_relevancy")  # intended: the turns that fail
JUDGES = {*PER_TURN, "conversation_completeness", "goal_accuracy"}
# What a row is, whichever form it was read from (its `extra` is the record as written, which differs).
SAME = ("id", "input", "output", "ground_truth", "messages", "expected_outcome", "chatbot_role", "scenario")


def sample() -> list[Row]:
    return load_rows(compose(["dataset=chat_sample"])["dataset"])


def records() -> list[dict[str, Any]]:
    path = resolve_path("bundled:chat_sample.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_chat_sample_holds_what_it_promises() -> None:
    rows = sample()
    assert len(rows) >= 20 and len({r.id for r in rows}) == len(rows)
    assert {str(r.extra["category"]) for r in rows} == CATEGORIES
    for row in rows:
        chat = row.messages
        assert chat is not None and row.expected_outcome and row.chatbot_role and row.scenario, row.id
        assistant = [t.number for t in chat.assistant_turns]
        assert 2 <= len(assistant) <= 6, row.id
        # it ends on the assistant's words, which single-turn scorers judge as the output
        assert chat.turns[-1].role == "assistant" and row.output == chat.turns[-1].content != "", row.id
        assert row.input == chat.user_turns[0].content, row.id
        intended, notes = row.extra["intended"], str(row.extra["notes"])
        assert set(intended) <= JUDGES and {"goal_accuracy", "role_adherence"} <= set(intended), row.id
        for judge in set(PER_TURN) & set(intended):
            for number in intended[judge]:  # a failing turn is an assistant turn the notes name
                assert number in assistant and re.search(rf"\bturns? [\d, and]*\b{number}\b", notes), (
                    row.id,
                    judge,
                    number,
                )
        assert 0 <= intended.get("conversation_completeness", 0) <= 1 and intended["goal_accuracy"] in (0, 1)
    # what the judges are to tell apart is there: failing and passing turns of each per-turn judge,
    # goals reached and missed, tool calls and retrieved contexts on assistant turns, system messages
    for judge in PER_TURN:
        found = [r.extra["intended"].get(judge) for r in rows]
        assert any(found) and [] in found, judge
    assert {r.extra["intended"]["goal_accuracy"] for r in rows} == {0, 1}
    turns = [t for r in rows for t in r.messages or ()]
    assert sum(1 for t in turns if t.tool_calls) >= 4 and sum(1 for t in turns if t.contexts) >= 3
    assert any(t.role == "system" for t in turns) and any(t.role == "tool" for t in turns)
    # the fixed case: 4 assistant turns, 1 forgotten fact
    fixed = next(r for r in rows if r.id == "forgotten-vegetarian")
    assert fixed.messages and len(fixed.messages.assistant_turns) == 4
    assert fixed.extra["intended"]["knowledge_retention"] == [6]


def test_every_tool_call_is_answered_by_its_tool_message() -> None:
    """OpenAI's chat shape as its API would take it: each call id answered by a tool message after it."""
    for record in records():
        asked: list[str] = []
        for message in record["messages"]:
            asked += [c["id"] for c in message.get("tool_calls", [])]
            if message["role"] == "tool":
                assert message["tool_call_id"] in asked, record["id"]
                asked.remove(message["tool_call_id"])
            elif message["role"] != "assistant":
                assert not asked, record["id"]  # no user turn between a call and its answer
        assert not asked, record["id"]


# --- the same conversations as DeepEval goldens and RAGAS samples ----------------------------------
# Converters written here, from the documented shapes, not shipped: evalframe reads the forms, it does not
# write them.


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}
        for c in message.get("tool_calls", [])
    ]


def deepeval(record: dict[str, Any]) -> dict[str, Any]:
    """A ConversationalGolden: `name`, `turns` (role, content, retrieval_context, tools_called with
    input_parameters), scenario, expected_outcome, and chatbot_role (the test case's field); the rest in
    additional_metadata. DeepEval's Turn has roles user and assistant only: system and tool messages
    keep their roles here, as evalframe reads them in any form."""
    turns = []
    for message in record["messages"]:
        turn: dict[str, Any] = {"role": message["role"], "content": message["content"] or ""}
        if message.get("tool_calls"):
            turn["tools_called"] = [
                {"name": c["name"], "input_parameters": c["args"]} for c in _calls(message)
            ]
        if "contexts" in message:
            turn["retrieval_context"] = message["contexts"]
        turns.append(turn)
    golden = {"name": record["id"], "turns": turns}
    golden |= {k: record[k] for k in ("scenario", "expected_outcome", "chatbot_role")}
    return golden | {"additional_metadata": {k: record[k] for k in ("category", "notes", "intended")}}


RAGAS_TYPES = {"system": "system", "user": "human", "assistant": "ai", "tool": "tool"}


def ragas(record: dict[str, Any]) -> dict[str, Any]:
    """A MultiTurnSample: `user_input` (messages typed human, ai or tool; an AI message's tool_calls with
    name and args) and `reference` (the outcome agent_goal_accuracy compares with); id, chatbot_role and
    scenario as extra columns. RAGAS' messages have no retrieved contexts: an AI message keeps
    evalframe's `contexts` key, which the reader takes in any form."""
    messages = []
    for message in record["messages"]:
        typed: dict[str, Any] = {"type": RAGAS_TYPES[message["role"]], "content": message["content"] or ""}
        if message.get("tool_calls"):
            typed["tool_calls"] = _calls(message)
        if "contexts" in message:
            typed["contexts"] = message["contexts"]
        messages.append(typed)
    extra = {k: record[k] for k in ("id", "chatbot_role", "scenario", "category", "notes")}
    return {"user_input": messages, "reference": record["expected_outcome"], **extra}


def forms(folder: Path) -> dict[str, list[str]]:
    """The overrides that read each form, its file written to `folder`."""
    folder.mkdir(exist_ok=True)
    goldens, samples = folder / "goldens.json", folder / "samples.jsonl"
    goldens.write_text(json.dumps([deepeval(r) for r in records()], ensure_ascii=False, indent=1))
    samples.write_text("".join(json.dumps(ragas(r), ensure_ascii=False) + "\n" for r in records()))
    return {
        "openai": ["dataset=chat_sample"],
        "deepeval": [
            "dataset=chat_sample",
            f"dataset.path={goldens}",
            "dataset.format=json",
            "dataset.columns.messages=turns",
            "dataset.columns.id=name",
        ],
        "ragas": [
            "dataset=chat_sample",
            f"dataset.path={samples}",
            "dataset.columns.messages=user_input",
            "dataset.columns.expected_outcome=reference",
        ],
    }


def test_the_three_forms_are_the_same_items(tmp_path: Path) -> None:
    read = {name: load_rows(compose(overrides)["dataset"]) for name, overrides in forms(tmp_path).items()}
    items = {name: [tuple(getattr(r, f) for f in SAME) for r in rows] for name, rows in read.items()}
    assert items["openai"] == items["deepeval"] == items["ragas"]
    assert len(items["openai"]) == len(sample())
    # what a judge reads of a conversation is the same text, tool calls and contexts alike
    texts = {name: [transcript(r.messages) for r in rows if r.messages] for name, rows in read.items()}
    assert texts["openai"] == texts["deepeval"] == texts["ragas"]
    assert [[t.contexts for t in r.messages or ()] for r in read["ragas"]] == [
        [t.contexts for t in r.messages or ()] for r in read["openai"]
    ]


@pytest.mark.slow  # three whole runs in process, 126 judge requests: about 5-7 s on 2 shared cores
def test_a_second_and_third_form_are_answered_by_the_judge_cache(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """Real conversation judges (their transcript of the whole conversation, and per-turn windows), so
    what is cached is what a judge reads of each conversation: the DeepEval and RAGAS forms after the
    OpenAI form send 0 requests and get the same scores, which are the sample's intended ones."""
    oracle = Oracle.of(sample())
    scripted.responder = oracle
    common = ["scorer=[knowledge_retention,turn_relevancy]", *fake_model(scripted), "tracking=none"]
    requests, scores = {}, {}
    for name, overrides in forms(tmp_path / "forms").items():  # openai first: it fills the cache
        scripted.reset()
        cwd = tmp_path / name
        cwd.mkdir()
        done = run_cli([*common, *overrides], cwd=cwd)
        assert done.returncode == 0, done.stderr
        requests[name] = scripted.count()
        [results] = cwd.glob("outputs/*/*/results.jsonl")
        lines = [json.loads(line) for line in results.read_text().splitlines()]
        scores[name] = {i["id"]: {k: s["score"] for k, s in i["scores"].items()} for i in lines}
    rows = sample()
    turns = sum(len(r.messages.assistant_turns) for r in rows if r.messages)
    assert requests == {"openai": len(rows) + turns, "deepeval": 0, "ragas": 0}  # 1 + 1 per turn (window)
    assert scores["openai"] == scores["deepeval"] == scores["ragas"] and len(scores["openai"]) == len(rows)
    for row in rows:  # the oracle's verdicts came back to the right items and turns
        assert row.messages is not None
        for judge in ("knowledge_retention", "turn_relevancy"):
            failing = row.extra["intended"].get(judge, [])
            intended = 1 - len(failing) / len(row.messages.assistant_turns)
            assert scores["openai"][row.id][judge] == pytest.approx(intended), (row.id, judge)
    assert {s["knowledge_retention"] for s in scores["openai"].values()} >= {1.0, 0.75, 0.5}
