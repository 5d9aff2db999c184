"""Ground-truth similarity: the pure score on the seed examples, and end to end against the fake judge,
including that it shares answer similarity's extraction requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalframe.paths import SAMPLE_DATASET
from evalframe.run import pipeline
from evalframe.scorers.ground_truth_similarity import (
    Comparison,
    comparisons_reply,
    reason_from_comparisons,
    score,
)
from tests.conftest import Judge, compose, fake_model
from tests.fake_judge import fenced, judge, step_of, words
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest

# --- the pure score, on scripted step results -------------------------------------------------------

FRANCE = ["The capital of France is Paris", "The official language of France is French"]


def scored(reference: list[str], response: list[str], matches: list[int | None], scale: float = 1.0) -> float:
    """The score of scripted extraction and comparison results: matches[i] is the response statement
    that states reference[i] (None: none does)."""
    comparisons = [
        Comparison(reference_statement=r, response_index=m, explanation="")
        for r, m in zip(reference, matches, strict=True)
    ]
    return score(comparisons, len(response), scale)


@pytest.mark.parametrize(
    ("reference", "response", "matches", "expected"),
    [
        pytest.param(
            FRANCE,
            ["Paris is the capital of France", "People in France speak French"],
            [0, 1],
            1.0,
            id="france-both",
        ),
        pytest.param(FRANCE, ["The capital of France is Paris"], [0, None], 0.5, id="france-capital-only"),
        pytest.param(
            FRANCE,
            ["The capital of France is Paris", "The official language of France is English"],
            [0, None],
            0.5,
            id="france-language-wrong",
        ),
        pytest.param(
            ["Amy likes apples", "Amy likes bananas"],
            ["Amy likes apples", "Amy likes berries", "Amy likes plums"],
            [0, None],
            0.33,
            id="amy-fruit",  # 1 / max(2, 3)
        ),
        pytest.param(
            ["Water boils at 100 degrees Celsius at sea level"],
            ["At sea level, water reaches its boiling point at 100 °C"],
            [0],
            1.0,
            id="paraphrase-one-fact",
        ),
        pytest.param(
            FRANCE,
            ["French is spoken in France", "Paris is the French capital"],
            [1, 0],
            1.0,
            id="two-facts-other-order",
        ),
        pytest.param(
            FRANCE,
            ["Paris is the capital of France, and people there speak French"],
            [0, 0],
            1.0,
            id="one-statement-states-both",
        ),
        pytest.param(["Alex likes blue cars"], ["Alex likes all cars"], [None], 0.0, id="alex-cars"),
        pytest.param(["Alex likes blue cars"], [], [None], 0.0, id="empty-response"),
        pytest.param([], ["Alex likes all cars"], [], 0.0, id="empty-reference"),
    ],
)
def test_seed_examples(
    reference: list[str], response: list[str], matches: list[int | None], expected: float
) -> None:
    assert scored(reference, response, matches) == expected


def test_rounding_and_scale() -> None:
    assert scored(["a", "b", "c"], ["x", "y", "z"], [0, 1, None]) == 0.67  # 2/3
    assert scored(["a"], ["x", "y", "z", "w", "v", "u", "t", "s"], [0]) == 0.13  # 0.125 rounds half up
    assert scored(FRANCE, ["x"], [0, None], scale=10) == 5.0


def test_comparisons_are_one_per_reference_statement_with_a_valid_index() -> None:
    entry = {"response_index": 0, "explanation": ""}
    reply = comparisons_reply(1, 1)
    assert reply.model_validate({"comparisons": {"0": entry}}).model_dump(by_alias=True) == {
        "comparisons": {"0": entry}
    }
    with pytest.raises(ValidationError, match=r"comparisons\.1"):
        reply.model_validate({"comparisons": {"0": entry, "1": entry}})
    with pytest.raises(ValidationError, match="response_index"):
        reply.model_validate({"comparisons": {"0": {**entry, "response_index": 3}}})
    schema = comparisons_reply(2, 3).model_json_schema()
    index = schema["$defs"]["StatementComparison"]["properties"]["response_index"]
    assert index["anyOf"] == [{"type": "integer", "enum": [0, 1, 2]}, {"type": "null"}]
    assert schema["$defs"]["ReferenceComparisons"]["required"] == ["0", "1"]


def test_reason_names_what_the_response_does_not_state() -> None:
    comparisons = [
        Comparison(reference_statement=FRANCE[0], response_index=0, explanation=""),
        Comparison(reference_statement=FRANCE[1], response_index=None, explanation=""),
    ]
    reason = reason_from_comparisons(comparisons, 2, 0.5)
    assert reason.startswith("Score 0.5: the response states 1 of 2 reference statements")
    assert f"“{FRANCE[1]}”" in reason and f"“{FRANCE[0]}”" not in reason


def test_config_requires_ground_truth() -> None:
    spec = compose(["scorer=ground_truth_similarity"])["scorers"]["ground_truth_similarity"]
    assert spec["require_ground_truth"] is True and spec["model"]["name"]
    assert spec["prompt_dir"] is None and spec["extract_prompt_dir"] is None


# --- end to end against the fake judge ------------------------------------------------------------------


STOPWORDS = {"the", "a", "an", "is", "are", "of", "in", "at", "and", "to", "there", "its"}


def _states(reference: str, response: str) -> bool:
    """A literal-minded comparison: at least half the reference's content words, and no single swapped
    word ("likes blue cars" vs "likes all cars", "French" vs "English")."""
    ref, res = words(reference) - STOPWORDS, words(response) - STOPWORDS
    swapped = len(ref & res) >= 2 and len(ref - res) == 1 and len(res - ref) == 1
    return bool(ref) and not swapped and len(ref & res) / len(ref) >= 0.5


def compare_judge(request: FakeRequest) -> str | dict[str, Any]:
    if "comparisons" not in (request.schema or {}).get("properties", {}):
        return judge(request)  # extraction: the shared fake judge's sentence splitter
    blocks = fenced(request)
    reference = json.loads(blocks["REFERENCE_STATEMENTS"])
    response = json.loads(blocks["RESPONSE_STATEMENTS"])
    comparisons = {}
    for position, statement in enumerate(reference):
        index = next((i for i, r in enumerate(response) if _states(statement, r)), None)
        comparisons[str(position)] = {"response_index": index, "explanation": "."}
    return {"comparisons": comparisons}


def gts(server: Judge, *extra: str) -> list[str]:
    return ["scorer=ground_truth_similarity", *fake_model(server), "tracking=none", *extra]


def sample_rows(tmp_path: Path, *ids: str) -> Path:
    rows = [json.loads(line) for line in SAMPLE_DATASET.read_text().splitlines()]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["id"] in ids))
    return path


def test_sample_rows_are_scored_through_the_fake_judge(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = compare_judge
    result, code = pipeline.evaluate(compose(gts(scripted, "dataset.limit=6")), tmp_path)
    assert code == 0 and result.summaries["ground_truth_similarity"].scored == 6
    scores = {i.id: i.scores["ground_truth_similarity"].score for i in result.items}
    assert scores["exact-capital"] == scores["exact-water"] == 1.0
    assert scores["partial-continents"] == 0.5  # 1 of 2 reference statements
    first = result.items[0].scores["ground_truth_similarity"]
    assert [s.step for s in first.steps] == ["extract", "extract", "compare"]


SEEDS = {
    "seed-france-both": 1.0,
    "seed-france-capital-only": 0.5,
    "seed-france-language-wrong": 0.5,
    "seed-amy-fruit": 0.33,
    "seed-alex-cars": 0.0,
    "exact-capital": 1.0,
    "empty-output": 0.0,
    "nonstring-number": 1.0,
    "nonstring-list": 1.0,  # the JSON list is one statement; the response names all three colours
}


def test_seed_rows_end_to_end(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = compare_judge
    path = sample_rows(tmp_path, *SEEDS)
    result, code = pipeline.evaluate(
        compose(gts(scripted, "dataset=jsonl", f"dataset.path={path}")), tmp_path
    )
    assert code == 0
    assert {i.id: i.scores["ground_truth_similarity"].score for i in result.items} == SEEDS
    empty = next(i for i in result.items if i.id == "empty-output").scores["ground_truth_similarity"]
    assert "empty" in empty.reason and not empty.steps  # a known 0 costs no call
    # Non-string ground truth is extracted as its JSON text.
    texts = {fenced(r)["TEXT"] for r in scripted.requests if step_of(r) == "SemanticUnits"}
    assert {"8", '["red", "green", "blue"]'} <= texts


def test_missing_ground_truth_scores_zero_when_not_required(scripted: ScriptedModel, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [
        {"input": "Capital of France?", "ground_truth": "Paris.", "output": "Paris."},
        {"input": "Q?", "output": "A."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scripted.responder = compare_judge
    overrides = gts(scripted, "dataset=jsonl", f"dataset.path={path}")
    with pytest.raises(Exception, match=r"no ground_truth"):
        pipeline.evaluate(compose(overrides), tmp_path / "a")
    overrides.append("scorers.ground_truth_similarity.require_ground_truth=false")
    result, code = pipeline.evaluate(compose(overrides), tmp_path / "b")
    missing = result.items[1].scores["ground_truth_similarity"]
    assert code == 0 and missing.score == 0.0 and "No ground truth" in missing.reason
    assert result.items[0].scores["ground_truth_similarity"].score == 1.0
    assert all("A." not in fenced(r).values() for r in scripted.requests)  # no call for the row


def test_a_wrong_comparison_count_is_retried_with_the_error_then_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def one_too_many(request: FakeRequest) -> str | dict[str, Any]:
        reply = compare_judge(request)
        if "comparisons" in (request.schema or {}).get("properties", {}) and "H2O" in str(fenced(request)):
            assert isinstance(reply, dict)
            reply["comparisons"]["1"] = reply["comparisons"]["0"]  # one for a statement not there
        return reply

    scripted.responder = one_too_many
    result, code = pipeline.evaluate(
        compose(gts(scripted, "dataset.limit=6", "model.reply_retries=2")), tmp_path
    )
    water = result.items[1].scores["ground_truth_similarity"]
    assert not water.scored and water.error
    assert water.error.startswith("compare: invalid reply after 3 attempt(s)")
    asked = [r for r in scripted.requests if r.messages[-1]["content"].startswith("That reply is invalid")]
    assert len(asked) == 2
    assert "comparisons.1: Extra inputs are not permitted" in asked[-1].messages[-1]["content"]
    assert result.summaries["ground_truth_similarity"].scored == 5 and code == 4


def units_requests(server: Judge) -> int:
    return sum("units" in (r.schema or {}).get("properties", {}) for r in server.requests)


def test_shares_extraction_requests_with_answer_similarity(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = compare_judge
    common = [
        *fake_model(scripted),
        "tracking=none",
        "cache.mode=off",
    ]  # sharing within the run, not the cache
    alone, _ = pipeline.evaluate(compose(["scorer=answer_similarity", *common]), tmp_path / "a")
    extractions = units_requests(scripted)
    scripted.reset()
    both, _ = pipeline.evaluate(
        compose(["scorer=[answer_similarity,ground_truth_similarity]", *common]), tmp_path / "b"
    )
    assert extractions > 0 and units_requests(scripted) == extractions
    assert both.summaries["ground_truth_similarity"].scored == len(both.items) == len(alone.items)
    # answer similarity's scores are untouched by the company
    assert [i.scores["answer_similarity"].score for i in both.items] == [
        i.scores["answer_similarity"].score for i in alone.items
    ]
