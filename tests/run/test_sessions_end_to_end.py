"""MLflow sessions judged through the command line as a user types it (`dataset=mlflow_traces
dataset.sessions=true`, the scripted judge, a judge of the user's own that reads the conversation): the
same conversations as a JSONL file and as sessions are the same items, so the judge cache answers the
second form; the verdicts land on each session's first trace, once."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import mlflow

from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_chat import CHATS, Chats, _seeded_chats, chat_store, jsonl
from tests.tracking.test_session_feedback import evalframes

__all__ = ["_seeded_chats", "chat_store"]  # fixtures, used by name

JUDGE_YAML = """\
# @package scorers.chat_quality
_target_: evalframe.scorers.judge.Judge
prompt: ???
require_ground_truth: false
output: {type: number, min: 1, max: 5}
model: ${model}
repeats: ${repeats}
"""
PROMPT = """\
How well does the assistant hold this conversation? 1 = badly, 5 = very well.
{% for m in row.messages %}
[{{ loop.index }}] {{ m.role }}: {{ m.content }}
{%- endfor %}

Reply with JSON: {"reason": "...", "rating": 1-5}
"""


def rating(request: Any) -> dict[str, Any]:
    """The judge's reply: longer conversations rated higher (1 to 5), so the items differ."""
    prompt = request.messages[-1]["content"]
    turns = len(re.findall(r"^\[\d+\] ", prompt, flags=re.MULTILINE))
    return {"reason": f"{turns} turns", "rating": min(5, turns)}


def test_the_same_conversations_from_a_file_then_from_sessions_cost_no_second_request(
    chat_store: Chats, scripted: ScriptedModel, tmp_path: Path
) -> None:
    (tmp_path / "conf" / "scorer").mkdir(parents=True)
    (tmp_path / "conf" / "scorer" / "chat_quality.yaml").write_text(JUDGE_YAML)
    (tmp_path / "judge.j2").write_text(PROMPT)
    (tmp_path / "chats.jsonl").write_text(jsonl())
    judge = [
        "--config-dir",
        str(tmp_path / "conf"),
        "scorer=chat_quality",
        f"scorers.chat_quality.prompt={tmp_path / 'judge.j2'}",
    ]
    judge += fake_model(scripted)
    scripted.responder = rating

    def evalframe(*args: str, **env: str) -> str:
        done = run_cli([*judge, *args], tmp_path, env=env)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
        return done.stderr

    evalframe(f"dataset.path={tmp_path / 'chats.jsonl'}", "tracking=none")
    asked = scripted.count()
    assert asked == len(CHATS)
    prompts = {m["content"] for r in scripted.requests for m in r.messages}
    assert any("[4] assistant: The Lyon to Paris train takes two hours." in p for p in prompts)

    sessions = [
        "dataset=mlflow_traces",
        f"dataset.experiment={chat_store.experiment}",
        "dataset.sessions=true",
    ]
    evalframe(*sessions, f"tracking.uri={chat_store.uri}")  # logged beside the traces
    assert scripted.count() == asked  # every prompt the same: the judge cache answered them all
    found = evalframes(chat_store)
    assert sorted(found) == sorted(chat_store.traces[s][0] for s in CHATS)  # on each session's first trace
    [results] = sorted(tmp_path.glob("outputs/*/*/results.jsonl"))[-1:]
    items = [json.loads(line) for line in results.read_text().splitlines()]
    assert {i["id"]: i["scores"]["chat_quality"]["score"] for i in items} == {
        "chat-ada": 1.0,  # 6 turns: 5
        "chat-bob": 0.75,  # 4 turns
        "chat-cid": 1.0,  # 5 turns (a failed turn has no reply)
        "chat-dee": 0.25,  # 2 turns
    }
    assert all(i["record"]["session_traces"][0]["trace_id"] == i["trace_id"] for i in items)
    # The run is linked to every trace of the sessions it judged (its Traces tab), not the stray one.
    client = mlflow.MlflowClient(chat_store.uri)
    [run] = client.search_runs([chat_store.experiment_id])
    linked = client.search_traces(
        locations=[chat_store.experiment_id], run_id=run.info.run_id, include_spans=False
    )
    assert sorted(t.info.trace_id for t in linked) == sorted(t for s in CHATS for t in chat_store.traces[s])
    sessions.append(f"dataset.tracking_uri={chat_store.uri}")

    # Another machine (an empty judge cache), the same store: nothing to judge, nothing written twice.
    said = evalframe(*sessions, "tracking=none", EVALFRAME_CACHE_DIR=str(tmp_path / "empty"))
    assert scripted.count() == asked and f"nothing to judge: {len(CHATS)} session(s) already judged" in said
    assert evalframes(chat_store).keys() == found.keys()


def test_sessions_without_an_input_selector_stop_before_any_request(
    chat_store: Chats, scripted: ScriptedModel, tmp_path: Path
) -> None:
    done = run_cli(
        [
            "dataset=mlflow_traces",
            f"dataset.experiment={chat_store.experiment}",
            f"dataset.tracking_uri={chat_store.uri}",
            "dataset.sessions=true",
            "dataset.columns.input=null",
            "scorer=answer_relevancy",
            *fake_model(scripted),
            "tracking=none",
        ],
        tmp_path,
    )
    assert done.returncode == 2 and scripted.count() == 0
    assert "Traceback" not in done.stderr and "set it to a selector" in done.stderr
