"""Agreement between a scorer and people: how far to trust a scorer, and what penalty sweeps optimise.

Rank correlations (Spearman, Kendall) say whether the scorer orders answers as people do; Pearson and
the mean absolute error (both scales rescaled to [0, 1]) whether it also matches their scale; accuracy
and Cohen's kappa whether it passes and fails the same answers at a threshold.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from evalframe.results.intervals import SLOW_RESAMPLES, Interval, bootstrap
from evalframe.results.run_result import RunResult

# Every agreement metric, in the order tables show them; what objective.metric may name.
METRICS = ("n", "spearman", "pearson", "kendall", "mae", "accuracy", "kappa")


def agreement(
    scores: Sequence[float],
    human: Sequence[float],
    human_range: Sequence[float] = (0.0, 1.0),
    threshold: float = 0.5,
) -> dict[str, float]:
    """Metrics over the pairs where both the scorer and the person gave a score (NaN pairs dropped)."""
    from scipy import stats
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    low, high = float(human_range[0]), float(human_range[1])
    pairs = [
        (s, (h - low) / (high - low))
        for s, h in zip(scores, human, strict=True)
        if not (math.isnan(s) or math.isnan(h))
    ]
    out: dict[str, float] = {"n": float(len(pairs))}
    if len(pairs) < 2:
        return out
    ours, theirs = [p[0] for p in pairs], [p[1] for p in pairs]
    with warnings.catch_warnings():  # a constant column gives NaN correlations, reported as such
        warnings.simplefilter("ignore")
        out["spearman"] = float(stats.spearmanr(ours, theirs).statistic)
        out["pearson"] = float(stats.pearsonr(ours, theirs).statistic)
        out["kendall"] = float(stats.kendalltau(ours, theirs).statistic)
        passed_ours = [s >= threshold for s in ours]
        passed_theirs = [h >= threshold for h in theirs]
        out["accuracy"] = float(accuracy_score(passed_theirs, passed_ours))
        out["kappa"] = float(cohen_kappa_score(passed_theirs, passed_ours))
    out["mae"] = sum(abs(a - b) for a, b in pairs) / len(pairs)
    return out


def one(
    key: str,
    scores: Sequence[float],
    human: Sequence[float],
    human_range: Sequence[float] = (0.0, 1.0),
    threshold: float = 0.5,
) -> float:
    """`agreement(...)[key]` (NaN where it has none) computed alone: a held-out check's interval asks
    for it on a thousand resamples, where all of `agreement` through scipy's and scikit-learn's input
    checks took 5 ms each (seconds per sweep)."""
    low, high = float(human_range[0]), float(human_range[1])
    ours, theirs = np.asarray(scores, dtype=float), (np.asarray(human, dtype=float) - low) / (high - low)
    both = ~(np.isnan(ours) | np.isnan(theirs))
    if key == "n":
        return float(both.sum())
    if both.sum() < 2:
        return math.nan
    return float(_resampled(ours[both], theirs[both], threshold, [key])[0])


def intervals(
    scores: Sequence[float],
    human: Sequence[float],
    human_range: Sequence[float] = (0.0, 1.0),
    threshold: float = 0.5,
    resamples: int = SLOW_RESAMPLES,
    keys: Sequence[str] = METRICS[1:],
) -> dict[str, Interval]:
    """The 95% interval of every agreement metric (but n), or of `keys`, resampling the items both
    scored."""
    # Sorted, like mean_interval's values: the same pairs give the same intervals in any order.
    pairs = sorted((s, h) for s, h in zip(scores, human, strict=True) if not (math.isnan(s) or math.isnan(h)))
    low, high = float(human_range[0]), float(human_range[1])
    ours = [p[0] for p in pairs]
    theirs = [(p[1] - low) / (high - low) for p in pairs]

    def statistic(ours: np.ndarray[Any, Any], theirs: np.ndarray[Any, Any], axis: int = -1) -> Any:
        return _resampled(ours, theirs, threshold, keys)

    found = bootstrap(statistic, ours, theirs, vectorized=True, resamples=resamples)
    return dict(zip(keys, found if len(found) == len(keys) else [found[0]] * len(keys), strict=True))


def change(
    key: str,
    before: Sequence[float],
    after: Sequence[float],
    human: Sequence[float],
    human_range: Sequence[float] = (0.0, 1.0),
    threshold: float = 0.5,
    resamples: int = SLOW_RESAMPLES,
) -> Interval:
    """The paired-bootstrap 95% interval of the change of one agreement metric between two scorings of
    the same items (`after` minus `before`): each resample draws items, both scores of an item kept
    together, so the interval is of the change, not of two separate figures."""
    low, high = float(human_range[0]), float(human_range[1])
    triples = sorted(
        (b, a, (h - low) / (high - low))
        for b, a, h in zip(before, after, human, strict=True)
        if not (math.isnan(b) or math.isnan(a) or math.isnan(h))
    )
    columns = [[t[i] for t in triples] for i in range(3)]

    def statistic(b: Any, a: Any, h: Any, axis: int = -1) -> Any:
        return _resampled(a, h, threshold, [key])[0] - _resampled(b, h, threshold, [key])[0]

    return bootstrap(statistic, *columns, vectorized=True, resamples=resamples)[0]


def _resampled(
    ours: np.ndarray[Any, Any], theirs: np.ndarray[Any, Any], threshold: float, keys: Sequence[str]
) -> np.ndarray[Any, Any]:
    """`agreement` of every resample at once (rows of `ours` and `theirs`, already on [0, 1]), one row
    per metric in `keys`. The same figures as scipy's and scikit-learn's, one resample at a time, but a
    run with people's scores no longer spends seconds on a thousand rounds of their input checks."""
    from scipy import stats

    one = ours.ndim == 1  # the whole sample (scipy's point estimate), not a batch of resamples
    ours, theirs = np.atleast_2d(ours), np.atleast_2d(theirs)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant resample: NaN, as scipy gives
        passed_ours, passed_theirs = ours >= threshold, theirs >= threshold
        accuracy = np.mean(passed_ours == passed_theirs, axis=-1)
        p_ours, p_theirs = passed_ours.mean(axis=-1), passed_theirs.mean(axis=-1)
        chance = p_ours * p_theirs + (1 - p_ours) * (1 - p_theirs)
        # Each computed only when asked for: Kendall's tau, a resample at a time, is most of the time.
        found: dict[str, Callable[[], Any]] = {
            "spearman": lambda: _pearson(stats.rankdata(ours, axis=-1), stats.rankdata(theirs, axis=-1)),
            "pearson": lambda: _pearson(ours, theirs),
            # tau-b, O(n log n) a resample in scipy; written out for every resample it would be O(n²)
            "kendall": lambda: np.array(
                [stats.kendalltau(a, b).statistic for a, b in zip(ours, theirs, strict=True)]
            ),
            "mae": lambda: np.mean(np.abs(ours - theirs), axis=-1),
            "accuracy": lambda: accuracy,
            "kappa": lambda: np.where(chance < 1, (accuracy - chance) / (1 - chance), np.nan),
        }
        table = np.array([found[k]() for k in keys])
    return table[:, 0] if one else table


def _pearson(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a = a - a.mean(axis=-1, keepdims=True)
    b = b - b.mean(axis=-1, keepdims=True)
    result: np.ndarray[Any, Any] = np.sum(a * b, axis=-1) / np.sqrt(
        np.sum(a * a, axis=-1) * np.sum(b * b, axis=-1)
    )
    return np.clip(result, -1.0, 1.0)


def krippendorff_alpha(ratings: Sequence[Sequence[float]]) -> float:
    """Krippendorff's alpha at the interval level: 1 - observed / expected disagreement, over the
    units (columns) that at least two raters (rows) scored; NaN marks a missing score. 1 is perfect
    agreement, 0 what chance gives, below 0 systematic disagreement; NaN when it is undefined (fewer
    than two pairable scores, or every score the same).

    Written out rather than taken from the `krippendorff` package, which is GPL-licensed; checked
    against Krippendorff's own worked example (tests/scorers/test_panel.py).
    """
    import numpy as np

    data = np.asarray(ratings, dtype=float)
    units = [col[~np.isnan(col)] for col in data.T]
    units = [u for u in units if len(u) > 1]  # a unit scored once has nothing to agree with
    if not units:
        return math.nan
    values = np.concatenate(units)
    n = len(values)
    # Observed: within each unit, every ordered pair's squared difference, weighted 1 / (m_u - 1).
    observed = sum(((u[:, None] - u[None, :]) ** 2).sum() / (len(u) - 1) for u in units) / n
    # Expected: the same over every ordered pair of pairable values, whichever units they are in.
    expected = ((values[:, None] - values[None, :]) ** 2).sum() / (n * (n - 1))
    return math.nan if expected == 0 else float(1 - observed / expected)


def between_judges(judges: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """How far a panel's judges agree with each other on the items they were asked about:
    Krippendorff's alpha (interval) and the mean Spearman correlation over every pair of judges."""
    from scipy import stats

    ratings = [list(scores) for scores in judges.values()]
    out = {
        "alpha": krippendorff_alpha(ratings),
        "n": float(sum(sum(not math.isnan(r[i]) for r in ratings) > 1 for i in range(len(ratings[0])))),
    }
    correlations = []
    with warnings.catch_warnings():  # a constant judge has no rank correlation: left out
        warnings.simplefilter("ignore")
        for a in range(len(ratings)):
            for b in range(a + 1, len(ratings)):
                both = [
                    (x, y)
                    for x, y in zip(ratings[a], ratings[b], strict=True)
                    if not (math.isnan(x) or math.isnan(y))
                ]
                if len(both) > 1:
                    rho = float(stats.spearmanr(*zip(*both, strict=True)).statistic)
                    if not math.isnan(rho):
                        correlations.append(rho)
    out["spearman"] = sum(correlations) / len(correlations) if correlations else math.nan
    return out


def with_agreement(result: RunResult, config: Mapping[str, Any]) -> RunResult:
    """Compare every scorer with the dataset's human scores, when it has them, and a panel's judges
    with each other."""
    for name, judges in result.judges.items():
        if len(judges) > 1:
            asked = result.judged[name]
            result.judge_agreement[name] = between_judges(
                {
                    label: [s for s, a in zip(scores, asked, strict=True) if a]
                    for label, scores in judges.items()
                }
            )
    human = list(result.human)
    if all(math.isnan(h) for h in human):
        return result
    dataset = config.get("dataset") or {}
    human_range = dataset.get("human_range") or (0, 1)
    threshold = float(config.get("agreement_threshold", 0.5))
    for name in result.scorers:
        scores = list(result.scores[name])
        result.agreement[name] = agreement(scores, human, human_range, threshold)
        for key, interval in intervals(scores, human, human_range, threshold).items():
            result.intervals[f"{name}/agreement/{key}"] = interval
    return result
