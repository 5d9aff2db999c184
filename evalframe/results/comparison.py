"""Two runs of the same items, compared item by item: for each scorer both ran, the paired mean
difference with its interval and p-value (intervals.paired), how many items moved which way, and
the items that moved most. Items are paired by their dataset id; an item in one run only is counted
and left out. What `python -m evalframe compare` prints, writes to compare.html and logs to MLflow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evalframe.results.alignment import SUFFIX
from evalframe.results.intervals import Difference, paired
from evalframe.results.scores import ItemResult
from evalframe.results.summary import fmt, fmt_interval

COLUMNS = ("scorer", "items", "baseline", "candidate", "difference [95% CI]", "p", "up/down/same", "verdict")
MOVED_COLUMNS = ("id", "input", "baseline", "candidate", "change", "baseline reason", "candidate reason")

MOVED = 5  # items shown per scorer, largest moves first


@dataclass(frozen=True)
class Moved:
    """One item whose score changed, with both scores and both reasons."""

    id: str
    input: str
    baseline: float
    candidate: float
    baseline_reason: str
    candidate_reason: str

    @property
    def change(self) -> float:
        return self.candidate - self.baseline


@dataclass(frozen=True)
class ScorerComparison:
    scorer: str
    baseline_mean: float  # over the paired items both runs scored
    candidate_mean: float
    difference: Difference
    moved: list[Moved]
    against: str | None = None  # the candidate's scorer when named otherwise (a judge and its aligned one)

    @property
    def label(self) -> str:
        return f"{self.scorer} vs {self.against}" if self.against else self.scorer

    def moved_rows(self) -> list[list[str]]:
        """The items that moved most, cells as MOVED_COLUMNS names them."""
        return [
            [
                m.id,
                m.input,
                fmt(m.baseline, 2),
                fmt(m.candidate, 2),
                fmt(m.change, 2, signed=True),
                m.baseline_reason,
                m.candidate_reason,
            ]
            for m in self.moved
        ]

    @property
    def verdict(self) -> str:
        d = self.difference
        return "worse" if d.worse else "better" if d.better else "unclear"  # unclear: the interval holds 0


@dataclass(frozen=True)
class Comparison:
    baseline: str  # run ids
    candidate: str
    paired: int  # items in both runs
    only_baseline: int
    only_candidate: int
    scorers: list[ScorerComparison] = field(default_factory=list)

    @property
    def worse(self) -> bool:
        """The candidate is significantly worse on some scorer: the regression gate fails."""
        return any(s.difference.worse for s in self.scorers)

    def title(self) -> str:
        return f"compare: candidate {self.candidate} against baseline {self.baseline}"

    def counts(self) -> str:
        return (
            f"{self.paired} items in both runs; left out: {self.only_baseline} only in the baseline, "
            f"{self.only_candidate} only in the candidate"
        )

    def rows(self) -> list[list[str]]:
        """One row per scorer, cells as COLUMNS names them (the console and compare.html)."""
        rows = []
        for s in self.scorers:
            d = s.difference
            rows.append(
                [
                    s.label,
                    fmt(d.n),
                    fmt(s.baseline_mean),
                    fmt(s.candidate_mean),
                    f"{fmt(d.mean, signed=True)} {fmt_interval(d.interval, d.n)}",
                    fmt(d.p_value, 4),
                    f"{d.improved}/{d.worsened}/{d.equal}",
                    s.verdict,
                ]
            )
        return rows

    def metrics(self) -> dict[str, float]:
        """What the comparison's MLflow run logs (NaN figures are left out)."""
        out = {"paired": float(self.paired), "only_baseline": float(self.only_baseline)}
        out["only_candidate"] = float(self.only_candidate)
        for s in self.scorers:
            d = s.difference
            figures = {
                "baseline_mean": s.baseline_mean,
                "candidate_mean": s.candidate_mean,
                "difference": d.mean,
                "difference_ci_low": d.interval.low,
                "difference_ci_high": d.interval.high,
                "p_value": d.p_value,
                "improved": d.improved,
                "worsened": d.worsened,
                "equal": d.equal,
            }
            out.update({f"{s.scorer}/{k}": float(v) for k, v in figures.items() if v == v})  # v != v: NaN
        return out


def _mean(values: Sequence[float]) -> float:
    scored = [v for v in values if v == v]
    return sum(scored) / len(scored) if scored else float("nan")


def counterparts(ours: Sequence[str], theirs: Sequence[str]) -> dict[str, str]:
    """{baseline scorer: the candidate's scorer it is compared with}: the same name, else the same judge
    aligned (NAME with NAME_aligned, either way round: `evalframe align`'s judge against the one it was
    taught from) when that name is the candidate's only and not the baseline's own."""
    found = {}
    for name in ours:
        aligned = [f"{name}{SUFFIX}", name.removesuffix(SUFFIX)]
        other = [n for n in aligned if n != name and n in theirs and n not in ours]
        if name in theirs or other:
            found[name] = name if name in theirs else other[0]
    return found


def compare(
    baseline_id: str, baseline: list[ItemResult], candidate_id: str, candidate: list[ItemResult]
) -> Comparison:
    """Pair the two runs' items by id and compare every scorer both ran (in the baseline's order), a
    judge with its aligned one too (`counterparts`)."""
    theirs = {item.id: item for item in candidate}
    pairs = [(item, theirs[item.id]) for item in baseline if item.id in theirs]
    scorers = counterparts(
        list(dict.fromkeys(k for i in baseline for k in i.scores)),
        list(dict.fromkeys(k for i in candidate for k in i.scores)),
    )
    found = []
    for name, other in scorers.items():
        both = [(a, b) for a, b in pairs if name in a.scores and other in b.scores]
        before = [a.scores[name].score for a, _ in both]
        after = [b.scores[other].score for _, b in both]
        moved = [
            Moved(
                a.id,
                a.input,
                a.scores[name].score,
                b.scores[other].score,
                a.scores[name].reason,
                b.scores[other].reason,
            )
            for a, b in both
            if a.scores[name].scored
            and b.scores[other].scored
            and a.scores[name].score != b.scores[other].score
        ]
        moved.sort(key=lambda m: -abs(m.change))
        # Both means over the items both runs scored: their difference is the paired difference.
        scored = [(x, y) for x, y in zip(before, after, strict=True) if x == x and y == y]
        found.append(
            ScorerComparison(
                name,
                _mean([x for x, _ in scored]),
                _mean([y for _, y in scored]),
                paired(before, after),
                moved[:MOVED],
                other if other != name else None,
            )
        )
    ids = {item.id for item in baseline}
    return Comparison(
        baseline_id,
        candidate_id,
        len(pairs),
        len(ids - set(theirs)),
        len(set(theirs) - ids),
        found,
    )
