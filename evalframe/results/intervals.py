"""How far to trust a figure: 95% bootstrap intervals over items, and paired differences between two
sets of scores of the same items (`compare`, held-out tuning).

Every interval resamples items (scipy.stats.bootstrap, percentile method, a fixed seed so the same
scores always give the same interval). An item is the unit: when an item is judged several times its
score is the mean of its judgments, so resampling item scores resamples items, never judgments. The
percentile method rather than BCa: BCa's jackknife costs n² memory on a 100,000-item run and fails
on constant scores, where the percentile interval is simply [c, c]. Fewer than two items: no interval
(NaN), which every rendering writes as such instead of a made-up width.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from evalframe.models import imports
from evalframe.results.run_result import RunResult

CONFIDENCE = 0.95
SEED = 0
RESAMPLES = 2000  # for vectorised statistics (means): milliseconds even on 100,000 items
PERMUTATIONS = 9999  # of the paired permutation test (compare)
# Values each resampling batch holds at once (~8 MB of float64 each, of indices as much again): every
# resample of a 20,000-item run at once took 14 GB for the permutation test. scipy draws a batch's
# resamples from the same random stream as it would draw them all, so the results are the same.
BATCH_VALUES = 1_000_000
# The bootstrap's batches are smaller: 5 million values held 116 MiB more at the end of a 100,000-item
# run (the run's peak), 250,000 hold 6 MiB, and are faster too (0.9 s against 1.5 s: they stay in cache).
BOOTSTRAP_BATCH_VALUES = 250_000
SLOW_RESAMPLES = 1000  # agreement: Kendall's tau goes through scipy one resample at a time


class Interval(NamedTuple):
    low: float
    high: float

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


NONE = Interval(math.nan, math.nan)


def _scored(values: Sequence[float]) -> np.ndarray[Any, Any]:
    array = np.asarray(values, dtype=float)
    return array[~np.isnan(array)]


def preload() -> None:
    """Import scipy.stats on a background thread while a run waits for its models: the intervals at the
    end would otherwise wait for the import (about 0.5 s, most of the time from the last item to exit)."""
    imports.in_background("scipy.stats")


def bootstrap(
    statistic: Callable[..., Any],
    *samples: Sequence[float] | np.ndarray[Any, Any],
    vectorized: bool = False,
    resamples: int | None = None,
) -> list[Interval]:
    """Intervals of a statistic of paired samples (one value per item in each), resampling items.
    `statistic(*samples)` returns one number or a vector of them; one interval per number, from the
    resamples where it is defined. Fewer than two items: [NONE]."""
    with imports.LOCK:  # not beside a background import (evalframe.models.imports)
        from scipy import stats

    arrays = [np.asarray(s, dtype=float) for s in samples]
    if len(arrays[0]) < 2:
        return [NONE]  # one NaN interval, whatever the statistic's width
    with warnings.catch_warnings():  # a degenerate resample (constant scores) gives NaN, left out below
        warnings.simplefilter("ignore")
        resampled = stats.bootstrap(
            tuple(arrays),
            statistic,
            paired=len(arrays) > 1,
            vectorized=vectorized,
            n_resamples=resamples or (RESAMPLES if vectorized else SLOW_RESAMPLES),
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=SEED,
            # Resamples drawn a batch at a time: all 2,000 of a 100,000-item run at once would take
            # 1.6 GB (and, out of cache, 7 times as long).
            batch=max(1, BOOTSTRAP_BATCH_VALUES // len(arrays[0])),
        ).bootstrap_distribution
        # Percentiles of the resamples where the statistic exists: a rank correlation of a resample
        # whose scores happen to be all equal is undefined, not a reason to give no interval at all.
        tail = (1 - CONFIDENCE) / 2 * 100
        lows, highs = np.nanpercentile(np.atleast_2d(resampled), [tail, 100 - tail], axis=-1)
    return [Interval(float(lo), float(hi)) for lo, hi in zip(lows, highs, strict=True)]


def _mean(values: Any, axis: int = -1) -> Any:
    return np.mean(values, axis=axis)


def mean_interval(values: Sequence[float]) -> Interval:
    """The 95% interval of the mean of the scored values (NaN, unscored, left out). Of the values
    sorted: items finish in any order, and a sharded run's come from several jobs, so the interval is
    one of the scores themselves, whatever their order (the seeded resamples pick positions)."""
    return bootstrap(_mean, np.sort(_scored(values)), vectorized=True)[0]


@dataclass(frozen=True)
class Difference:
    """Candidate minus baseline over the items both scored."""

    n: int
    mean: float
    interval: Interval
    p_value: float  # paired permutation test of the mean difference (two-sided)
    improved: int
    worsened: int
    equal: int

    @property
    def worse(self) -> bool:
        """Significantly worse: the whole interval below 0."""
        return self.interval.known and self.interval.high < 0

    @property
    def better(self) -> bool:
        return self.interval.known and self.interval.low > 0


def paired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    test: bool = True,
    batch: int | None = BATCH_VALUES,
) -> Difference:
    """The paired mean difference of two scorings of the same items (pairs with a NaN left out): its
    interval is the bootstrap of the per-item differences, its p-value a paired permutation test
    (each item's two scores swapped at random), which needs no normality and handles ties and zeros.
    `test=False` leaves the p-value out (NaN) for a caller that shows none: the permutation test is
    nearly all of the time, the interval milliseconds. The permutations are drawn `batch` values at a
    time (None: all at once, as before batching; the same p-value either way)."""
    from scipy import stats

    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    both = ~(np.isnan(a) | np.isnan(b))
    a, b = a[both], b[both]
    d = b - a
    n = len(d)
    counts = {"improved": int((d > 0).sum()), "worsened": int((d < 0).sum()), "equal": int((d == 0).sum())}
    if n < 2:  # nothing to resample: the difference itself, or none
        return Difference(n, float(d.mean()) if n else math.nan, NONE, math.nan, **counts)
    if not d.any():  # no item moved: nothing to test
        return Difference(n, 0.0, Interval(0.0, 0.0), 1.0, **counts)
    if not test:
        return Difference(n, float(d.mean()), mean_interval(d), math.nan, **counts)
    p = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(y - x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        rng=SEED,
        batch=max(1, batch // n) if batch else None,
    ).pvalue
    return Difference(n, float(d.mean()), mean_interval(d), float(p), **counts)


def with_intervals(result: RunResult) -> RunResult:
    """The interval of each scorer's mean, as `<scorer>/mean` in result.intervals."""
    for name in result.scorers:
        result.intervals[f"{name}/mean"] = mean_interval(result.scores[name])
    return result
