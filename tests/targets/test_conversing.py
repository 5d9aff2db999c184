"""Targets over conversations: a recorded conversation's user turns replayed to target=python, llm and
http, each assistant turn regenerated from the conversation so far (the target's own earlier answers,
never the recorded ones); and a simulated user (the scripted model) talking to a python bot until its
scenario is done or max_turns, each conversation stored and judged again later at no target call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import scripted as scripted_model
from tests.conftest import run_cli
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.targets.conftest import Service
from tests.targets.test_targets import LENIENT
from tests.testserver import FakeRequest

SYSTEM = {"role": "system", "content": "You take pizza orders."}
# Two recorded chats (their assistant turns are what a replay regenerates) and a plain question.
CHATS: list[dict[str, Any]] = [
    {
        "id": "c1",
        "turns": [
            SYSTEM,
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "recorded 1"},
            {"role": "user", "content": "a margherita"},
            {"role": "assistant", "content": "recorded 2"},
            {"role": "user", "content": "that is all"},
            {"role": "assistant", "content": "recorded 3"},
        ],
    },
    {  # DeepEval's shape, a tool call and its result, and no answer yet to the last user turn
        "id": "c2",
        "turns": [
            {"role": "user", "content": "status of order 7?"},
            {
                "role": "assistant",
                "content": "",
                "tools_called": [{"name": "lookup", "input_parameters": {"n": 7}}],
            },
            {"role": "tool", "content": "baking"},
            {"role": "assistant", "content": "recorded: it is baking"},
            {"role": "user", "content": "thanks"},
        ],
    },
    {"id": "q", "input": "plain question", "turns": None},
]
asked: list[tuple[str, list[dict[str, Any]] | None]] = []  # what bot() was called with


def bot(question: str, messages: list[dict[str, Any]] | None = None) -> str:
    """Its answer holds its own previous answer, so a test sees which history it was given."""
    asked.append((question, messages))
    if messages is None:
        return f"plain: {question}"
    said = [m["content"] for m in messages if m["role"] == "assistant"]
    users = sum(m["role"] == "user" for m in messages)
    return f"A{users}[{said[-1] if said else ''}]"


def write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows))
    return path


def saved(tmp_path: Path, pattern: str = "outputs/*/*/results.jsonl") -> dict[str, dict[str, Any]]:
    [journal] = sorted(tmp_path.glob(pattern))[-1:]
    return {i["id"]: i for i in map(json.loads, journal.read_text().splitlines())}


def replay_args(path: Path) -> list[str]:
    # ++: conf/dataset_base.yaml may or may not list the conversation columns yet (issue 25, item 1)
    return ["dataset=jsonl", f"dataset.path={path}", "++dataset.columns.messages=turns", "tracking=none"]


def texts(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in records]


# --- replay ------------------------------------------------------------------------------------------


def test_python_replay_regenerates_every_assistant_turn_from_its_own_history(tmp_path: Path) -> None:
    asked.clear()
    rows = [
        {**r, "ground_truth": g} for r, g in zip(CHATS, ["A3[A2[A1[]]]", "A2[A1[]]", "plain: x"], strict=True)
    ]
    done = run_cli(
        [
            *replay_args(write(tmp_path, rows)),
            "scorer=exact_match",
            "target=python",
            f"target.fn={__name__}:bot",
            *LENIENT,
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    items = saved(tmp_path)
    # The last regenerated answer is the output; each answer was made from the bot's own earlier ones.
    assert {i: item["output"] for i, item in items.items()} == {
        "c1": "A3[A2[A1[]]]",
        "c2": "A2[A1[]]",
        "q": "plain: plain question",
    }
    assert items["c1"]["scores"]["exact_match"]["score"] == 1.0
    # The new conversation is the item's: system and user turns kept, every assistant turn the bot's,
    # the recorded tool turn (part of a recorded answer) gone; in the step's reply and the record.
    c1 = [
        ("system", SYSTEM["content"]),
        ("user", "hi"),
        ("assistant", "A1[]"),
        ("user", "a margherita"),
        ("assistant", "A2[A1[]]"),
        ("user", "that is all"),
        ("assistant", "A3[A2[A1[]]]"),
    ]
    assert texts(items["c1"]["target_step"]["reply"]["messages"]) == c1
    assert texts(items["c1"]["record"]["messages"]) == c1
    assert texts(items["c2"]["record"]["messages"]) == [
        ("user", "status of order 7?"),
        ("assistant", "A1[]"),
        ("user", "thanks"),
        ("assistant", "A2[A1[]]"),
    ]
    assert items["c2"]["record"]["turns"][3]["content"] == "recorded: it is baking"  # the dataset's, kept
    # One call per user turn, each with the conversation so far ending in that turn (its text = input).
    calls = {q: m for q, m in asked}
    assert len(asked) == 3 + 2 + 1
    assert calls["plain question"] is None
    assert texts(calls["that is all"] or []) == c1[:-1]
    assert texts(calls["thanks"] or []) == [
        ("user", "status of order 7?"),
        ("assistant", "A1[]"),
        ("user", "thanks"),
    ]


def test_a_function_without_a_messages_parameter_is_named_before_any_call(tmp_path: Path) -> None:
    done = run_cli(
        [
            *replay_args(write(tmp_path, CHATS[:1])),
            "scorer=exact_match",
            "target=python",
            "target.fn=tests.targets.test_targets:capital",
            "dataset.columns.ground_truth=id",
        ],
        tmp_path,
    )
    assert done.returncode == 2
    assert "a conversation calls it as fn(input, messages=[...])" in done.stderr
    assert "add a `messages` parameter" in done.stderr and "Traceback" not in done.stderr


def counting_model(request: FakeRequest) -> str | dict[str, Any]:
    """The model under test (free text): it says how many messages it was sent."""
    if request.schema is None:
        return f"R{len(request.messages)}"
    return judge(request)


def test_llm_replay_sends_the_conversation_so_far_as_the_models_messages(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = counting_model
    target = ["target=llm", *scripted_model.overrides("target.model"), "target.system=Be brief."]
    rows = [{**CHATS[0], "ground_truth": "R8"}]
    done = run_cli([*replay_args(write(tmp_path, rows)), "scorer=exact_match", *target], tmp_path)
    assert done.returncode == 0, done.stderr
    sent = [texts(r.messages) for r in scripted.requests]
    brief, recorded = ("system", "Be brief."), ("system", SYSTEM["content"])
    assert sent == [
        [brief, recorded, ("user", "hi")],
        [brief, recorded, ("user", "hi"), ("assistant", "R3"), ("user", "a margherita")],
        [
            brief,
            recorded,
            ("user", "hi"),
            ("assistant", "R3"),
            ("user", "a margherita"),
            ("assistant", "R5"),
            ("user", "that is all"),
        ],
    ]
    item = saved(tmp_path)["c1"]
    assert item["output"] == "R7" and item["scores"]["exact_match"]["score"] == 0.0  # "R8" was a wrong guess
    assert [m["content"] for m in item["record"]["messages"] if m["role"] == "assistant"] == [
        "R3",
        "R5",
        "R7",
    ]
    step = item["target_step"]
    assert step["attempts"] == 3 and step["usage"]["prompt_tokens"] > 0  # the three calls, summed


@pytest.mark.slow
def test_http_replay_posts_the_messages_so_far(tmp_path: Path, service: Service) -> None:
    service.reply = lambda call: (200, {"answer": f"H{len(call.body['messages'])}:{call.body['input']}"}, {})
    rows = [{**CHATS[1], "ground_truth": "-"}, {"id": "q", "input": "plain", "ground_truth": "-"}]
    args = [
        *replay_args(write(tmp_path, rows)),
        "scorer=exact_match",
        "target=http",
        f"target.url={service.url}",
    ]
    done = run_cli([*args, *LENIENT], tmp_path)
    assert done.returncode == 0, done.stderr
    bodies = [c.body for c in service.calls]
    assert {"input": "plain"} in bodies  # a plain row's body is as before
    chat = [b for b in bodies if "messages" in b]
    assert chat == [
        {"input": "status of order 7?", "messages": [{"role": "user", "content": "status of order 7?"}]},
        {
            "input": "thanks",
            "messages": [
                {"role": "user", "content": "status of order 7?"},
                {"role": "assistant", "content": "H1:status of order 7?"},
                {"role": "user", "content": "thanks"},
            ],
        },
    ]
    assert saved(tmp_path)["c2"]["output"] == "H3:thanks"
    # A body of the user's own places the list where "{{ messages }}" stands.
    service.calls.clear()
    service.reply = lambda call: (200, {"answer": "x"}, {})
    own = "target.body={chat: '{{ messages }}', last: 'Q: {{ input }}', n: '{{ messages | length }}'}"
    again = run_cli([*args, *LENIENT, own], tmp_path)
    assert again.returncode == 0, again.stderr
    assert {"chat": [{"role": "user", "content": "plain"}], "last": "Q: plain", "n": "1"} in [
        c.body for c in service.calls
    ]


def test_a_turn_that_fails_leaves_the_item_unscored_never_a_shorter_conversation(tmp_path: Path) -> None:
    asked.clear()
    rows = [{**CHATS[0], "ground_truth": "-"}, {**CHATS[1], "ground_truth": "-"}]
    done = run_cli(
        [
            *replay_args(write(tmp_path, rows)),
            "scorer=exact_match",
            "target=python",
            f"target.fn={__name__}:fragile",
            *LENIENT,
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    items = saved(tmp_path)
    assert "failed on user turn 2: " in items["c1"]["target_error"]
    assert "fragile raised RuntimeError: the kitchen is on fire" in items["c1"]["target_error"]
    assert items["c1"]["scores"]["exact_match"]["score"] is None
    assert items["c2"]["target_error"] is None  # the other conversation goes on


def fragile(question: str, messages: list[dict[str, Any]]) -> str:
    if question == "a margherita":
        raise RuntimeError("the kitchen is on fire")
    return bot(question, messages)


def searching_bot(question: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A bot that looks the order up on every turn: what it retrieved and called is its turn's."""
    n = sum(m["role"] == "user" for m in messages)
    call = {"name": "lookup", "arguments": {"turn": n}}
    return {"output": f"A{n}", "contexts": [f"doc {n}"], "tool_calls": [call]}


def test_what_each_turn_retrieved_and_called_stays_with_that_turn(tmp_path: Path) -> None:
    rows = [{**CHATS[0], "ground_truth": "A3"}]
    args = [*replay_args(write(tmp_path, rows)), "scorer=exact_match", "target=python"]
    done = run_cli(
        [*args, f"target.fn={__name__}:searching_bot", "target.provides=[contexts,tool_calls]"], tmp_path
    )
    assert done.returncode == 0, done.stderr
    item = saved(tmp_path)["c1"]
    answers = [m for m in item["record"]["messages"] if m["role"] == "assistant"]
    assert [a["contexts"] for a in answers] == [["doc 1"], ["doc 2"], ["doc 3"]]
    assert [a["tool_calls"][0]["arguments"] for a in answers] == [{"turn": 1}, {"turn": 2}, {"turn": 3}]
    # The item's own (what single-turn scorers read beside its output) are its last turn's.
    assert item["record"]["contexts"] == ["doc 3"] and item["target_step"]["reply"]["tool_calls"][0][
        "arguments"
    ] == {"turn": 3}


def test_targets_that_cannot_hold_a_conversation_say_so_before_any_call() -> None:
    from evalframe.data.conversations import conversation_of
    from evalframe.data.rows import Row
    from evalframe.errors import ConfigError
    from evalframe.targets import LLMTarget, PythonTarget

    chat = Row("c1", "hi", None, None, 1, messages=conversation_of(CHATS[0]["turns"], "turns", "c1"))
    plain = Row("q", "plain", None, None, 2)
    batched = LLMTarget({"name": scripted_model.NAME, "api_key_env": None, "batch": True})
    with pytest.raises(ConfigError, match=r"batch=true answers no conversation"):
        batched.validate([chat], "chats.jsonl")
    batched.validate([plain], "chats.jsonl")  # a plain row is batched as before
    chat_only = PythonTarget(fragile)  # `messages` has no default: fine for conversations only
    chat_only.validate([chat], "chats.jsonl")
    with pytest.raises(
        ConfigError, match=r"needs `messages`, and chats.jsonl, line 2 \(id q\) is no conversation"
    ):
        chat_only.validate([chat, plain], "chats.jsonl")
