"""A conversation judge's per-turn verdicts where people look: results.jsonl, the MLflow table, reasons.md,
and the intervals (which resample conversations, not turns). The verdicts are written by hand in the
contract's shape (details["turns"]), as a conversation judge leaves them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient  # at import: the test's store copies the template (conftest)

from evalframe.results import intervals
from evalframe.results.results_file import item_from_json, to_jsonable
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, Judgment, ScoreResult
from evalframe.results.summary import reasons
from evalframe.results.table import items_table
from evalframe.tracking import log as tracking

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel bot."},
    {"role": "user", "content": "I'm Ann, vegetarian."},
    {"role": "assistant", "content": "Hi Ann!"},
    {"role": "user", "content": "Book dinner in Paris."},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "book", "arguments": {"city": "Paris"}}]},
    {"role": "tool", "content": "booked: Le Boeuf"},
    {"role": "assistant", "content": "Booked a steakhouse."},
]


def turn(number: int, verdict: str, score: float, reason: str) -> dict[str, Any]:
    return {"turn": number, "verdict": verdict, "score": score, "reason": reason}


def retention(cut: list[int] | None = None) -> ScoreResult:
    turns = [
        turn(3, "kept", 1.0, "greets Ann"),
        turn(5, "kept", 1.0, "books"),
        turn(7, "forgot", 0.0, "steak"),
    ]
    details: dict[str, Any] = {"turns": turns, **({"truncated_turns": cut} if cut else {})}
    return ScoreResult(score=2 / 3, reason="2 of 3 turns keep what the user said", details=details)


def conversation_item(cut: list[int] | None = None) -> ItemResult:
    return ItemResult(
        id="c1",
        input="I'm Ann, vegetarian.",
        ground_truth=None,
        output="Booked a steakhouse.",
        scores={"knowledge_retention": retention(cut)},
        record={"turns": CHAT},
        conversation=CHAT,
    )


def plain_item() -> ItemResult:
    return ItemResult("q1", "2+2?", "4", "4", scores={"knowledge_retention": ScoreResult(1.0, "fine")})


def test_the_verdict_lines_name_each_turn_by_its_number():
    assert retention().verdicts() == [
        "turn 3 kept (1.00): greets Ann",
        "turn 5 kept (1.00): books",
        "turn 7 forgot (0.00): steak",
    ]
    assert retention().turn_lines() == retention().verdicts()
    # A panel's per-turn verdicts are each judge's, named, as its claims verdicts are.
    panel = ScoreResult(
        score=0.5,
        reason="mean of 2 judges",
        details={
            "judgments": [{"turns": [turn(3, "kept", 1.0, "a")]}, {"turns": [turn(3, "forgot", 0.0, "b")]}]
        },
        judgments=[Judgment("gpt", 0, 1.0, "a"), Judgment("claude", 0, 0.0, "b")],
    )
    assert panel.turn_lines() == ["gpt: turn 3 kept (1.00): a", "claude: turn 3 forgot (0.00): b"]
    # Claims verdicts are unchanged, and name no turn.
    claims = ScoreResult(
        1.0, "r", details={"verdicts": [{"verdict": "yes", "reason": "x"}], "statements": ["s"]}
    )
    assert claims.verdicts() == ["0 yes “s”: x"] and claims.turn_lines() == []


def test_results_jsonl_keeps_the_conversation_the_turn_verdicts_and_the_cut_turns():
    item = conversation_item(cut=[2, 3]).stored(limit=20000)
    line = json.dumps(to_jsonable(item), ensure_ascii=False)
    stored = json.loads(line)
    assert stored["conversation"] == CHAT  # the judged conversation, as Conversation.as_records()
    kept = stored["scores"]["knowledge_retention"]["details"]
    assert kept["turns"][2] == turn(7, "forgot", 0.0, "steak") and kept["truncated_turns"] == [2, 3]
    back = item_from_json(stored)  # what resume, rescore and log-run read
    assert back.conversation == CHAT
    assert back.scores["knowledge_retention"].verdicts() == item.scores["knowledge_retention"].verdicts()
    assert back.scores["knowledge_retention"].truncated_turns() == [2, 3]
    assert item_from_json(json.loads(json.dumps(to_jsonable(plain_item())))).conversation is None


def test_the_mlflow_table_shows_each_items_turn_verdicts_transcript_and_cut_turns():
    result = RunResult(items=[conversation_item(cut=[2]), plain_item()], scorers=["knowledge_retention"])
    table = items_table(result)
    assert table["knowledge_retention/verdicts"] == [
        "turn 3 kept (1.00): greets Ann\nturn 5 kept (1.00): books\nturn 7 forgot (0.00): steak",
        None,
    ]
    assert table["knowledge_retention/truncated_turns"] == ["2", None]
    transcript = table["conversation"][0]
    assert (
        "[7] assistant: Booked a steakhouse." in transcript
        and '-> calls book({"city": "Paris"})' in transcript
    )
    assert table["conversation"][1] is None
    assert {len(column) for column in table.values()} == {2}  # MLflow's log_table needs equal columns
    # A run without conversations has none of these columns.
    plain = items_table(RunResult(items=[plain_item()], scorers=["knowledge_retention"]))
    assert "conversation" not in plain and "knowledge_retention/truncated_turns" not in plain


def test_reasons_md_lists_each_turn_verdict_under_its_scorer():
    text = reasons(RunResult(items=[conversation_item(cut=[2])], scorers=["knowledge_retention"]))
    assert "  - turn 7 forgot (0.00): steak" in text
    assert "  - turns 2 cut from the judge's prompt" in text


def test_the_interval_resamples_conversations_not_turns():
    """Three conversations with 4, 1 and 1 judged assistant turns: the scorer's interval is the
    bootstrap over the 3 conversation scores, whatever the number of turns inside each."""
    verdicts = [[1.0, 1.0, 1.0, 0.0], [0.0], [1.0]]
    items = []
    for n, scores in enumerate(verdicts):
        turns = [turn(2 * k + 2, "kept" if s else "forgot", s, "") for k, s in enumerate(scores)]
        score = ScoreResult(score=float(np.mean(scores)), reason="", details={"turns": turns})
        items.append(ItemResult(f"c{n}", "hi", None, "", scores={"retention": score}, conversation=[]))
    result = intervals.with_intervals(RunResult(items=items, scorers=["retention"]))
    per_item = intervals.mean_interval([0.75, 0.0, 1.0])  # results/intervals.py on the item scores
    assert result.intervals["retention/mean"] == per_item
    per_turn = intervals.mean_interval([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])  # what resampling turns would give
    assert result.intervals["retention/mean"] != per_turn
    assert math.isclose(result.summaries["retention"].mean, (0.75 + 0.0 + 1.0) / 3)


@pytest.mark.slow
def test_mlflow_shows_the_turn_verdicts_in_items_json_and_the_chat_in_report_html(tmp_path):
    results = tmp_path / "run" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("{}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = RunResult(items=[conversation_item(cut=[2]), plain_item()], scorers=["knowledge_retention"])
    config = {"scorers": {"knowledge_retention": {}}, "tracking": {"traces": False}}
    _, run_id = tracking.log_run(
        result, config, uri=uri, experiment="chats", run_name="r", tags={}, results_file=results, notes=[]
    )
    client = MlflowClient(uri)
    table = json.loads(
        Path(client.download_artifacts(run_id, "items.json", str(tmp_path / "dl"))).read_text()
    )
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert rows[0]["knowledge_retention/verdicts"].splitlines()[2] == "turn 7 forgot (0.00): steak"
    assert rows[0]["knowledge_retention/truncated_turns"] == "2"
    assert rows[0]["conversation"].startswith("[1] system: You are a travel bot.\n[2] user: I'm Ann")
    assert rows[1]["conversation"] is None
    page = Path(client.download_artifacts(run_id, "report.html", str(tmp_path))).read_text()
    assert 'class="chat" id="chat-0"' in page and "forgot 0.00: steak" in page
