"""Sessions as conversations, pure (evalframe.data.sessions): trace records made by hand, as
tracking.trace_records makes them; the store's side is in tests/tracking/test_session_reader.py."""

from __future__ import annotations

from typing import Any

import pytest

from evalframe.data import sessions, traces
from evalframe.errors import ConfigError, DataError

COLUMNS = {"input": "root.inputs", "output": "root.outputs", "contexts": "span:RETRIEVER[-1].outputs"}
CFG = {"sessions": True, "columns": COLUMNS}
MS = 1_000_000  # nanoseconds in a millisecond


def trace(
    trace_id: str, at: int, inputs: Any, outputs: Any, ended: int | None = None, **more: Any
) -> dict[str, Any]:
    root: dict[str, Any] = {"span_id": f"{trace_id}-root", "parent_id": None, "name": "chat"}
    root.update(span_type="CHAIN", inputs=inputs, outputs=outputs, start_ns=at * MS)
    root["end_ns"] = None if ended is None else ended * MS
    return {
        "trace_id": trace_id,
        "state": more.pop("state", "OK"),
        "request_time": at,
        "spans": [root, *more.pop("spans", [])],
        "assessments": more.pop("assessments", []),
        **more,
    }


def test_a_chat_request_as_input_gives_its_last_user_message() -> None:
    # An app called with the whole history (OpenAI's chat request): the turn is the user's new message.
    history = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    asked = {"messages": [*history["messages"], {"role": "user", "content": "and now?"}]}
    records = [
        trace("t1", 10, {"question": "hi"}, "hello", 11),
        trace("t2", 20, asked, {"choices": [{"message": {"content": "now this"}}]}, 21),
    ]
    row = sessions.session_row("s", records, 1, traces.selectors(CFG), "store")
    assert row.messages is not None
    assert [(t.number, t.role, t.content) for t in row.messages] == [
        (1, "user", "hi"),
        (2, "assistant", "hello"),
        (3, "user", "and now?"),
        (4, "assistant", "now this"),
    ]
    assert (row.id, row.input, row.output, row.trace_id, row.line) == ("s", "hi", "now this", "t1", 1)


def test_a_trace_without_an_input_is_named() -> None:
    with pytest.raises(DataError, match="trace t2"):
        sessions.session_row(
            "s",
            [trace("t1", 1, "a", "b", 2), trace("t2", 3, None, "c", 4)],
            1,
            traces.selectors(CFG),
            "store",
        )


def test_a_session_is_whole_when_every_trace_lies_in_the_window() -> None:
    done = [trace("t1", 10, "a", "b", 12), trace("t2", 20, "c", "d", 25)]
    assert sessions.whole(done, None, 26)
    assert not sessions.whole(done, None, 25)  # the last turn had not ended at `until`
    assert not sessions.whole(done, 11, 26)  # it began before `since`
    assert sessions.whole(done, 10, 26)
    running = [done[0], trace("t2", 20, "c", None, None, state="IN_PROGRESS")]
    assert not sessions.whole(running, None, 10**9)
    spanless = [{"trace_id": "t1", "request_time": 10, "state": "OK", "spans": []}]
    assert sessions.whole(spanless, None, 11) and not sessions.whole(spanless, None, 10)


def test_settings_checked_before_the_store_is_asked() -> None:
    sessions.check({"columns": COLUMNS})  # not set: trace rows
    with pytest.raises(ConfigError, match="true or false"):
        sessions.check({"sessions": "yes", "columns": COLUMNS})
    with pytest.raises(ConfigError, match=r"dataset\.columns\.input"):
        sessions.check({"sessions": True, "columns": {**COLUMNS, "input": None}})


def test_rows_sample_before_fetching_in_batches_and_stop_at_the_limit() -> None:
    fetched: list[list[str]] = []

    def fetch(batch: list[str]) -> dict[str, list[dict[str, Any]]]:
        fetched.append(batch)
        return {s: [trace(f"{s}-1", 1, "q", "a", 2)] for s in batch if s != "s2"}  # s2: gone meanwhile

    ids = ["s1", "s2", "s1", "s3", "s4", "s5"]
    limited = {**CFG, "limit": 2, "page_size": 8}  # batches of 2 sessions
    assert [r.id for r in sessions.rows(ids, fetch, limited, (None, 10), "store")] == ["s1", "s3"]
    assert fetched == [["s1", "s2"], ["s3"]]  # never more than the limit still needs
    fetched.clear()
    assert [r.id for r in sessions.rows(ids, fetch, {**CFG, "page_size": 8}, (None, 10), "store")] == [
        "s1",
        "s3",
        "s4",
        "s5",
    ]
    assert fetched == [["s1", "s2"], ["s3", "s4"], ["s5"]]
    fetched.clear()
    sample = {**CFG, "sample": {"rate": 0.5, "salt": "x"}}
    kept = [r.id for r in sessions.rows(ids, fetch, sample, (None, 10), "store")]
    asked = [s for batch in fetched for s in batch]
    assert asked == [s for s in ["s1", "s2", "s3", "s4", "s5"] if traces.sampled(s, 0.5, "x")]
    assert kept == [s for s in asked if s != "s2"] and 0 < len(asked) < 5
