"""A live target traced with MLflow (issue 24 item 7): the traced RAG app of tests/traced_app.py called
for each row, each item judged on what its own call's trace holds (the RETRIEVER span's documents, the
TOOL spans), with that trace's id, and no change to the app's code. The runs take seconds: a real
SQLite store that the app's traces and the run go to, and MLflow's background trace writer waited for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalframe.models.steps import StepResult
from evalframe.targets.traced import FROM_TRACE, Traced
from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_app import QUESTIONS, calls_for, documents_for, documents_prompt, in_rank_order, logging_to

# Questions the app answers without raising (every sixth of QUESTIONS raises), retrieving other documents.
ASKED = [q for n, q in enumerate(QUESTIONS[:12]) if n % 6 != 5]


def questions(path: Path, asked: list[str]) -> Path:
    """A dataset of questions only: the expected tool calls, and no contexts (the function retrieves)."""
    path.write_text(
        "".join(
            json.dumps({"id": f"q{n}", "input": q, "expected_tool_calls": calls_for(q)}) + "\n"
            for n, q in enumerate(asked)
        )
    )
    return path


def run(tmp_path: Path, scripted: ScriptedModel, fn: str, *extra: str) -> tuple[int, str, dict[str, Any]]:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # where the app's traces go, and the run
    with logging_to(store):  # where the app logs (its default experiment)
        done = run_cli(
            [
                "dataset=jsonl",
                f"dataset.path={questions(tmp_path / 'q.jsonl', ASKED)}",
                "target=python",
                f"target.fn={fn}",
                "target.provides=[contexts,context_ids,tool_calls]",
                "scorer=[faithfulness,tool_call_accuracy]",
                "concurrency=4",  # calls at once: each must be paired with its own trace
                "tracking.traces=false",  # the run's own per-item traces: not what is tested here
                *fake_model(scripted),
                *extra,
            ],
            tmp_path,
            env={"MLFLOW_TRACKING_URI": store},
        )
    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = {i["input"]: i for i in map(json.loads, journal.read_text().splitlines())}
    return done.returncode, done.stdout + done.stderr, items


@pytest.mark.parametrize("fn", ["tests.traced_app:answer", "tests.traced_app:answer_async"])
@pytest.mark.slow
def test_faithfulness_judges_a_traced_function_on_its_own_retrieval(
    fn: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    import mlflow

    code, output, items = run(tmp_path, scripted, fn)
    assert code == 0, output
    assert sorted(items) == sorted(ASKED)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for question, item in items.items():
        documents = [d.page_content for d in documents_for(question)]
        reply = item["target_step"]["reply"]
        assert reply["contexts"] == documents  # in rank order
        assert reply["context_ids"] == [d.metadata["doc_uri"] for d in documents_for(question)]
        # The trace the item names is the one its own call made (concurrent calls never swap theirs).
        trace = client.get_trace(reply["trace_id"])
        assert trace.data.spans[0].inputs == {"question": question}
        [retriever] = [s for s in trace.data.spans if s.span_type == "RETRIEVER"]
        assert reply["retriever_span_id"] == retriever.span_id
        faithfulness = item["scores"]["faithfulness"]
        assert faithfulness["error"] is None, faithfulness
        assert in_rank_order(documents_prompt(faithfulness), documents)
        # The tool calls are its TOOL spans: what the dataset expected.
        assert item["scores"]["tool_call_accuracy"]["score"] == 1.0, item["scores"]["tool_call_accuracy"]
    assert sum(1 for i in items.values() if i["target_step"]["reply"]["tool_calls"]) == 3


@pytest.mark.slow
def test_without_from_trace_or_a_trace_nothing_is_read(scripted: ScriptedModel, tmp_path: Path) -> None:
    code, output, items = run(tmp_path, scripted, "tests.traced_app:answer", "target.from_trace=null")
    assert code == 4, output  # every item unscored: the function handed over no contexts
    for item in items.values():
        assert "handed over no contexts" in item["target_step"]["error"]
        assert not (item["target_step"]["reply"] or {}).get("trace_id")
    assert scripted.count() == 0


def test_a_mappings_own_fields_win_over_the_traces() -> None:
    record: dict[str, Any] = {
        "trace_id": "tr-9",
        "spans": [  # a trace's record, as evalframe.tracking.trace_records makes it
            {"span_id": "root", "parent_id": None, "name": "app", "span_type": "CHAIN", "inputs": {}},
            {
                "span_id": "r",
                "parent_id": "root",
                "name": "r",
                "span_type": "RETRIEVER",
                "outputs": [{"page_content": "traced", "metadata": {"doc_uri": "t"}}],
            },
            {
                "span_id": "t",
                "parent_id": "root",
                "name": "clock",
                "span_type": "TOOL",
                "inputs": {"tz": "UTC"},
            },
        ],
    }
    traced = Traced(FROM_TRACE, "target.from_trace")
    step = StepResult("target", messages=[], reply={"output": None, "contexts": ["returned"]})
    traced.from_its_trace(record, step, "fn")
    # Its own contexts stay (and are no span's); what it did not return comes from the trace.
    assert step.reply == {
        "output": None,
        "contexts": ["returned"],
        "context_ids": ["t"],
        "tool_calls": [{"name": "clock", "arguments": {"tz": "UTC"}}],
        "trace_id": "tr-9",
    }
    plain = StepResult("target", messages=[])
    traced.from_its_trace(record, plain, "fn")
    assert (
        plain.reply is not None
        and plain.reply["contexts"] == ["traced"]
        and plain.reply["retriever_span_id"] == "r"
    )
    broken = StepResult("target", messages=[])
    record["spans"][1]["outputs"] = [{"page_content": "no id", "metadata": {}}]
    traced.from_its_trace(record, broken, "target.fn=app, item q1")
    assert broken.error is not None and broken.error.startswith("target.fn=app, item q1: document 0 of")


@pytest.mark.parametrize(
    ("from_trace", "message"),
    [
        (
            {"output": "root.outputs"},
            r"target.from_trace.output: a trace hands over contexts, context_ids, tool_calls only",
        ),
        (
            {"contexts": "span:RETRIEVER"},
            r"target.from_trace.contexts='span:RETRIEVER' is not a trace selector",
        ),
    ],
)
def test_a_bad_from_trace_is_a_config_error(from_trace: dict[str, str], message: str) -> None:
    from evalframe.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        Traced(from_trace, "target.from_trace")


@pytest.mark.slow
def test_a_run_leaves_mlflows_active_experiment_as_it_was(scripted: ScriptedModel, tmp_path: Path) -> None:
    """A run logs through MLflow's fluent API, which makes its experiment the process's active one: the
    next run's traced function (or the Python API user's own code) would log there, in another store."""
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    code, output, _ = run(tmp_path / "first", scripted, "tests.traced_app:answer")
    assert code == 0, output
    code, output, items = run(tmp_path / "second", scripted, "tests.traced_app:answer_async")
    assert code == 0, output  # its app's traces went to its own store, and were read from there
    assert all(i["target_step"]["reply"]["trace_id"] for i in items.values())
