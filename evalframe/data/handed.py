"""What a live target hands over beside its output: the chunks it retrieved, their ids and the tools it
called (a Python function returning a mapping, a service's reply read at configured paths). They go
onto the row exactly as a dataset's list columns would, checked the same way, so the RAG and tool-call
scorers judge a live application as they judge a file.

In a target's step they travel as its `reply` (plain JSON: texts, and tool calls as {name, arguments}),
which results.jsonl keeps: a re-score and `dataset=run` put them back on the row from there, whatever
column mapping the dataset had.

A target that replayed or simulated a conversation (targets.conversing) hands over that conversation
too: `messages`, its turns as records (Conversation.as_records), which becomes the row's `messages`, the
conversation every judge then judges; and `stopped`, why a simulated user stopped (done, max_turns),
kept in the item's record only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from evalframe.data.conversations import Conversation, conversation_of
from evalframe.data.rows import Row
from evalframe.data.values import HANDED, LISTS, ToolCall, check_values, lists_of
from evalframe.errors import DataError

__all__ = ["HANDED", "STOPPED", "TRACE", "as_json", "fields", "notes", "onto", "trace_of"]

# Why a simulated user stopped (targets.simulated): it said its scenario was done, or max_turns.
STOPPED = ("done", "max_turns")

# The trace a traced function's call produced (evalframe.targets.traced), kept in its step's reply
# beside what it handed over: the item's verdicts are written onto it.
TRACE = ("trace_id", "retriever_span_id")

# lists_of reads the columns it is given: these fields under their own names, no other list column.
_OWN_NAMES: dict[str, str | None] = {name: (name if name in HANDED else None) for name in LISTS}


def fields(reply: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The handed-over fields of a reply as Row fields (lists of texts, ToolCalls), each checked as a
    dataset's list column is: a DataError starting with `where` names the key. A missing or null key is
    not handed over."""
    present = {name: reply[name] for name in (*HANDED, "messages") if reply.get(name) is not None}
    for name, value in present.items():
        if not isinstance(value, list | tuple):  # a reply is no CSV cell: no list written as text
            raise DataError(f"{where}: {name!r} must be a list, got {type(value).__name__} {value!r:.60}")
        present[name] = list(value)
        check_values(value, repr(name), where)
    found = lists_of(present, _OWN_NAMES, where)
    if "messages" in present:
        found["messages"] = conversation_of(present["messages"], "messages", where)
    return found


def notes(reply: Mapping[str, Any]) -> dict[str, Any]:
    """What a reply puts in the item's record only ({} for none): why a simulated user stopped."""
    stopped = reply.get("stopped")
    if stopped is None:
        return {}
    if stopped not in STOPPED:
        raise DataError(f"'stopped' must be one of {', '.join(STOPPED)}, got {stopped!r:.60}")
    return {"stopped": stopped}


def trace_of(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The ids of the trace a reply came with, as Row fields ({} for none)."""
    return {name: str(reply[name]) for name in TRACE if reply.get(name)}


def as_json(found: Mapping[str, Any]) -> dict[str, Any]:
    """Row fields (from `fields`) as plain JSON, for a step's reply and a row's record."""
    return {
        name: value.as_records()
        if isinstance(value, Conversation)
        else [c.as_dict() if isinstance(c, ToolCall) else c for c in value]
        for name, value in found.items()
    }


def onto(row: Row, found: Mapping[str, Any]) -> Row:
    """`row` with the handed-over fields in place of its own, and in its record under their own names
    (what a judge's template reads as `row.contexts`); the other fields are the dataset's."""
    if not found:
        return row
    return dataclasses.replace(row, extra={**row.extra, **as_json(found)}, **found)
