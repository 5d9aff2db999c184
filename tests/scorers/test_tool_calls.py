"""tool_call_accuracy: the fixed cases, the figures beside the score, the empty rule, the compat formulas
of RAGAS, DeepEval and Mastra worked out by hand, and the scorer through the real pipeline: results.jsonl,
MLflow metrics and table, and a re-score with other settings (no model call either way)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from evalframe.cli import rescore as rescore_command
from evalframe.data.values import ToolCall
from evalframe.errors import ConfigError
from evalframe.results.results_file import read_items
from evalframe.results.scores import ScoreResult
from evalframe.results.table import items_table
from evalframe.run import pipeline, rescore
from evalframe.scorers.tool_calls import ToolCallAccuracy
from tests.conftest import compose


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


def scored(made: list[ToolCall], expected: list[ToolCall], **settings: Any) -> ScoreResult:
    return ToolCallAccuracy(**settings).score_calls(made, expected)


PARIS = call("weather", city="Paris")


@pytest.mark.parametrize(
    ("made", "expected", "settings", "score"),
    [
        pytest.param([PARIS], [PARIS], {}, 1.0, id="identical single calls"),
        pytest.param([PARIS, PARIS], [PARIS], {}, 0.6667, id="expected call made twice: f1"),
        pytest.param([], [PARIS], {}, 0.0, id="none made, one expected"),
        pytest.param([], [], {}, 1.0, id="none made, none expected"),
        pytest.param(
            [call("weather", city="Paris", unit="c")], [PARIS], {}, 1.0, id="extra argument, subset"
        ),
        pytest.param(
            [call("weather", city="Paris", unit="c")], [PARIS], {"args": "exact"}, 0.0, id="extra arg, exact"
        ),
        pytest.param([call("weather", city="Rome")], [PARIS], {}, 0.0, id="wrong argument"),
        pytest.param([call("weather", city="Rome")], [PARIS], {"args": "ignore"}, 1.0, id="names only"),
    ],
)
def test_the_fixed_cases(
    made: list[ToolCall], expected: list[ToolCall], settings: dict[str, Any], score: float
) -> None:
    assert scored(made, expected, **settings).score == pytest.approx(score, abs=1e-4)


def test_a_repeated_call_matches_once_and_every_figure_is_reported() -> None:
    result = scored([PARIS, PARIS], [PARIS])
    assert result.details["figures"] == {
        "precision": 0.5,
        "recall": 1.0,
        "f1": 0.6667,  # 2 · 0.5 · 1 / 1.5
        "exact": 0.0,
        "order": 0.5,  # LCS 1 ÷ max(2, 1)
    }
    assert result.details["unexpected"] == ['weather(city="Paris")'] and result.details["missing"] == []
    assert 'unexpected: weather(city="Paris")' in result.reason


def test_the_headline_is_configurable_and_the_reason_names_missing_and_unexpected_calls() -> None:
    made = [call("search", q="flights"), call("book", flight="AF12", seats=3)]
    expected = [call("book", flight="AF12", seats=2), call("search", q="flights")]
    # search matches; book has the wrong seats: precision 1/2, recall 1/2; order: LCS 1 ÷ 2.
    for figure, value in {"precision": 0.5, "recall": 0.5, "f1": 0.5, "exact": 0.0, "order": 0.5}.items():
        assert scored(made, expected, score=figure).score == value
    reason = scored(made, expected).reason
    assert 'missing: book(flight="AF12", seats=2)' in reason
    assert 'unexpected: book(flight="AF12", seats=3)' in reason
    # Right calls, wrong order: precision and recall 1, order 1/2 and not exact.
    swapped = scored([call("b"), call("a")], [call("a"), call("b")])
    assert swapped.details["figures"] == {"precision": 1, "recall": 1, "f1": 1, "exact": 0, "order": 0.5}


def test_matching_is_one_to_one_at_its_most_not_greedy() -> None:
    # The first made call fits both expected calls under subset; a greedy pass pairing it with the
    # first expected call would leave the second made call unmatched.
    made = [call("f", a=1, b=2), call("f", a=1)]
    expected = [call("f", a=1), call("f", a=1, b=2)]
    assert scored(made, expected).details["figures"]["recall"] == 1.0


def test_values_compare_as_json_values() -> None:
    assert scored([call("f", n=5.0)], [call("f", n=5)]).score == 1.0
    assert scored([call("f", n="5")], [call("f", n=5)]).score == 0.0
    assert scored([call("f", on=1)], [call("f", on=True)]).score == 0.0
    assert (
        scored([call("f", where={"city": "Paris", "zip": 75})], [call("f", where={"city": "Paris"})]).score
        == 0
    )


def test_the_empty_rule_and_one_sided_cases() -> None:
    both_empty = {rule: scored([], [], empty=rule) for rule in ("unscored", 0, 1, "1")}
    assert math.isnan(both_empty["unscored"].score) and both_empty["unscored"].not_applicable
    assert "no calls expected and none made" in both_empty["unscored"].reason
    assert both_empty[0].score == 0 and both_empty[1].score == 1 == both_empty["1"].score
    assert both_empty[1].details["figures"]["precision"] == 1.0
    # Calls made when none were expected: nothing matches, every figure 0 (precision 0 ÷ 1 made).
    extra = scored([PARIS], [])
    assert set(extra.details["figures"].values()) == {0.0} and "unexpected" in extra.reason
    assert set(scored([], [PARIS]).details["figures"].values()) == {0.0}


@pytest.mark.parametrize(
    ("setting", "value"),
    [("args", "fuzzy"), ("score", "accuracy"), ("empty", "nan"), ("compat", "trulens")],
)
def test_a_bad_setting_is_one_line_naming_the_key(setting: str, value: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"scorers\.tool_call_accuracy\.{setting}='{value}'( is not a rule)?[:;]"
    ):
        ToolCallAccuracy(**{setting: value})


# The compat formulas, each worked out by hand from the tool's source on the same cases:
# ragas: 0 unless the name sequences are equal, else mean over pairs of (expected args present with
# str-equal values ÷ expected args), both empty 1, one empty 0; deepeval (defaults): names only, each
# expected call takes the first made call of its name not taken (taken compares whole calls) ÷ expected;
# mastra (strictMode false): 1 if every expected name is made and their first occurrences are in order.
COMPAT_CASES = {
    # made, expected
    "duplicate": ([PARIS, PARIS], [PARIS]),
    "wrong order": ([call("search", q="x"), call("book", id=1)], [call("book", id=1), call("search", q="x")]),
    "args": (
        [call("weather", city="Paris", unit="c"), call("time", tz="CET")],
        [PARIS, call("time", tz="UTC")],
    ),
    "missing": ([call("search", q="x")], [call("search", q="x"), call("book", id=1)]),
    "twice expected": ([PARIS, PARIS], [PARIS, PARIS]),
    "both empty": ([], []),
    "none expected": ([PARIS], []),
    "none made": ([], [PARIS]),
    "text vs number": ([call("f", n="5")], [call("f", n=5)]),
    "expected no args": ([PARIS], [call("weather")]),
}
COMPAT_EXPECTED = {
    "ragas": {
        "duplicate": 0.0,  # names [weather, weather] != [weather]
        "wrong order": 0.0,  # [search, book] != [book, search]
        "args": 0.5,  # names equal; (1/1 city + 0/1 tz) / 2 pairs
        "missing": 0.0,  # [search] != [search, book]
        "twice expected": 1.0,  # (1 + 1) / 2
        "both empty": 1.0,
        "none expected": 0.0,
        "none made": 0.0,
        "text vs number": 1.0,  # str("5") == str(5)
        "expected no args": 0.0,  # expected args empty, made args not: 0
    },
    "deepeval": {
        "duplicate": 1.0,  # 1 expected found / 1; the extra call costs nothing
        "wrong order": 1.0,  # 2 / 2, order not considered
        "args": 1.0,  # names only: 2 / 2
        "missing": 0.5,  # 1 / 2
        "twice expected": 0.5,  # the 2nd expected finds both made calls taken (equal to the taken one): 1 / 2
        "both empty": 1.0,
        "none expected": 0.0,
        "none made": 0.0,  # 0 / 1
        "text vs number": 1.0,  # names only
        "expected no args": 1.0,
    },
    "mastra": {
        "duplicate": 1.0,  # weather made, first at 0
        "wrong order": 0.0,  # first occurrences book 1, search 0: not increasing
        "args": 1.0,  # weather 0 < time 1
        "missing": 0.0,  # book never made
        "twice expected": 0.0,  # first occurrences 0, 0: not increasing
        "both empty": 0.0,  # no call made: 0
        "none expected": 0.0,  # no expected tool: 0
        "none made": 0.0,
        "text vs number": 1.0,
        "expected no args": 1.0,
    },
}


@pytest.mark.parametrize("compat", sorted(COMPAT_EXPECTED))
def test_each_compat_gives_its_tools_numbers(compat: str) -> None:
    got = {case: scored(*calls, compat=compat).score for case, calls in COMPAT_CASES.items()}
    assert got == COMPAT_EXPECTED[compat]
    # The figures stay evalframe's, whatever the headline.
    result = scored(*COMPAT_CASES["duplicate"], compat=compat)
    assert result.details["figures"]["precision"] == 0.5 and result.reason.startswith(f"{compat} formula")


def _dataset(path: Path) -> Path:
    """Agent rows in both shapes (OpenAI's for the made calls), with the fixed cases."""

    def openai(c: ToolCall) -> dict[str, Any]:
        return {
            "id": "call_1",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }

    rows = [
        ("same", [PARIS], [PARIS]),
        ("twice", [PARIS, PARIS], [PARIS]),
        ("extra-arg", [call("weather", city="Paris", unit="c")], [PARIS]),
        ("none", [], []),
    ]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": i,
                    "input": "What is the weather in Paris?",
                    "output": "Sunny.",
                    "tool_calls": [openai(c) for c in made],
                    "expected_tool_calls": [c.as_dict() for c in expected],
                }
            )
            + "\n"
            for i, made, expected in rows
        ),
        encoding="utf-8",
    )
    return path


def _metrics(uri: str, run_id: str) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    return dict(MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics)


@pytest.mark.slow
def test_through_the_pipeline_figures_reach_results_mlflow_and_a_rescore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = [
        "scorer=tool_call_accuracy",
        "dataset=jsonl",
        f"dataset.path={_dataset(tmp_path / 'agent.jsonl')}",
    ]
    store = ["tracking=mlflow", f"tracking.uri={uri}"]
    runs = {}
    for args in ("subset", "exact"):  # what `-m scorers.tool_call_accuracy.args=subset,exact` runs
        overrides = [*base, f"scorers.tool_call_accuracy.args={args}"]
        result, code = pipeline.evaluate(compose([*overrides, *store]), tmp_path / args, overrides=overrides)
        assert code == 0 and result.stats.calls == 0 and result.run_id
        runs[args] = result
    subset, exact = runs["subset"], runs["exact"]
    # f1 per row: same 1, twice 0.6667, extra-arg 1 (subset) or 0 (exact), none 1 (empty=1).
    assert subset.means["tool_call_accuracy"] == pytest.approx((1 + 0.6667 + 1 + 1) / 4)
    assert exact.means["tool_call_accuracy"] == pytest.approx((1 + 0.6667 + 0 + 1) / 4)
    # Every item's figures are in results.jsonl ...
    [twice] = [i for i in read_items(tmp_path / "subset" / "results.jsonl") if i.id == "twice"]
    assert twice.scores["tool_call_accuracy"].details["figures"]["precision"] == 0.5
    # ... their means are MLflow metrics beside the mean, and the console says them in one line.
    metrics = _metrics(uri, str(subset.run_id))
    assert metrics["tool_call_accuracy/precision"] == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    assert metrics["tool_call_accuracy/recall"] == 1.0
    assert metrics["tool_call_accuracy/order"] == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    assert _metrics(uri, str(exact.run_id))["tool_call_accuracy/exact"] == pytest.approx(2 / 4)
    assert "tool_call_accuracy: precision 0.875, recall 1.000, f1 0.917, exact 0.750, order 0.875" in (
        capsys.readouterr().out
    )
    assert "tool_call_accuracy: precision 0.875" in (tmp_path / "subset" / "report.html").read_text()
    table = items_table(subset)
    assert table["tool_call_accuracy/precision"] == [1.0, 0.5, 1.0, 1.0]
    # A re-score of the logged subset run with exact arguments: the rows' tool calls come back from its
    # results.jsonl, no model is asked, and the new run gives the exact run's numbers.
    argv = [f"run_id={subset.run_id}", "scorers.tool_call_accuracy.args=exact", f"tracking.uri={uri}"]
    run_id, line = rescore_command.command_line(argv, tmp_path / "download")
    code, _ = rescore.main(run_id, compose(line), tmp_path / "rescored", line)
    assert code == 0
    [again] = [i for i in read_items(tmp_path / "rescored" / "results.jsonl") if i.id == "extra-arg"]
    assert again.scores["tool_call_accuracy"].score == 0.0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    [new] = client.search_runs(
        [client.get_run(str(subset.run_id)).info.experiment_id],
        f"tags.`{rescore.RESCORED_FROM_TAG}` = '{subset.run_id}'",
    )
    assert new.data.metrics["tool_call_accuracy/mean"] == pytest.approx(exact.means["tool_call_accuracy"])
    assert new.data.metrics["tool_call_accuracy/exact"] == pytest.approx(2 / 4)


def test_a_sweep_may_rank_by_a_figure(tmp_path: Path) -> None:
    """objective.metric may name a scorer's own figure (tool_call_accuracy/recall): checked before the
    run like the other metrics, and measured as the figure's mean."""
    from evalframe.results.objective import of_config
    from evalframe.results.scores import Objective

    base = ["scorer=tool_call_accuracy", "dataset=jsonl", f"dataset.path={_dataset(tmp_path / 'a.jsonl')}"]
    config = compose([*base, "tracking=none", "objective.metric=tool_call_accuracy/recall"])
    assert of_config(config) == Objective("tool_call_accuracy/recall")
    result, _ = pipeline.evaluate(config, tmp_path / "o")
    assert result.objective is not None
    assert result.objective.value == pytest.approx(result.figure_means()["tool_call_accuracy"]["recall"])
    with pytest.raises(ConfigError, match="unknown metric"):
        of_config(compose([*base, "objective.metric=tool_call_accuracy/recal"]))
