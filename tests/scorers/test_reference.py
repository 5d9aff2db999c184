"""Exact match and token F1 (SQuAD-style), and agreement with human scores."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evalframe.results.agreement import agreement
from evalframe.run import pipeline
from evalframe.scorers.reference import exact_match, normalize, token_f1
from tests.conftest import compose


@pytest.mark.parametrize(
    ("text", "expected"),
    [("The Eiffel Tower!", "eiffel tower"), ("  an  apple, a day ", "apple day"), ("Theory", "theory")],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


@pytest.mark.parametrize(
    ("output", "truth", "em", "f1"),
    [
        ("Paris", "paris.", 1.0, 1.0),
        ("the city of Paris", "Paris", 0.0, 2 * (1 / 3) * 1 / (1 / 3 + 1)),  # P=1/3, R=1 -> 0.5
        ("Norman mercenary", "an Italo-Norman named Raoul", 0.0, 0.0),  # "italonorman" != "norman"
        ("red green blue", "blue green red", 0.0, 1.0),
        ("", "Paris", 0.0, 0.0),
        ("", "", 1.0, 1.0),
        ("1018", "1064", 0.0, 0.0),
    ],
)
def test_exact_match_and_token_f1(output: str, truth: str, em: float, f1: float) -> None:
    assert exact_match(output, truth) == em
    assert token_f1(output, truth) == pytest.approx(f1)


def test_agreement_on_hand_computed_cases() -> None:
    perfect = agreement([0.0, 0.5, 1.0], [0, 1, 2], human_range=(0, 2))
    assert perfect["spearman"] == pytest.approx(1.0) and perfect["pearson"] == pytest.approx(1.0)
    assert perfect["kendall"] == pytest.approx(1.0) and perfect["mae"] == pytest.approx(0.0)
    assert perfect["accuracy"] == 1.0 and perfect["kappa"] == pytest.approx(1.0)

    reversed_ = agreement([1.0, 0.5, 0.0], [0, 1, 2], human_range=(0, 2))
    assert reversed_["spearman"] == pytest.approx(-1.0)
    assert reversed_["mae"] == pytest.approx((1 + 0 + 1) / 3)

    # pass/fail at 0.5: ours P P F F, theirs P F F F -> accuracy 3/4;
    # kappa: po = 0.75, pe = 0.5*0.25 + 0.5*0.75 = 0.5, kappa = (0.75-0.5)/(1-0.5) = 0.5
    mixed = agreement([0.9, 0.6, 0.2, 0.1], [1.0, 0.0, 0.0, 0.0])
    assert mixed["accuracy"] == 0.75 and mixed["kappa"] == pytest.approx(0.5)


def test_unscored_items_are_left_out_of_agreement() -> None:
    result = agreement([0.0, math.nan, 1.0], [0, 2, 2], human_range=(0, 2))
    assert result["n"] == 2 and result["spearman"] == pytest.approx(1.0)


def test_too_few_pairs_give_only_the_count() -> None:
    assert agreement([0.5], [1.0]) == {"n": 1.0}


@pytest.mark.slow
def test_sas_squad_agreement_is_logged_per_scorer(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    # The run's metrics are what this is about; its 200 per-item traces (5 s) are tests/tracking's.
    overrides = ["dataset=sas_squad", "scorer=[token_f1,exact_match]", "tracking.traces=false"]
    config = compose([*overrides, f"tracking.uri=sqlite:///{db}"])
    result, code = pipeline.evaluate(config, tmp_path / "out")
    assert code == 0 and len(result.items) == 942
    assert result.items[0].human == 0.0 and result.items[1].human == 1.0  # "Seine,Epte,0.0"; "...,1.0"
    f1 = result.agreement["token_f1"]
    assert f1["n"] == 942 and 0.6 < f1["spearman"] < 0.8  # token overlap tracks people fairly well
    assert result.agreement["exact_match"]["spearman"] < f1["spearman"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    [logged] = client.search_runs([client.get_experiment_by_name("evalframe").experiment_id])  # type: ignore[union-attr]
    for key in ("spearman", "pearson", "kendall", "mae", "accuracy", "kappa"):
        assert f"token_f1/agreement/{key}" in logged.data.metrics
