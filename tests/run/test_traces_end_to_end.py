"""A traced RAG app's store (tests/traced_app.py: OK and ERROR traces, RETRIEVER and TOOL spans,
expectations, tags, sessions) judged through the command line as a user types it, `dataset=mlflow_traces`
with the scripted judge: the verdicts land on the traces, once, on exactly the traces the filter and the
sample select."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_app import Seeded, documents_prompt, in_rank_order, verdicts

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
