"""Intervals on constructed scores with known answers: bootstrap intervals of a mean and of the
agreement metrics, paired differences, and where they are shown (summary, API, MLflow metrics)."""

from __future__ import annotations

import math
import re
import tracemalloc
from pathlib import Path

import pytest

from evalframe import evaluate
from evalframe.report import html as html_report
from evalframe.results import intervals
from evalframe.results.agreement import intervals as agreement_intervals
from evalframe.results.intervals import mean_interval, paired
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.results.summary import Summary


def test_the_interval_of_a_mean_is_about_two_standard_errors_wide() -> None:
    # 400 items, half 0 and half 1: mean 0.5, standard error 0.025, so about [0.45, 0.55].
    values = [float(i % 2) for i in range(400)]
    low, high = mean_interval(values)
    assert low == pytest.approx(0.451, abs=0.012) and high == pytest.approx(0.549, abs=0.012)
    assert mean_interval(values) == (low, high)  # a fixed seed: the same scores, the same interval


def test_a_large_runs_interval_holds_few_resamples_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The interval of a large run's mean comes at its end, beside every library the run loaded: its
    # resamples are drawn a few at a time (5 million values at once were 116 MiB at the run's peak).
    # numpy's arrays are traced by tracemalloc, so the peak is what the resamples hold.
    values = [(i * 7919 % 1000) / 1000 for i in range(20_000)]
    mean_interval(values[:10])  # scipy.stats imported before, not counted
    tracemalloc.start()
    try:
        interval = mean_interval(values)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held while resampling 20,000 items"
    monkeypatch.setattr(intervals, "BOOTSTRAP_BATCH_VALUES", 5_000_000)  # 100 resamples at once
    assert mean_interval(values) == interval  # the batch changes memory, never the interval


def test_small_samples_give_wide_intervals_and_one_item_none() -> None:
    narrow = mean_interval([float(i % 2) for i in range(200)])
    wide = mean_interval([0.0, 1.0, 1.0, 0.0])
    assert wide.high - wide.low > 2 * (narrow.high - narrow.low)
    assert mean_interval([0.0, 1.0]) == (0.0, 1.0)
    assert mean_interval([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))  # constant scores: no spread, no crash
    for none in ([0.3], [], [math.nan, 0.4, math.nan]):  # unscored items are left out
        assert all(math.isnan(v) for v in mean_interval(none))


def test_paired_differences_with_known_answers() -> None:
    baseline = [0.1 * (i % 10) for i in range(40)]
    better = paired(baseline, [b + 0.1 for b in baseline])  # better on every item
    assert better.mean == pytest.approx(0.1) and better.interval.low > 0 and better.better
    assert better.p_value < 0.01 and (better.improved, better.worsened, better.equal) == (40, 0, 0)
    worse = paired(baseline, [b - 0.3 if i % 4 else b + 0.05 for i, b in enumerate(baseline)])
    assert worse.worse and worse.interval.high < 0 and worse.p_value < 0.01
    untested = paired(baseline, [b - 0.3 if i % 4 else b + 0.05 for i, b in enumerate(baseline)], test=False)
    assert untested.interval == worse.interval and math.isnan(untested.p_value)  # the same, no p-value
    same = paired(baseline, baseline)
    assert (same.mean, same.p_value, same.equal, same.worse, same.better) == (0.0, 1.0, 40, False, False)
    noise = paired(baseline, [b + (0.05 if i % 2 else -0.05) for i, b in enumerate(baseline)])
    assert noise.interval.low < 0 < noise.interval.high and noise.p_value > 0.5
    # Pairs with an unscored side are left out; nothing in common is no difference, not a crash.
    assert paired([0.5, math.nan, 0.2], [0.6, 0.9, math.nan]).n == 1
    assert paired([math.nan], [0.5]).n == 0 and math.isnan(paired([math.nan], [0.5]).mean)


@pytest.mark.slow
def test_the_batched_permutation_test_gives_the_unbatched_p_value() -> None:
    # Permutations drawn a few at a time (as on 20,000 items, where all at once took 14 GB) give the
    # same p-value as all at once, for the same seed: the batch changes memory, never the result.
    baseline = [0.1 * (i % 10) for i in range(300)]
    candidate = [min(1.0, b + (0.1 if i % 3 else -0.2)) for i, b in enumerate(baseline)]
    whole = paired(baseline, candidate, batch=None)
    for values in (300 * 7, 300 * 64, 1_000_000):  # 7, 64 (the last batch short) and all permutations
        batched = paired(baseline, candidate, batch=values)
        assert batched == whole
    assert 0 < whole.p_value < 1  # a real test: neither of the short cuts that skip it


def test_agreement_metrics_get_intervals() -> None:
    human = [float(i % 3) for i in range(60)]
    perfect = agreement_intervals([h / 2 for h in human], human, (0, 2))
    assert perfect["spearman"] == pytest.approx((1.0, 1.0)) and perfect["mae"] == (0.0, 0.0)
    noisy = agreement_intervals([(h + (i % 5) * 0.4) / 4 for i, h in enumerate(human)], human, (0, 2))
    assert set(noisy) == {"spearman", "pearson", "kendall", "mae", "accuracy", "kappa"}
    assert all(low <= high for low, high in noisy.values())
    assert noisy["spearman"].low < noisy["spearman"].high < 1.0
    for tiny in ([0.5], []):  # one or no pair: no interval, no crash
        assert all(math.isnan(v) for ci in agreement_intervals(tiny, tiny).values() for v in ci)


def _item(i: int, score: float, human: float | None = None) -> ItemResult:
    return ItemResult(f"q{i}", "q", "a", "a", {"s": ScoreResult(score, "r")}, human=human)


def test_the_summary_shows_each_interval_and_says_when_there_is_none() -> None:
    from evalframe.results.scores import Objective
    from evalframe.run.pipeline import aggregate

    result = RunResult([_item(i, i % 2, human=i % 2) for i in range(20)], ["s"])
    aggregate(result, {"dataset": {"human_range": [0, 1]}}, Objective("s/mean"))
    text = Summary.of(result).text()
    low, high = result.intervals["s/mean"]
    assert "95% CI" in text and f"[{low:.3f}, {high:.3f}]" in text and low < 0.5 < high
    assert re.search(r"\n  95% CI +\[1.00, 1.00\]", text)  # spearman of a perfect scorer: its interval below
    html = html_report.run_report(result, "run").html
    assert (
        "<th>95% CI</th>" in html and f"[{low:.3f}, {high:.3f}]" in html and "1.000<br>[1.00, 1.00]" in html
    )
    metrics = result.metrics()
    assert (metrics["s/mean_ci_low"], metrics["s/mean_ci_high"]) == (low, high)
    assert (
        metrics["s/agreement/spearman_ci_low"] == pytest.approx(1.0) and "s/agreement/n_ci_low" not in metrics
    )
    one = aggregate(RunResult([_item(0, 0.5)], ["s"]), {}, Objective("s/mean"))
    assert "none: 1 item" in Summary.of(one).text() and "s/mean_ci_low" not in one.metrics()


@pytest.mark.slow
def test_the_python_api_gives_intervals(tmp_path: Path) -> None:
    rows = [{"id": str(i), "input": f"q{i}", "ground_truth": "Paris", "output": "Paris"} for i in range(9)]
    rows += [{"id": "x", "input": "qx", "ground_truth": "Paris", "output": "Rome"}]
    result = evaluate(
        rows, ["exact_match"], output_dir=tmp_path / "run", tracking=f"sqlite:///{tmp_path}/m.db"
    )
    low, high = result.ci("exact_match")
    assert low < 0.9 <= high == 1.0 and result.ci("exact_match/mean") == (low, high)
    assert "95% CI" in str(result)
    from mlflow.tracking import MlflowClient

    logged = MlflowClient(f"sqlite:///{tmp_path}/m.db").get_run(str(result.run_id)).data.metrics
    assert (logged["exact_match/mean_ci_low"], logged["exact_match/mean_ci_high"]) == (low, high)
    with pytest.raises(KeyError, match="no interval for 'bleu'"):
        result.ci("bleu")
    alone = evaluate(rows[:1], ["exact_match"], output_dir=tmp_path / "one")
    assert all(math.isnan(v) for v in alone.ci("exact_match")) and "none: 1 item" in str(alone)


@pytest.mark.parametrize("constant", [False, True])
def test_agreement_intervals_equal_scipy_and_sklearn_one_resample_at_a_time(constant: bool) -> None:
    """The agreement intervals resample every metric at once (numpy, kendall through scipy); each
    resample's figures are the ones `agreement` (scipy, scikit-learn) gives for it alone."""
    import random

    from evalframe.results import agreement as agreements
    from evalframe.results.intervals import bootstrap

    rng = random.Random(3)
    scores = [1.0] * 30 if constant else [round(rng.random(), 1) for _ in range(30)]
    human = [float(rng.choice([0, 1, 2])) for _ in range(30)]
    keys = [k for k in agreements.METRICS if k != "n"]

    def one_at_a_time(ours: list[float], theirs: list[float]) -> list[float]:
        found = agreements.agreement(list(ours), list(theirs), (0, 2))
        return [found.get(k, math.nan) for k in keys]

    # 200 resamples, not a run's 1,000: the reference goes through scipy and scikit-learn one resample
    # at a time (10 s for 1,000), and equality on 200 draws of the same seed shows the same thing.
    pairs = sorted(zip(scores, human, strict=True))  # resampled in sorted order: any order is the same
    expected = dict(
        zip(keys, bootstrap(one_at_a_time, *zip(*pairs, strict=True), resamples=200), strict=True)
    )
    found = agreements.intervals(scores, human, (0, 2), resamples=200)
    assert found.keys() == expected.keys()
    for key in keys:
        assert found[key] == pytest.approx(expected[key], abs=1e-12, nan_ok=True), key
    shuffled = list(zip(scores, human, strict=True))
    rng.shuffle(shuffled)
    again = agreements.intervals([p[0] for p in shuffled], [p[1] for p in shuffled], (0, 2), resamples=200)
    assert all(again[k] == pytest.approx(found[k], abs=0, nan_ok=True) for k in keys)


def test_the_same_scores_in_any_order_give_the_same_interval() -> None:
    """Items finish in any order, and a sharded run's are merged from several jobs: the interval of
    the mean is one of the scores, not of their order."""
    import random

    from evalframe.results.intervals import mean_interval

    rng = random.Random(7)
    scores = [round(rng.random(), 2) for _ in range(50)] + [math.nan] * 3
    shuffled = scores[:]
    rng.shuffle(shuffled)
    assert mean_interval(shuffled) == mean_interval(scores)
    assert mean_interval(shuffled).known


def test_one_agreement_metric_alone_is_what_agreement_gives() -> None:
    """agreement.one (a held-out check's statistic, on a thousand resamples) gives each metric as
    `agreement` does: NaN pairs left out, a constant or one-pair sample NaN, on the human scale given."""
    import random

    from evalframe.results import agreement as agreements

    rng = random.Random(5)
    varied = [rng.choice([math.nan, *(round(rng.random(), 1) for _ in range(4))]) for _ in range(40)]
    human = [rng.choice([math.nan, 0.0, 1.0, 2.0]) for _ in range(40)]
    for scores, people in [
        (varied, human),
        ([0.5] * 40, human),  # a constant scorer: no correlation
        ([0.2, math.nan, 0.9], [1.0, 2.0, math.nan]),  # one pair left
        ([], []),
    ]:
        expected = agreements.agreement(scores, people, (0, 2), 0.6)
        for key in agreements.METRICS:
            found = agreements.one(key, scores, people, (0, 2), 0.6)
            assert found == pytest.approx(expected.get(key, math.nan), abs=1e-12, nan_ok=True), key
