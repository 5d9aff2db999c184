"""Answer relevancy: the pure score on hand-computed cases, and end to end against the fake judge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalframe.errors import ConfigError
from evalframe.run import pipeline
from evalframe.scorers.answer_relevancy import (
    AnswerRelevancy,
    Verdict,
    reason_from_verdicts,
    score,
    verdicts_reply,
)
from tests.conftest import Judge, compose, fake_model
from tests.fake_judge import fenced, judge, units
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest

# --- the pure score -------------------------------------------------------------------------------


def verdicts(*kinds: str) -> list[Verdict]:
    return [Verdict.model_validate({"verdict": k, "reason": ""}) for k in kinds]


@pytest.mark.parametrize(
    ("kinds", "weight", "expected"),
    [
        (("yes",), 0.5, 1.0),
        (("no",), 0.5, 0.0),
        (("yes", "yes", "no"), 0.5, 0.67),  # 2/3
        (("yes", "unsure"), 0.5, 0.75),  # (1 + 0.5) / 2
        (("yes", "unsure"), 0.3, 0.65),  # Mastra's weight: (1 + 0.3) / 2
        (("unsure", "unsure", "unsure"), 0.5, 0.5),
        (("unsure", "unsure", "unsure"), 0.3, 0.3),
        (("yes", "no", "no", "unsure"), 0.5, 0.38),  # 1.5 / 4 = 0.375 -> half up
        (("yes", "no", "no", "unsure"), 0.3, 0.33),  # 1.3 / 4 = 0.325 -> half up
        (("unsure", "no", "yes"), 0.3, 0.43),  # 1.3 / 3 = 0.4333
        ((), 0.5, 0.0),  # no statements
        ((), 0.3, 0.0),
    ],
)
def test_score_formula(kinds: tuple[str, ...], weight: float, expected: float) -> None:
    assert score(verdicts(*kinds), weight) == expected


def test_the_default_weight_is_half_and_scale_multiplies() -> None:
    assert score(verdicts("unsure")) == 0.5
    assert score(verdicts("yes", "unsure"), 0.5, scale=10) == 7.5


def test_reason_names_irrelevant_and_unsure_statements() -> None:
    statements = ["Water is wet", "My favourite drink is tea", "212 degrees Fahrenheit"]
    reason = reason_from_verdicts(statements, verdicts("unsure", "no", "yes"), 0.5)
    assert reason.startswith("Score 0.5: 1 of 3 statements address the question.")
    assert "Irrelevant: “My favourite drink is tea”." in reason and "Unsure: “Water is wet”." in reason


def test_the_schema_asks_for_one_verdict_per_statement() -> None:
    schema = verdicts_reply(2).model_json_schema()
    keyed = schema["$defs"]["StatementVerdicts"]
    assert keyed["required"] == ["0", "1"] and keyed["additionalProperties"] is False
    reply = {"verdicts": {"0": {"verdict": "yes", "reason": ""}, "1": {"verdict": "no", "reason": ""}}}
    verdicts_reply(2).model_validate(reply)
    with pytest.raises(ValidationError, match=r"verdicts\.1\n  Extra inputs"):
        verdicts_reply(1).model_validate(reply)
    with pytest.raises(ValidationError, match=r"verdicts\.2\n  Field required"):
        verdicts_reply(3).model_validate(reply)
    with pytest.raises(ValidationError, match=r"verdicts\.0\.verdict"):
        verdicts_reply(1).model_validate({"verdicts": {"0": {"verdict": "maybe", "reason": ""}}})


def test_config_needs_no_ground_truth_and_weight_is_checked() -> None:
    spec = compose(["scorer=answer_relevancy"])["scorers"]["answer_relevancy"]
    assert spec["require_ground_truth"] is False and spec["uncertainty_weight"] == 0.5
    assert spec["model"]["name"] and spec["prompt_dir"] is None
    with pytest.raises(ConfigError, match="uncertainty_weight"):
        AnswerRelevancy(model=spec["model"], uncertainty_weight=1.5)


# --- end to end against the fake judge ------------------------------------------------------------------

# The scripted judge's verdicts; any other statement is relevant.
VERDICTS = {
    "Water is wet": "unsure",  # on the topic (water), barely answers the question
    "My favourite drink is tea": "no",
    "World War II ended in 1918": "unsure",  # on topic but wrong: relevance, not correctness
}


def step(request: FakeRequest) -> str | None:
    fields = set((request.schema or {}).get("properties", {}))
    return "statements" if "statements" in fields else "verdicts" if "verdicts" in fields else None


def relevancy_judge(request: FakeRequest) -> str | dict[str, Any]:
    kind = step(request)
    if kind == "statements":
        return {"statements": units(fenced(request)["OUTPUT"])}
    if kind == "verdicts":
        statements = json.loads(fenced(request)["STATEMENTS"])
        verdicts = {
            str(i): {"verdict": VERDICTS.get(s, "yes"), "reason": "scripted"}
            for i, s in enumerate(statements)
        }
        return {"verdicts": verdicts}
    return judge(request)


def relevancy(server: Judge, *extra: str) -> list[str]:
    return ["scorer=answer_relevancy", *fake_model(server), "tracking=none", *extra]


def test_sample_rows_are_scored_through_the_fake_judge(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = relevancy_judge
    result, code = pipeline.evaluate(compose(relevancy(scripted, "dataset.limit=6")), tmp_path)
    assert code == 0 and result.summaries["answer_relevancy"].scored == 6
    assert [i.scores["answer_relevancy"].score for i in result.items] == [1.0] * 6
    first = result.items[0].scores["answer_relevancy"]
    assert [s.step for s in first.steps] == ["statements", "verdicts"]
    assert first.details["statements"] == ["The capital of France is Paris"]
    assert [step(r) for r in scripted.requests].count("verdicts") == 6


ROWS: list[dict[str, Any]] = [
    {
        "id": "offtopic",
        "input": "What is the boiling point of water in Fahrenheit?",
        "ground_truth": "212 degrees Fahrenheit.",
        "output": "Water is wet. My favourite drink is tea. 212 degrees Fahrenheit.",
    },
    {"id": "wrong", "input": "When did World War II end?", "output": "World War II ended in 1918."},
    {"id": "empty", "input": "What is the largest ocean?", "ground_truth": "Pacific", "output": "  "},
    {"id": "error", "input": "What is 2+2?", "output": "Error: the model timed out"},
    {"id": "object", "input": "Who is it?", "ground_truth": {"marker": "zebra-42"}, "output": "A zebra."},
]


def test_verdicts_weight_and_edge_cases(scripted: ScriptedModel, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    scripted.responder = relevancy_judge
    overrides = relevancy(scripted, "dataset=jsonl", f"dataset.path={path}")
    result, code = pipeline.evaluate(compose(overrides), tmp_path / "a")
    by_id = {i.id: i.scores["answer_relevancy"] for i in result.items}
    assert code == 0
    assert by_id["offtopic"].score == 0.5  # (1 yes + 0.5 x 1 unsure) / 3
    assert "Irrelevant: “My favourite drink is tea”" in by_id["offtopic"].reason
    assert by_id["wrong"].score == 0.5  # no ground truth needed; on-topic but wrong is "unsure"
    assert by_id["empty"].score == 0.0 and "empty" in by_id["empty"].reason and not by_id["empty"].steps
    assert by_id["error"].score == 0.0 and "error message" in by_id["error"].reason
    assert by_id["object"].score == 1.0
    # Non-string ground truth arrives as JSON text, and relevancy never shows it to the judge.
    assert result.items[4].ground_truth == '{"marker": "zebra-42"}'
    sent = "\n".join(m["content"] for r in scripted.requests for m in r.messages)
    assert "zebra-42" not in sent and "timed out" not in sent
    assert len(scripted.requests) == 3 * 2  # two steps for each of the three non-empty answers

    # Mastra's weight re-scores the same (cached) verdicts without a single model call.
    scripted.reset()
    mastra, _ = pipeline.evaluate(
        compose([*overrides, "scorers.answer_relevancy.uncertainty_weight=0.3"]), tmp_path / "b"
    )
    by_id = {i.id: i.scores["answer_relevancy"] for i in mastra.items}
    assert by_id["offtopic"].score == 0.43 and by_id["wrong"].score == 0.3
    assert scripted.count() == 0


def test_a_wrong_verdict_count_is_retried_with_the_error_then_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def one_too_many(request: FakeRequest) -> str | dict[str, Any]:
        reply = relevancy_judge(request)
        if step(request) == "verdicts" and "H2O" in fenced(request)["STATEMENTS"]:
            assert isinstance(reply, dict)
            reply["verdicts"]["1"] = reply["verdicts"]["0"]  # a verdict for a statement that is not there
        return reply

    scripted.responder = one_too_many
    result, code = pipeline.evaluate(
        compose(relevancy(scripted, "dataset.limit=6", "model.reply_retries=2")), tmp_path
    )
    water = result.items[1].scores["answer_relevancy"]
    assert not water.scored and water.error
    assert water.error.startswith("verdicts: invalid reply after 3 attempt(s)")
    asked = [r for r in scripted.requests if step(r) == "verdicts" and "H2O" in fenced(r)["STATEMENTS"]]
    assert len(asked) == 3  # the first try and two retries, each told what was wrong
    assert "verdicts.1: Extra inputs are not permitted" in asked[-1].messages[-1]["content"]
    assert result.summaries["answer_relevancy"].scored == 5 and code == 4  # 1 of 6 > max_unscored_rate
