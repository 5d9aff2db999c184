"""A conversation judge's verdicts written back onto a session's traces (evalframe.tracking.feedback):
the session's verdict on its first trace (MLflow's convention, with the session id in its metadata),
each assistant turn's verdict (details["turns"]) on the trace that made that turn as `<scorer>/turn`;
what is written for an item, then for real into an SQLite store the traced chat assistant filled
(tests/traced_chat.py), read back with MLflow's API; and never twice for the same session and settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import pytest

from evalframe.data import judged
from evalframe.results.journal import Journal
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.tracking import feedback
from tests.traced_chat import Chats, _seeded_chats, chat, chat_store, rows

__all__ = ["_seeded_chats", "chat_store"]  # fixtures, used by name

DIGEST = "d" * 16
SOURCES = {"retention": ("LLM_JUDGE", "scripted/judge")}
SESSION = {
    "session_id": "s-1",
    "trace_id": "t1",
    "session_traces": [
        {"trace_id": "t1", "turn": 2},
        {"trace_id": "t2", "turn": None},  # an ERROR trace: no reply, no turn verdict
        {"trace_id": "t3", "turn": 5},
    ],
    "assessments": [],
    "turn_assessments": {},
}


def turns(*verdicts: tuple[int, str, float]) -> dict[str, Any]:
    return {"turns": [{"turn": n, "verdict": v, "score": s, "reason": f"why {n}"} for n, v, s in verdicts]}


def session_item(record: dict[str, Any], result: ScoreResult) -> ItemResult:
    return ItemResult("s-1", "q", None, "a", scores={"retention": result}, record=record, trace_id="t1")


def ours(name: str, digest: str, assessment_id: str) -> dict[str, Any]:
    return {
        "assessment_id": assessment_id,
        "name": name,
        "kind": "feedback",
        "value": 1.0,
        "valid": True,
        "metadata": {judged.DIGEST: digest},
        "span_id": None,
        "error": None,
    }


def test_the_session_verdict_on_its_first_trace_each_turn_verdict_on_its_own() -> None:
    result = ScoreResult(0.5, "one of two turns kept", details=turns((2, "kept", 1.0), (5, "forgot", 0.0)))
    session, first, last = feedback.verdicts(
        session_item(SESSION, result), {"retention": DIGEST}, SOURCES, "run-1"
    )
    digest = judged.digest_for(SESSION, DIGEST)
    assert digest.startswith(DIGEST + ".") and digest != DIGEST
    assert (session.trace_id, session.name, session.value, session.rationale) == (
        "t1",
        "retention",
        0.5,
        "one of two turns kept",
    )
    assert session.metadata == {judged.DIGEST: digest, judged.RUN_ID: "run-1", "mlflow.trace.session": "s-1"}
    assert [(v.trace_id, v.name, v.value, v.rationale) for v in (first, last)] == [
        ("t1", "retention/turn", 1.0, "kept: why 2"),
        ("t3", "retention/turn", 0.0, "forgot: why 5"),
    ]
    assert last.metadata == {judged.DIGEST: digest, judged.RUN_ID: "run-1", "evalframe.turn": "5"}
    assert last.source == ("LLM_JUDGE", "scripted/judge") and last.span_id is None


def test_an_unscored_session_writes_its_error_and_no_turn_verdicts() -> None:
    [v] = feedback.verdicts(
        session_item(SESSION, ScoreResult.unscored("3 verdicts for 4 turns")),
        {"retention": DIGEST},
        SOURCES,
        None,
    )
    assert (v.trace_id, v.value, v.error) == ("t1", None, ("UNSCORED", "3 verdicts for 4 turns"))


def test_a_session_judged_under_the_same_settings_is_not_written_again_a_grown_one_is() -> None:
    digest = judged.digest_for(SESSION, DIGEST)
    judged_before = {
        **SESSION,
        "assessments": [ours("retention", digest, "a-1"), ours("retention/turn", digest, "a-2")],
        "turn_assessments": {"t3": [ours("retention/turn", digest, "a-3")]},
    }
    result = ScoreResult(0.5, "r", details=turns((2, "kept", 1.0), (5, "forgot", 0.0)))
    assert feedback.verdicts(session_item(judged_before, result), {"retention": DIGEST}, SOURCES, None) == []
    # The session has grown a turn since: judged again, the new verdicts overriding the old ones.
    grown = {**judged_before, "session_traces": [*SESSION["session_traces"], {"trace_id": "t4", "turn": 7}]}
    result = ScoreResult(0.5, "r", details=turns((2, "kept", 1.0), (5, "forgot", 0.0), (7, "kept", 1.0)))
    written = feedback.verdicts(session_item(grown, result), {"retention": DIGEST}, SOURCES, None)
    assert [(v.trace_id, v.name, v.overrides) for v in written] == [
        ("t1", "retention", "a-1"),
        ("t1", "retention/turn", "a-2"),
        ("t3", "retention/turn", "a-3"),
        ("t4", "retention/turn", None),
    ]
    assert {v.metadata[judged.DIGEST] for v in written} == {judged.digest_for(grown, DIGEST)} != {digest}


def test_a_file_row_keeps_the_settings_digest() -> None:
    assert judged.digest_for({"messages": []}, DIGEST) == DIGEST


# --- written into a real store ----------------------------------------------------------------------------


def items(chats: Chats) -> list[ItemResult]:
    """Each session judged by hand: every assistant turn kept but the last, which forgot."""
    out = []
    for row in rows(chats):
        numbers = [t.number for t in chat(row).assistant_turns]
        verdicts = [
            (n, "forgot" if n == numbers[-1] else "kept", 0.0 if n == numbers[-1] else 1.0) for n in numbers
        ]
        result = ScoreResult(sum(v[2] for v in verdicts) / len(verdicts), "mean", details=turns(*verdicts))
        out.append(
            ItemResult(
                row.id,
                row.input,
                None,
                row.output or "",
                {"retention": result},
                record=dict(row.extra),
                trace_id=row.trace_id,
            )
        )
    return out


def journaled(tmp_path: Path, done: list[ItemResult]) -> Path:
    journal = Journal(tmp_path / "run")
    journal.start({}, len(done))
    for item in done:
        journal.append(item)
    journal.finish()
    return journal.path


def evalframes(chats: Chats) -> dict[str, list[Any]]:
    """evalframe's valid verdicts on each trace of the store, by trace id."""
    found: dict[str, list[Any]] = {}
    for trace in mlflow.MlflowClient(chats.uri).search_traces(
        locations=[chats.experiment_id], include_spans=False
    ):
        mine = [
            a for a in trace.info.assessments if a.valid is not False and judged.DIGEST in (a.metadata or {})
        ]
        if mine:
            found[trace.info.trace_id] = mine
    return found


@pytest.mark.slow
def test_written_onto_the_sessions_traces_once(chat_store: Chats, tmp_path: Path) -> None:
    config = {
        "scorers": {"retention": {"model": {"name": "scripted/judge"}}},
        "tracking": {"uri": chat_store.uri},
    }
    notes: list[str] = []
    tally = feedback.write_back(
        journaled(tmp_path, items(chat_store)), config, None, {"retention": DIGEST}, notes
    )
    assert tally is not None and tally.failed == 0, notes
    found = evalframes(chat_store)
    ada = chat_store.traces["chat-ada"]
    assert sorted(a.name for a in found[ada[0]]) == ["retention", "retention/turn"]
    [session] = [a for a in found[ada[0]] if a.name == "retention"]
    assert session.value == pytest.approx(2 / 3) and session.metadata["mlflow.trace.session"] == "chat-ada"
    assert [(a.name, a.value, a.metadata["evalframe.turn"]) for a in found[ada[2]]] == [
        ("retention/turn", 0.0, "6")
    ]
    cid = chat_store.traces["chat-cid"]
    assert cid[1] not in found  # the failed turn: no reply, no verdict
    assert chat_store.stray not in found
    # 4 sessions' verdicts + 3 + 2 + 2 + 1 turns' verdicts, over the 9 traces of the sessions.
    assert tally.written == 4 + 8 and tally.traces == 9
    # Read again, every session carries its verdict under these settings: skipped, nothing written again.
    again = judged.Unjudged(_rows_of(chat_store), {"retention": DIGEST})
    assert [r.id for r in again] == [] and again.skipped == 4
    tally = feedback.write_back(
        journaled(tmp_path / "2", items(chat_store)), config, None, {"retention": DIGEST}, notes
    )
    assert tally is not None and tally.written == 0


def _rows_of(chats: Chats) -> Any:
    from evalframe.data.rows import Rows

    return Rows.of(rows(chats))
