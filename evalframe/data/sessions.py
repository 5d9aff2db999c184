"""MLflow sessions as conversations (dataset=mlflow_traces dataset.sessions=true): the traces of one
session (`mlflow.trace.session` metadata), oldest first, as one conversation item. Pure: the reader in
evalframe.tracking.session_reader pages through the store and hands over the session ids and a way to
fetch a session's trace records.

Each trace is one exchange: a user turn (its input, read by dataset.columns.input as a trace row's
is) and an assistant turn (its output, dataset.columns.output), the assistant turn carrying the trace's
retrieved chunks (dataset.columns.contexts) and its tool calls (dataset.columns.tool_calls). A trace
with no output (an ERROR trace: the application raised) gives the user turn alone: the user asked
and got no reply, which is what the conversation was.

The item is the session: its id is the session id; its trace is the session's first trace (where
MLflow keeps a session's verdicts), whose ground truth and human score are the item's; its record holds
`session_traces`, each trace's id and the number of its assistant turn (None for a trace without a
reply), so per-turn verdicts go back onto the trace that made the turn.

A session is judged whole or not at all: it is taken when every one of its traces started at or after
dataset.since and had ended before dataset.until (the run's start by default). A session still going
on when the run starts (a trace after `until`, or one still running) is left for a later run, so no
verdict is ever given on half a conversation; a session's traces are listed by its id, in a search of
their own, so paging through the experiment never cuts one either.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from evalframe.data import judged, traces
from evalframe.data.conversations import Conversation, Turn
from evalframe.data.rows import Row
from evalframe.errors import ConfigError

SESSION_TRACES = judged.SESSION_TRACES  # the record's key: [{"trace_id", "turn"}] in order
TURN_ASSESSMENTS = "turn_assessments"  # the record's key: evalframe's verdicts on the other traces
# A conversation's own fields, read by their selectors (dataset.columns) from the session's first trace,
# where MLflow keeps a session's expectations (mlflow.genai's resolve_expectations_from_session).
ITEM = ("expected_outcome", "chatbot_role")

Records = Sequence[Mapping[str, Any]]


def selectors(cfg: Mapping[str, Any]) -> dict[str, traces.Selector | None]:
    """A trace row's selectors (data.traces) and those of the conversation's own fields (ITEM)."""
    columns = cfg.get("columns") or {}
    chosen = traces.selectors(cfg)
    for name in ITEM:
        text = columns.get(name)
        chosen[name] = None if text is None else traces.parse(str(text), f"dataset.columns.{name}")
    return chosen


def check(cfg: Mapping[str, Any]) -> None:
    """The settings sessions need, checked before the store is asked anything."""
    if cfg.get("sessions") not in (None, True, False):
        raise ConfigError(f"dataset.sessions={cfg.get('sessions')!r}: set it to true or false")
    if cfg.get("sessions") and (cfg.get("columns") or {}).get("input") is None:
        raise ConfigError(
            "dataset.sessions=true: every trace of a session is a user turn, read by dataset.columns.input; "
            "set it to a selector (root.inputs by default), not null"
        )
    if cfg.get("sessions"):
        selectors(cfg)


def whole(records: Records, since_ms: int | None, until_ms: int) -> bool:
    """Whether a session lies whole in the window: every trace started at or after `since_ms` and had
    ended before `until_ms` (a trace without spans: had started before it)."""
    for record in records:
        started = int(record.get("request_time") or 0)
        if since_ms is not None and started < since_ms:
            return False
        roots = [s for s in record.get("spans") or [] if not s.get("parent_id")]
        if record.get("state") == "IN_PROGRESS" or (roots and roots[0].get("end_ns") is None):
            return False
        ended = int(roots[0]["end_ns"]) // 1_000_000 if roots else started
        if ended >= until_ms:
            return False
    return True


def session_row(
    session_id: str, records: Records, number: int, chosen: Mapping[str, Any], source: str
) -> Row:
    """A session's trace records (oldest first) as one conversation item; errors name the trace."""
    turns: list[Turn] = []
    entries: list[dict[str, Any]] = []
    others: dict[str, list[Any]] = {}
    exchanges = [traces.row(record, number, chosen, source) for record in records]
    for exchange, record in zip(exchanges, records, strict=True):
        turns.append(Turn(len(turns) + 1, "user", exchange.input))
        entry: dict[str, Any] = {"trace_id": exchange.id, "turn": None}
        if exchange.output is not None:
            contexts = tuple(exchange.contexts) if exchange.contexts is not None else None
            calls = tuple(exchange.tool_calls or ())
            turns.append(Turn(len(turns) + 1, "assistant", exchange.output, calls, contexts))
            entry["turn"] = len(turns)
        entries.append(entry)
        ours = [a for a in record.get("assessments") or [] if judged.DIGEST in (a.get("metadata") or {})]
        if ours and exchange is not exchanges[0]:
            others[exchange.id] = ours
    first = exchanges[0]
    outcome, role = (chosen.get(name) for name in ITEM)
    conversation = Conversation(tuple(turns))
    last = conversation.last("assistant")
    extra = {
        "session_id": session_id,
        "trace_id": first.id,
        SESSION_TRACES: entries,
        "messages": conversation.as_records(),
        "assessments": list(first.extra.get("assessments") or []),
        TURN_ASSESSMENTS: others,
    }
    return Row(
        id=session_id,
        input=first.input,
        ground_truth=first.ground_truth,
        output=last.content if last else None,
        line=number,
        extra=extra,
        human=first.human,
        trace_id=first.id,
        messages=conversation,
        expected_outcome=traces.text(traces.select(records[0], outcome).value) if outcome else None,
        chatbot_role=traces.text(traces.select(records[0], role).value) if role else None,
    )


def rows(
    session_ids: Iterable[str],
    fetch: Callable[[list[str]], Mapping[str, Records]],
    cfg: Mapping[str, Any],
    window: tuple[int | None, int],
    source: str,
) -> Iterator[Row]:
    """The sessions as rows, in the order their ids come (each once): those outside the sample
    (dataset.sample, a hash of the session id) left out before they are fetched, those not whole in
    the `window` (since_ms, until_ms) left out, at most dataset.limit of them. `fetch` gets a batch of
    ids at a time (a quarter of dataset.page_size: a store answers a batch faster than its sessions
    one by one), and never more than the limit still needs."""
    chosen = selectors(cfg)
    limit = cfg.get("limit")
    batch = max(1, int(cfg.get("page_size") or 100) // 4)
    wanted = _sampled(session_ids, cfg.get("sample") or {})
    taken = 0
    while limit is None or taken < limit:
        ids = list(itertools.islice(wanted, batch if limit is None else min(batch, limit - taken)))
        if not ids:
            return
        found = fetch(ids)
        for session_id in ids:
            records = found.get(session_id) or []
            if not records or not whole(records, *window):
                continue
            taken += 1
            yield session_row(session_id, records, taken, chosen, source)
            if limit is not None and taken >= limit:
                return  # before the next page is asked for


def _sampled(session_ids: Iterable[str], sample: Mapping[str, Any]) -> Iterator[str]:
    """Each session id once, those outside the sample left out."""
    rate, salt = sample.get("rate"), str(sample.get("salt") or "")
    seen: set[str] = set()
    for session_id in session_ids:
        if session_id in seen:
            continue
        seen.add(session_id)
        if rate is None or traces.sampled(session_id, float(rate), salt):
            yield session_id
