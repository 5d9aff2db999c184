"""Conversations read from the three shapes peers write them in (data/conversations.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evalframe.data.conversations import Conversation, transcript, truncated
from evalframe.data.rows import load_rows, rows_from_records
from evalframe.errors import DataError

OPENAI = [
    {"role": "system", "content": "You are a travel bot."},
    {"role": "user", "content": "Hi, I'm Ann. Book Paris."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"type": "function", "function": {"name": "book", "arguments": '{"city": "Paris"}'}}],
    },
    {"role": "tool", "content": "booked", "tool_call_id": "c1"},
    {"role": "assistant", "content": [{"type": "text", "text": "Booked, Ann."}]},
]
DEEPEVAL = [
    {"role": "system", "content": "You are a travel bot."},
    {"role": "user", "content": "Hi, I'm Ann. Book Paris."},
    {
        "role": "assistant",
        "content": "",
        "tools_called": [{"name": "book", "input_parameters": {"city": "Paris"}}],
    },
    {"role": "tool", "content": "booked"},
    {"role": "assistant", "content": "Booked, Ann."},
]
RAGAS = [
    {"type": "system", "content": "You are a travel bot."},
    {"type": "human", "content": "Hi, I'm Ann. Book Paris."},
    {"type": "ai", "content": "", "tool_calls": [{"name": "book", "args": {"city": "Paris"}}]},
    {"type": "tool", "content": "booked"},
    {"type": "ai", "content": "Booked, Ann."},
]


def chat(messages: list[Any]) -> Conversation:
    found = rows_from_records([{"id": "c1", "messages": messages}], {})[0].messages
    assert found is not None
    return found


def test_the_same_conversation_in_any_shape_is_the_same_item():
    rows = [rows_from_records([{"id": "c1", "messages": m}], {})[0] for m in (OPENAI, DEEPEVAL, RAGAS)]
    assert rows[0].messages == rows[1].messages == rows[2].messages == chat(RAGAS)
    assert [t.role for t in chat(OPENAI)] == ["system", "user", "assistant", "tool", "assistant"]
    assert chat(DEEPEVAL).turns[2].tool_calls[0].as_dict() == {
        "name": "book",
        "arguments": {"city": "Paris"},
    }
    # the first user turn names the item; the last assistant turn is its output for single-turn scorers
    assert {(r.input, r.output) for r in rows} == {("Hi, I'm Ann. Book Paris.", "Booked, Ann.")}


def test_a_conversation_reads_from_a_mapped_column_of_a_csv_or_a_json_array(tmp_path):
    path = tmp_path / "chats.json"
    path.write_text(
        json.dumps([{"id": "a", "turns": DEEPEVAL, "expected_outcome": "A booking", "chatbot_role": "bot"}])
    )
    row = load_rows({"path": str(path), "format": "json", "columns": {"messages": "turns"}})[0]
    assert (
        row.messages == chat(DEEPEVAL) and row.expected_outcome == "A booking" and row.chatbot_role == "bot"
    )
    csv = tmp_path / "chats.csv"
    csv.write_text('id,messages\nb,"' + json.dumps(RAGAS).replace('"', '""') + '"\n')
    assert load_rows({"path": str(csv), "format": "csv"})[0].messages == row.messages


def test_an_image_or_other_typed_content_part_stands_as_its_type():
    """An OpenAI image_url part (or audio, a file) is no reason to drop the conversation: the judges
    read text, so it stands as [image] ([<type>] for other parts) among the text parts."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    asked = {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image, audio]}
    said = chat([asked, {"role": "assistant", "content": "A cat."}])
    assert said.turns[0].content == "What is this?\n[image]\n[input_audio]"
    with pytest.raises(DataError, match="a content part must be text"):
        chat([{"role": "user", "content": [{"url": "x"}]}])  # no text, no type: not a part at all


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([{"role": "bot", "content": "x"}], "role 'bot' is not a role"),
        ([{"type": "robot", "content": "x"}], "type 'robot' is not a message type"),
        ([{"role": "assistant", "content": "hello"}], "has no user message"),
        ("not a list", "must be a list"),
        ([{"role": "user", "content": "x", "tool_calls": [{"nom": "f"}]}], "not a tool call"),
    ],
)
def test_a_malformed_message_is_named_with_its_row_and_position(messages, says):
    with pytest.raises(DataError, match=says) as caught:
        rows_from_records([{"id": "c1", "messages": messages}], {})
    assert "record 1" in str(caught.value)


def test_the_transcript_numbers_turns_and_cuts_the_oldest_first():
    chats = chat(OPENAI)
    text = transcript(chats)
    assert text.splitlines()[2:4] == ["[3] assistant:", '    -> calls book({"city": "Paris"})']
    kept, cut = truncated(chats, max_turns=2)
    assert cut == (2, 3) and [t.number for t in kept] == [1, 4, 5]  # the system message stays
    kept, cut = truncated(chats, max_tokens=1)
    assert [t.number for t in kept] == [1, 5]  # the last turn stays whatever the budget
    assert truncated(chats) == (chats, ())
    window = chats.until(chats.assistant_turns[-1], window=1)
    assert [t.number for t in window] == [1, 4, 5]
    for wide in (3, 4, 9):  # a window wider than what came before keeps all of it
        assert [t.number for t in chats.until(chats.assistant_turns[-1], window=wide)] == [1, 2, 3, 4, 5]
