"""The pure answer-similarity score function, on hand-computed cases."""

import math

import pytest

from evalframe.scorers.answer_similarity import (
    Analysis,
    Contradiction,
    Match,
    Penalties,
    reason_from_analysis,
    score,
)
from evalframe.scorers.base import round_half_up

DEFAULT = Penalties()


def analysis(*types: str, contradictions: int = 0, extras: int = 0) -> Analysis:
    return Analysis(
        matches=[
            Match.model_validate(
                {
                    "ground_truth_unit": f"g{i}",
                    "match_type": t,
                    "explanation": "",
                    "output_unit": None if t == "missing" else f"o{i}",
                }
            )
            for i, t in enumerate(types)
        ],
        contradictions=[
            Contradiction(output_unit=f"c{i}", ground_truth_unit="g0", explanation="")
            for i in range(contradictions)
        ],
        extra_info=[f"x{i}" for i in range(extras)],
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (analysis("exact", "exact", "missing"), 0.63),  # (2.4 - 0.15) / 3.6 = 0.625 -> half up
        (analysis("exact", extras=2), 0.90),  # 1 - min(2 x 0.05, 0.2)
        (analysis("partial"), 0.33),  # 0.4 / 1.2
        (analysis("exact", "exact", contradictions=1), 0.0),  # contradiction weight 1.0 wipes it out
        (analysis("exact"), 1.0),
        (analysis("semantic"), 0.67),  # 0.8 / 1.2 = 0.6667
        (analysis("semantic", "semantic"), 0.67),
        (analysis("missing"), 0.0),  # negative raw clamps to 0
        (analysis("exact", extras=10), 0.8),  # extra-info penalty capped at 0.2
        (analysis("exact", "semantic", "partial", "missing"), 0.47),  # (1.2+0.8+0.4-0.15)/4.8 = 0.46875
        (analysis(), 0.0),  # no ground-truth units
    ],
)
def test_reference_formula(case: Analysis, expected: float) -> None:
    assert score(case, DEFAULT) == expected


def test_weights_change_the_score_without_a_model_call() -> None:
    case = analysis("exact", "missing", contradictions=1)
    assert score(case, DEFAULT) == 0.0
    assert score(case, Penalties(contradiction=0.1)) == round_half_up((1.2 - 0.15) / 2.4 - 0.1)
    assert score(analysis("exact", "missing"), Penalties(missing=0.3)) == 0.38  # (1.2-0.3)/2.4 = 0.375


def test_scale_multiplies_after_clamping() -> None:
    assert score(analysis("exact"), DEFAULT, scale=10) == 10.0
    assert score(analysis("partial"), DEFAULT, scale=10) == 3.33


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.625, 0.63),
        (0.125, 0.13),
        (0.6249999999999999, 0.63),
        (0.624, 0.62),
        (1 / 3, 0.33),
        (2 / 3, 0.67),
        (0.0, 0.0),
    ],
)
def test_round_half_up(value: float, expected: float) -> None:
    assert round_half_up(value) == expected
    assert not math.isnan(round_half_up(value))


def test_reason_names_what_matched_missed_and_contradicted() -> None:
    case = analysis("exact", "partial", "missing", contradictions=1, extras=1)
    text = reason_from_analysis(case, score(case, DEFAULT))
    assert text.startswith("Score 0.0: 2 of 3 ground-truth units conveyed (1 exact, 1 partial).")
    assert "Only partly: “g1”" in text
    assert "Missing: “g2”" in text
    assert "Contradicts: “c0” vs “g0”" in text
    assert "Extra information: “x0”" in text


def test_unknown_penalty_key_is_rejected() -> None:
    with pytest.raises(ValueError, match="missing_penalty"):
        Penalties(missing_penalty=0.2)  # type: ignore[call-arg]
