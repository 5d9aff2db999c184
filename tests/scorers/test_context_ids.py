"""context_precision_ids and context_recall_ids: RAGAS' id-based formulas (sets of ids, no model call),
the empty rule, and both through the real pipeline with the rows' id columns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalframe.errors import ConfigError, DataError
from evalframe.run import pipeline
from evalframe.scorers.context_ids import ContextPrecisionIds, ContextRecallIds
from tests.conftest import compose


@pytest.mark.parametrize(
    ("retrieved", "reference", "precision", "recall"),
    [
        (["d1", "d2"], ["d1", "d2"], 1.0, 1.0),
        (["d1", "d7", "d9"], ["d1", "d2"], 0.3333, 0.5),  # 1 of 3 retrieved relevant; 1 of 2 found
        (["d7", "d1"], ["d1"], 0.5, 1.0),  # rank does not matter: d1 second counts as first would
        (["d1", "d1", "d7"], ["d1", "d1"], 0.5, 1.0),  # repeats count once: {d1, d7} and {d1}
        (["d7"], ["d1"], 0.0, 0.0),
        (["d7"], [], 0.0, math.nan),  # nothing relevant exists: precision 0, recall has nothing to find
        ([], ["d1"], math.nan, 0.0),  # nothing retrieved: precision has nothing to judge, recall 0
    ],
)
def test_ragas_id_based_formulas(
    retrieved: list[str], reference: list[str], precision: float, recall: float
) -> None:
    for scorer, expected in ((ContextPrecisionIds(), precision), (ContextRecallIds(), recall)):
        got = scorer.score_ids(retrieved, reference).score
        assert got == pytest.approx(expected, abs=1e-4, nan_ok=True), (scorer.key, retrieved, reference)


def test_the_empty_rule_and_reasons() -> None:
    unscored = ContextPrecisionIds().score_ids([], ["d1"])
    assert unscored.not_applicable and "no context id was retrieved" in unscored.reason
    assert ContextPrecisionIds(empty=1).score_ids([], []).score == 1.0
    assert ContextRecallIds(empty=0).score_ids(["d1"], []).score == 0.0
    assert ContextPrecisionIds().score_ids(["d1", "d7"], ["d1"]).reason == (
        "1 of 2 retrieved ids are in the reference; not in the reference: d7."
    )
    assert ContextRecallIds().score_ids(["d1"], ["d1", "d2"]).reason == (
        "1 of 2 reference ids were retrieved; not retrieved: d2."
    )
    with pytest.raises(
        ConfigError, match=r"scorers\.context_recall_ids\.empty='never' is not a rule; use unscored, 0 or 1"
    ):
        ContextRecallIds(empty="never")


def test_through_the_pipeline_and_refused_without_the_id_columns(tmp_path: Path) -> None:
    path = tmp_path / "rag.jsonl"
    records = [
        {"id": "a", "input": "Q?", "context_ids": ["d1", 2], "reference_context_ids": ["d1"]},
        {"id": "b", "input": "Q?", "context_ids": ["d3"], "reference_context_ids": ["d1", "2"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    base = ["dataset=jsonl", f"dataset.path={path}", "dataset.columns.output=input", "tracking=none"]
    scorers = "scorer=[context_precision_ids,context_recall_ids]"
    result, code = pipeline.evaluate(compose([*base, scorers]), tmp_path / "run")
    assert code == 0 and result.stats.calls == 0
    # a: precision 1/2 (the number 2 is the id "2", not in ["d1"]), recall 1/1; b: 0/1 and 0/2.
    assert list(result.scores["context_precision_ids"]) == [0.5, 0.0]
    assert list(result.scores["context_recall_ids"]) == [1.0, 0.0]
    path.write_text(json.dumps({"id": "c", "input": "Q?", "context_ids": ["d1"]}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"no reference_context_ids, which scorer context_recall_ids needs"):
        pipeline.evaluate(compose([*base, "scorer=context_recall_ids"]), tmp_path / "refused")
