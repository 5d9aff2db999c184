"""MLflow sessions read as conversation items (dataset=mlflow_traces dataset.sessions=true) from a real
SQLite store that a traced chat assistant filled (tests/traced_chat.py): grouped by session, each in the
order of its traces, the same conversations a JSONL file of OpenAI messages gives; never cut by paging or
by the time window; filters, sample and limit choosing whole sessions."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import mlflow
import pytest

from evalframe.data import rows as data
from evalframe.data.conversations import Turn
from evalframe.data.values import ToolCall
from evalframe.errors import ConfigError
from tests.conftest import compose
from tests.traced_app import logging_to
from tests.traced_chat import CHATS, OUTCOMES, Chats, _seeded_chats, chat, chat_store, jsonl, rows

pytestmark = pytest.mark.slow  # whole runs logged to MLflow, several per test: make test runs them

__all__ = ["_seeded_chats", "chat_store"]  # fixtures, used by name


def file_rows(tmp_path: Path) -> dict[str, data.Row]:
    path = tmp_path / "chats.jsonl"
    path.write_text(jsonl())
    return {r.id: r for r in data.load_rows(compose([f"dataset.path={path}"])["dataset"])}


def test_sessions_are_the_conversations_a_jsonl_file_gives(chat_store: Chats, tmp_path: Path) -> None:
    read = rows(chat_store, "dataset.columns.chatbot_role=tag:chatbot_role")
    # One item per session, in the order of their first traces; the trace without a session is no item.
    assert [r.id for r in read] == list(CHATS)
    expected = file_rows(tmp_path)
    for row in read:
        assert row.messages is not None
        assert row.messages == expected[row.id].messages, row.id
        assert (row.input, row.output) == (expected[row.id].input, expected[row.id].output)
        same = ("expected_outcome", "chatbot_role")
        assert [getattr(row, f) for f in same] == [getattr(expected[row.id], f) for f in same], row.id
        assert row.trace_id == chat_store.traces[row.id][0]  # the session's verdict goes on its first trace
        assert row.extra["messages"] == row.messages.as_records()
    assert read[0].expected_outcome == OUTCOMES["chat-ada"] and read[1].expected_outcome is None
    assert rows(chat_store)[0].chatbot_role is None  # not read unless mapped
    ada = read[0].messages
    assert ada is not None
    assert ada.turns[3] == Turn(
        4, "assistant", CHATS["chat-ada"][1].reply or "", (), CHATS["chat-ada"][1].contexts
    )
    assert ada.turns[5].tool_calls == (ToolCall("weather", {"city": "Paris"}),)
    assert ada.turns[1].contexts is None and ada.turns[1].tool_calls == ()  # no retrieval, no tool
    # chat-cid's second trace failed: the user's turn alone, then the next exchange.
    cid = read[2]
    assert [t.role for t in chat(cid)] == ["user", "assistant", "user", "user", "assistant"]
    ids = chat_store.traces["chat-cid"]
    assert cid.extra["session_traces"] == [
        {"trace_id": ids[0], "turn": 2},
        {"trace_id": ids[1], "turn": None},
        {"trace_id": ids[2], "turn": 5},
    ]


def test_paging_never_cuts_a_session(chat_store: Chats) -> None:
    assert rows(chat_store, "dataset.page_size=1") == rows(chat_store)


def test_limit_and_sample_count_sessions(chat_store: Chats) -> None:
    two = rows(chat_store, "dataset.limit=2")
    assert [r.id for r in two] == ["chat-ada", "chat-bob"]
    assert two == rows(chat_store)[:2]
    # A hash of the session id: 0.4 keeps ada and cid (whole), 0.5 those and bob.
    some = rows(chat_store, "dataset.sample.rate=0.4")
    assert [r.id for r in some] == ["chat-ada", "chat-cid"]
    assert all(len(chat(r).user_turns) == len(CHATS[r.id]) for r in some)
    assert [r.id for r in rows(chat_store, "dataset.sample.rate=0.5")] == ["chat-ada", "chat-bob", "chat-cid"]


def _iso(chats: Chats, trace_id: str) -> str:
    started = mlflow.MlflowClient(chats.uri).get_trace(trace_id).info.request_time
    return datetime.fromtimestamp(started / 1000, timezone.utc).isoformat(timespec="milliseconds")


def test_a_session_still_going_at_until_or_begun_before_since_is_left_whole(chat_store: Chats) -> None:
    third_round = _iso(chat_store, chat_store.traces["chat-ada"][2])
    # ada and cid have a third turn at `until`: left for a later run, not judged on two turns.
    assert [r.id for r in rows(chat_store, f"dataset.until='{third_round}'")] == ["chat-bob", "chat-dee"]
    # bob's first trace is the second of the first round: ada began before `since`.
    since = _iso(chat_store, chat_store.traces["chat-bob"][0])
    assert [r.id for r in rows(chat_store, f"dataset.since='{since}'")] == [
        "chat-bob",
        "chat-cid",
        "chat-dee",
    ]


def test_a_filter_chooses_sessions_through_their_traces_and_reads_them_whole(chat_store: Chats) -> None:
    # Only chat-cid's second trace failed; the session is read with its OK traces too.
    [cid] = rows(chat_store, "dataset.status=null", "dataset.filter='trace.status = \"ERROR\"'")
    assert cid.id == "chat-cid" and len(chat(cid).user_turns) == 3
    [bob] = rows(chat_store, "dataset.filter='metadata.`mlflow.trace.session` = \"chat-bob\"'")
    assert len(chat(bob)) == 4
    # The default status=OK: a session with a failed turn is still taken, whole.
    assert "chat-cid" in {r.id for r in rows(chat_store)}


def test_sessions_need_an_input_selector(chat_store: Chats) -> None:
    with pytest.raises(ConfigError, match=r"dataset\.columns\.input"):
        rows(chat_store, "dataset.columns.input=null")


# Session ids no string literal of MLflow's filter language can hold (both quote marks; a trailing
# backslash, which escapes the closing quote), each beside one its search pattern matches too.
ODD = ['he said "it\'s"', 'he said "it_s"', "C:\\chats\\", "C:\\chats_"]
_SESSION_OF: dict[str, str] = {}


@mlflow.trace
def _odd_turn(message: str) -> str:
    mlflow.update_current_trace(session_id=_SESSION_OF[message])
    return f"Noted: {message}"


def test_a_session_id_no_filter_can_quote_is_read_whole_and_alone(chat_store: Chats) -> None:
    with logging_to(chat_store.uri, chat_store.experiment):
        for session in ODD:
            for n in (1, 2):
                _SESSION_OF[message := f"{session} turn {n}"] = session
                _odd_turn(message)
                time.sleep(0.002)  # each trace its own millisecond: read back in the order asked
        mlflow.flush_trace_async_logging()
    read = {r.id: r for r in rows(chat_store)}
    assert set(read) == {*CHATS, *ODD}  # the run goes on: no session stops it
    for session in ODD:
        said = [t.content for t in chat(read[session])]
        assert said == [
            f"{session} turn 1",
            f"Noted: {session} turn 1",
            f"{session} turn 2",
            f"Noted: {session} turn 2",
        ]
