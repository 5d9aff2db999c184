"""A traced RAG app's store (tests/traced_app.py: OK and ERROR traces, RETRIEVER and TOOL spans,
expectations, tags, sessions) judged through the command line as a user types it, `dataset=mlflow_traces`
with the scripted judge: the verdicts land on the traces, once, on exactly the traces the filter and the
sample select."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.entities import AssessmentSource, AssessmentSourceType

from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_app import Seeded, documents_prompt, feedbacks, in_rank_order, logging_to, verdicts

BOTH = "scorer=[faithfulness,tool_call_accuracy]"


def evalframe(store: Seeded, scripted: ScriptedModel, cwd: Path, *args: str, **env: str) -> Any:
    done = run_cli([*store.overrides(), *fake_model(scripted), *args], cwd, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_one_verdict_per_scorer_on_each_ok_trace_none_on_errors_and_none_twice(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    # The first 20 OK traces carry expected tool calls; ERROR traces 5, 11 and 17 sit among them.
    evalframe(traced_store, scripted, tmp_path, BOTH, "dataset.limit=20")
    assert scripted.count() > 0
    judged = verdicts(traced_store)
    assert sorted(judged) == sorted(traced_store.ok[:20])
    assert all(names == Counter({"faithfulness": 1, "tool_call_accuracy": 1}) for names in judged.values())
    assert not set(judged) & set(traced_store.error)
    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = {i["id"]: i for i in map(json.loads, journal.read_text().splitlines())}
    asked = {m["content"] for r in scripted.requests for m in r.messages}
    for trace_id, item in items.items():
        assert item["scores"]["faithfulness"]["error"] is None, item["scores"]["faithfulness"]
        # Its verdict step's prompt, as the judge received it, lists the trace's documents in rank order.
        prompt = documents_prompt(item["scores"]["faithfulness"])
        assert prompt in asked
        assert in_rank_order(prompt, [d.page_content for d in traced_store.documents[trace_id]]), trace_id
        assert item["scores"]["tool_call_accuracy"]["score"] == 1.0  # made the calls expected

    scripted.reset()  # another machine: an empty judge cache, the same store
    again = evalframe(
        traced_store,
        scripted,
        tmp_path,
        BOTH,
        "dataset.limit=20",
        EVALFRAME_CACHE_DIR=str(tmp_path / "empty"),
    )
    assert scripted.count() == 0
    assert "already judged" in again.stderr
    assert verdicts(traced_store) == judged  # no second feedback


@pytest.mark.slow
def test_a_tag_filter_judges_exactly_the_tagged_traces(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    evalframe(traced_store, scripted, tmp_path, "scorer=faithfulness", "dataset.tags={team: billing}")
    billing_ok = set(traced_store.tags["team"]["billing"]) & set(traced_store.ok)
    assert billing_ok and set(verdicts(traced_store)) == billing_ok


@pytest.mark.slow
def test_samples_nest_across_scorers_and_runs(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    evalframe(traced_store, scripted, tmp_path, "scorer=faithfulness", "dataset.sample.rate=0.25")
    quarter = {t for t, names in verdicts(traced_store).items() if names["faithfulness"]}
    evalframe(
        traced_store,
        scripted,
        tmp_path,
        "scorer=answer_relevancy",
        "dataset.sample.rate=0.5",
    )
    judged = verdicts(traced_store)
    half = {t for t, names in judged.items() if names["answer_relevancy"]}
    assert quarter and quarter < half < set(traced_store.ok)


@pytest.mark.slow
def test_a_scorer_is_not_applicable_to_the_traces_without_what_it_needs(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    """Production traces carry expectations on a few: of the 30 OK traces, the first 20 carry
    expected_tool_calls. tool_call_accuracy judges those and is not applicable to the other 10 (said,
    counted, and so written on their traces), beside faithfulness on all 30; once a reviewer adds the
    expectation to one of them, the next run judges that trace again."""
    store = traced_store
    done = evalframe(store, scripted, tmp_path, BOTH)
    assert (
        "not applicable: tool_call_accuracy on 10 trace(s) without expected_tool_calls "
        "(read from expectation:expected_tool_calls)" in done.stderr
    )
    assert "tool_call_accuracy: 10 not applicable" in done.stdout + done.stderr
    both = Counter({"faithfulness": 1, "tool_call_accuracy": 1})
    assert verdicts(store) == dict.fromkeys(store.ok, both)
    for trace_id in store.ok:
        [accuracy] = [a for a in feedbacks(store)[trace_id] if a.name == "tool_call_accuracy"]
        if trace_id in store.expected:
            assert accuracy.value == 1.0 and accuracy.feedback.error is None
        else:
            assert accuracy.value is None and accuracy.feedback.error.error_code == "NOT_APPLICABLE"
            assert accuracy.metadata["evalframe.missing"] == "expected_tool_calls"

    late = store.ok[25]  # a reviewer gives its expectation since
    reviewer = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="reviewer@example.com")
    with logging_to(store.uri):
        mlflow.log_expectation(
            trace_id=late, name="expected_tool_calls", value=store.tool_calls[late], source=reviewer
        )
    scripted.reset()
    again = evalframe(store, scripted, tmp_path, BOTH, EVALFRAME_CACHE_DIR=str(tmp_path / "empty"))
    assert "29 trace(s) skipped" in again.stderr and scripted.count() == 0  # faithfulness's is reused
    assert verdicts(store) == dict.fromkeys(store.ok, both)
    accuracy = [a for a in feedbacks(store)[late] if a.name == "tool_call_accuracy"]
    [old] = [a for a in accuracy if not a.valid]
    [new] = [a for a in accuracy if a.valid]
    assert new.value == 1.0 and new.overrides == old.assessment_id


@pytest.mark.slow
def test_a_scorer_no_trace_applies_to_stops_the_run_before_any_call(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    wrong = "dataset.columns.expected_tool_calls=expectation:expected_calls"  # no trace has one
    done = run_cli([*traced_store.overrides(), *fake_model(scripted), BOTH, wrong], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"(id {traced_store.ok[0]}): no expected_tool_calls" in line
    assert "scorer tool_call_accuracy needs (and no other row has one)" in line
    assert "expectation:expected_calls" in line
    assert scripted.count() == 0 and verdicts(traced_store) == {}
