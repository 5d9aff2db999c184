"""An empty or whitespace-only output scores 0 with the reason "empty output" and costs no model call,
for every judge scorer, custom judges included; a custom judge may opt out (empty_output: judge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import ConfigError
from evalframe.run import pipeline
from evalframe.scorers.judge import Judge
from tests.conftest import compose, fake_model
from tests.scorers.test_constrained_judges import FORMS
from tests.scripted import ScriptedModel
from tests.testserver import constrained_decoder

EMPTY = ["", "   ", "\n\t "]


def config(scripted: ScriptedModel, tmp_path: Path, case: str, *extra: str) -> dict[str, Any]:
    data = tmp_path / "rows.jsonl"
    rows = [
        {"id": f"r{i}", "input": "Q?", "ground_truth": "Paris.", "output": out} for i, out in enumerate(EMPTY)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scorer = "factuality" if case.startswith("judge:") else case
    cfg = compose(
        [
            f"scorer={scorer}",
            *fake_model(scripted),
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={data}",
            *extra,
        ]
    )
    if case.startswith("judge:"):
        cfg["scorers"]["factuality"]["output"] = FORMS[case.split(":")[1]]
    return cfg


@pytest.mark.parametrize(
    "case",
    [
        "answer_similarity",
        "answer_relevancy",
        "ground_truth_similarity",
        "factuality",
        *(f"judge:{f}" for f in FORMS),
    ],
)
def test_empty_output_scores_zero_without_a_call(scripted: ScriptedModel, tmp_path: Path, case: str) -> None:
    scripted.responder = constrained_decoder()  # would score something: any call shows
    result, code = pipeline.evaluate(config(scripted, tmp_path, case), tmp_path / "out")
    name = "factuality" if case.startswith("judge:") else case
    assert code == 0 and scripted.count() == 0
    assert [(i.scores[name].score, i.scores[name].reason) for i in result.items] == [
        (0.0, "empty output")
    ] * 3


def test_a_custom_judge_may_judge_empty_outputs(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = lambda req: {"reason": "a refusal is fine here", "choice": "same"}
    cfg = config(scripted, tmp_path, "factuality", "scorers.factuality.empty_output=judge")
    result, code = pipeline.evaluate(cfg, tmp_path / "out")
    assert code == 0 and scripted.count() == 3
    assert [i.scores["factuality"].score for i in result.items] == [1.0] * 3
    assert result.items[0].scores["factuality"].reason == "same: a refusal is fine here"


def test_empty_output_option_is_checked() -> None:
    spec = compose(["scorer=factuality"])["scorers"]["factuality"]
    assert spec["empty_output"] == "zero"
    spec = {k: v for k, v in spec.items() if k != "_target_"}
    with pytest.raises(ConfigError, match="empty_output='skip' is not an option"):
        Judge(**{**spec, "empty_output": "skip"})
