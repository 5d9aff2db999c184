"""The bundled RAG sample (dataset=rag_sample) holds what README.md and its config promise, and every
no-call metric scores every row of it."""

from __future__ import annotations

from pathlib import Path

from evalframe.data.rows import load_rows
from evalframe.run import pipeline
from tests.conftest import compose


def test_the_rag_sample_holds_what_it_promises() -> None:
    config = compose(["dataset=rag_sample"])
    rows = load_rows(config["dataset"])
    assert len(rows) == 20 and config["dataset"]["name"] == "rag_sample"
    for row in rows:  # every row can be judged by every RAG and tool-call scorer
        assert row.ground_truth and row.contexts and 1 <= len(row.contexts) <= 4, row.id
        assert row.context_ids is not None and len(row.context_ids) == len(row.contexts), row.id
        assert row.reference_context_ids and row.tool_calls is not None, row.id
        assert row.expected_tool_calls is not None and row.available_tools is not None, row.id
    categories = {str(row.extra["category"]) for row in rows}
    for kind in ("contradicts", "beyond the contexts", "empty output", "no claims", "ranked second"):
        assert any(kind in c for c in categories), kind
    assert [r.id for r in rows if not (r.output or "").strip()] == ["empty-output"]
    assert any(len(set(r.context_ids or [])) < len(r.context_ids or []) for r in rows)  # a repeated chunk
    agents = [r for r in rows if r.expected_tool_calls]
    assert len(agents) == 8 and all(r.available_tools for r in agents)
    assert sum(1 for r in agents if not r.tool_calls) == 1  # the agent that made no call
    others = [r for r in rows if not r.expected_tool_calls]
    assert all(r.tool_calls == [] and r.available_tools == [] for r in others)


def test_every_no_call_metric_scores_every_row(tmp_path: Path) -> None:
    scorers = "scorer=[tool_call_accuracy,context_precision_ids,context_recall_ids]"
    result, code = pipeline.evaluate(compose([scorers, "dataset=rag_sample", "tracking=none"]), tmp_path)
    assert code == 0 and result.stats.calls == 0 and result.count == 20
    assert all(s.unscored == 0 for s in result.summaries.values())
    by_id = {i.id: i.scores["tool_call_accuracy"] for i in result.items}
    # The agent rows show each kind of mistake in their figures.
    assert by_id["agent-weather"].score == 1.0
    assert by_id["agent-weather-duplicate"].details["figures"]["precision"] == 0.5
    assert by_id["agent-weather-wrong-arg"].score == 0.0
    assert by_id["agent-flight-missing-call"].details["figures"]["recall"] == 0.5
    assert by_id["agent-flight-wrong-order"].details["figures"]["order"] == 0.5
    assert by_id["agent-currency-no-call"].score == 0.0
