"""A traced chat assistant and the MLflow store its conversations fill: the sessions the session tests
read (dataset=mlflow_traces dataset.sessions=true).

`reply(message)` is one turn of a help desk's chat assistant instrumented as a user would write it:
`@mlflow.trace` on the function, a RETRIEVER span (mlflow Documents) on the turns that look something up,
a TOOL span opened with `mlflow.start_span` for each tool it calls, and the conversation's session id
set with `mlflow.update_current_trace(session_id=...)`; a turn it cannot take raises (an ERROR trace:
the user asked and got no reply). Its replies are scripted (CHATS), so the same conversations can be
written as a JSONL file of OpenAI-style messages (`jsonl`): the identical-items check.

`seed(uri)` plays CHATS turn by turn, the sessions interleaved (turn 1 of each, then turn 2 of each,
...), one trace per millisecond at least, then asks one question outside any session. What it seeds:
- chat-ada: 3 turns (a remembered name and city, a retrieval, a tool call);
- chat-bob: 2 turns (a tool call with two arguments, then a retrieval of two documents);
- chat-cid: 3 turns, the second an ERROR trace (no reply);
- chat-dee: 1 turn;
- one trace with no session id;
- every session trace tagged chatbot_role=ROLE, and chat-ada's first trace carrying a reviewer's
  `expected_outcome` expectation (OUTCOMES).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.entities import AssessmentSource, AssessmentSourceType, Document

from evalframe.data.conversations import Conversation
from evalframe.data.rows import Row
from evalframe.run import sources
from tests.traced_app import logging_to

EXPERIMENT = "chat-app"


@dataclass(frozen=True)
class Exchange:
    user: str
    reply: str | None  # None: the assistant fails on this turn (an ERROR trace)
    contexts: tuple[str, ...] | None = None  # what it retrieves (None: no retrieval)
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()


CHATS: dict[str, list[Exchange]] = {
    "chat-ada": [
        Exchange("Hi, I am Ada and I live in Lyon.", "Nice to meet you, Ada."),
        Exchange(
            "How long is the train from my city to Paris?",
            "The Lyon to Paris train takes two hours.",
            contexts=("The Paris to Lyon high-speed train takes two hours.",),
        ),
        Exchange("Is it sunny in Paris?", "It is sunny in Paris.", tools=(("weather", {"city": "Paris"}),)),
    ],
    "chat-bob": [
        Exchange(
            "What is 30 euros in dollars?",
            "About 33 dollars.",
            tools=(("convert_currency", {"amount": 30, "currency": "USD"}),),
        ),
        Exchange(
            "Can my dog and my bike come?",
            "Dogs on a lead travel free, and bikes too outside the rush hour.",
            contexts=(
                "Dogs travel free if they are on a lead or in a basket.",
                "Bikes travel free on regional trains outside the morning rush hour.",
            ),
        ),
    ],
    "chat-cid": [
        Exchange("I lost my umbrella on a train.", "Lost property is kept at the arrival station."),
        Exchange("Can you call the station for me?", None),
        Exchange(
            "Hello? Are you still there?", "Yes, sorry: I cannot call stations, but they keep it 30 days."
        ),
    ],
    "chat-dee": [Exchange("Do children travel free?", "Under 4 they do, without a seat of their own.")],
}
STRAY = "A question asked outside any conversation."
ROLE = "a railway help desk"  # every trace's tag chatbot_role
# A reviewer's expectation of how a conversation should end: on the session's first trace, as MLflow
# keeps a session's expectations (a HUMAN source, the session id in its metadata).
OUTCOMES = {"chat-ada": "Ada knows how long the train to Paris takes and the weather there."}
_BY_MESSAGE = {e.user: (session, e) for session, chat in CHATS.items() for e in chat}


@dataclass
class Chats:
    """What `seed` made: the store, and each session's trace ids in the order asked."""

    uri: str
    experiment: str
    experiment_id: str = ""
    traces: dict[str, list[str]] = field(default_factory=dict)
    stray: str = ""  # the trace without a session


@mlflow.trace(span_type="RETRIEVER")
def retrieve(query: str) -> list[Document]:
    _, exchange = _BY_MESSAGE[query]
    return [
        Document(page_content=text, metadata={"doc_uri": f"kb://{i}"})
        for i, text in enumerate(exchange.contexts or ())
    ]


def _call(name: str, arguments: dict[str, Any]) -> str:
    with mlflow.start_span(name=name, span_type="TOOL") as span:
        span.set_inputs(arguments)
        result = f"{name} done"
        span.set_outputs(result)
    return result


@mlflow.trace
def reply(message: str) -> str:
    """The assistant's reply to one user message, in the conversation it belongs to."""
    session, exchange = _BY_MESSAGE.get(message, (None, Exchange(message, "I can only help with trains.")))
    if exchange.contexts is not None:
        retrieve(message)
    for name, arguments in exchange.tools:
        _call(name, arguments)
    if session is not None:
        mlflow.update_current_trace(session_id=session, tags={"chatbot_role": ROLE})
    if exchange.reply is None:
        raise ValueError("the assistant failed on this turn")
    return exchange.reply


def seed(uri: str, experiment: str = EXPERIMENT) -> Chats:
    """Play every conversation into the store at `uri`, interleaved, then one question outside them."""
    client = mlflow.MlflowClient(uri)
    if client.get_experiment_by_name(experiment) is None:
        client.create_experiment(experiment)
    with logging_to(uri, experiment) as experiment_id:
        assert experiment_id is not None
        chats = Chats(uri, experiment, experiment_id)
        rounds = max(len(chat) for chat in CHATS.values())
        for turn in range(rounds):
            for session, chat in CHATS.items():
                if turn < len(chat):
                    chats.traces.setdefault(session, []).append(_ask(chat[turn].user))
        chats.stray = _ask(STRAY)
        mlflow.flush_trace_async_logging()
        reviewer = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="reviewer@example.com")
        for session, outcome in OUTCOMES.items():
            first = chats.traces[session][0]
            metadata = {"mlflow.trace.session": session}
            mlflow.log_expectation(
                trace_id=first, name="expected_outcome", value=outcome, source=reviewer, metadata=metadata
            )
    return chats


def _ask(message: str) -> str:
    with contextlib.suppress(ValueError):  # an ERROR trace, as the app's own callers see it
        reply(message)
    time.sleep(0.002)  # each trace its own millisecond: read back in the order asked
    trace_id = mlflow.get_last_active_trace_id()
    assert trace_id is not None
    return trace_id


def messages(chat: list[Exchange]) -> list[dict[str, Any]]:
    """A conversation as OpenAI chat messages: the user's, then the assistant's with its tool calls (in
    OpenAI's shape, arguments as JSON text) and what it retrieved (`contexts`)."""
    out: list[dict[str, Any]] = []
    for exchange in chat:
        out.append({"role": "user", "content": exchange.user})
        if exchange.reply is None:
            continue
        said: dict[str, Any] = {"role": "assistant", "content": exchange.reply}
        if exchange.tools:
            said["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(exchange.tools)
            ]
        if exchange.contexts is not None:
            said["contexts"] = list(exchange.contexts)
        out.append(said)
    return out


def jsonl() -> str:
    """The same conversations as a JSONL dataset, one line per conversation, id = the session id."""
    lines = []
    for session, chat in CHATS.items():
        line = {"id": session, "messages": messages(chat), "chatbot_role": ROLE}
        if session in OUTCOMES:
            line["expected_outcome"] = OUTCOMES[session]
        lines.append(json.dumps(line) + "\n")
    return "".join(lines)


def copied(chats: Chats, folder: Path) -> Chats:
    """`chats` in a store of its own: a copy of its SQLite file (SQLite's backup API) in `folder`."""
    path = folder / "chats.db"
    seeded, copy = sqlite3.connect(chats.uri.removeprefix("sqlite:///")), sqlite3.connect(path)
    try:
        seeded.backup(copy)
    finally:
        seeded.close()
        copy.close()
    return dataclasses.replace(chats, uri=f"sqlite:///{path}")


@pytest.fixture(scope="module")
def _seeded_chats(tmp_path_factory: pytest.TempPathFactory) -> Chats:
    return seed(f"sqlite:///{tmp_path_factory.mktemp('chats') / 'mlflow.db'}")


@pytest.fixture
def chat_store(_seeded_chats: Chats, tmp_path: Path) -> Chats:
    """An MLflow store holding the chat assistant's sessions (this module says what they are): seeded
    once per test module, copied for each test. Import it (and _seeded_chats) into a test module."""
    return copied(_seeded_chats, tmp_path)


def rows(chats: Chats, *overrides: str) -> list[Row]:
    """The rows dataset=mlflow_traces dataset.sessions=true reads from the store (`overrides`:
    dataset.limit=2, ...), read as a run reads them."""
    from tests.conftest import compose

    config = compose(
        [
            "dataset=mlflow_traces",
            f"dataset.experiment={chats.experiment}",
            "dataset.sessions=true",
            *overrides,
        ]
    )
    return list(iter(sources.rows(config["dataset"], {"uri": chats.uri})))


def chat(row: Row) -> Conversation:
    """A session row's conversation (every one has one)."""
    assert row.messages is not None, row.id
    return row.messages
