"""Which items of a run are worth a person's minute: the choice behind `evalframe review push`.

- disagreement: the items whose panel judges (or repeats of one judge) disagree most, the widest range
  of one scorer's judgments first; ties go to the widest spread of the item's scores over its scorers.
  A person's label settles exactly the verdicts that no judge can be trusted on.
- threshold: the items scored nearest a line where the verdict flips (the gate's `pass_threshold` of
  the scorer, or `agreement_threshold`): a small error of the judge there changes pass to fail.
- random: a seeded sample, stratified by score (equal-count bands of the items' mean score, each
  given its share of the sample), so the labels cover the whole scale and estimate agreement without
  the bias of the other two rules.

Whatever the rule, items nobody has labelled come first: labelled ones are taken only when the
unlabelled are fewer than asked. Everything here is pure: the items come from results.jsonl, what is
labelled from the traces (tracking/review.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evalframe.results.scores import ItemResult

RULES = ("disagreement", "threshold", "random")
STRATA = 5  # bands of score a random sample is spread over


@dataclass(frozen=True)
class Candidate:
    """An item that can be queued: it has a trace to label."""

    id: str
    trace_id: str
    scores: dict[str, float]  # scorer -> the item's score (NaN: unscored)
    judgments: dict[str, list[float]] = field(default_factory=dict)  # scorer -> each judge's, repeat's
    labelled: bool = False  # a person already labelled it for one of the scorers


def candidates(
    items: Sequence[ItemResult], scorers: Sequence[str], traces: Mapping[str, str], labelled: set[str]
) -> list[Candidate]:
    """The items in `traces` (item id -> its trace id; "" for an item labelled in a file, without
    one), in the run's order."""
    found = []
    for item in items:
        trace_id = traces.get(item.id)
        if trace_id is None:
            continue
        results = {name: item.scores[name] for name in scorers if name in item.scores}
        found.append(
            Candidate(
                id=item.id,
                trace_id=trace_id,
                scores={name: r.score for name, r in results.items()},
                judgments={name: [j.score for j in r.judgments] for name, r in results.items()},
                labelled=trace_id in labelled,
            )
        )
    return found


def _range(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return max(known) - min(known) if len(known) > 1 else 0.0


def disagreement(candidate: Candidate) -> tuple[float, float]:
    """(the widest range of one scorer's judgments, the range of the item's scores over its scorers)."""
    judges = max((_range(scores) for scores in candidate.judgments.values()), default=0.0)
    return judges, _range(list(candidate.scores.values()))


def nearness(candidate: Candidate, lines: Mapping[str, Sequence[float]]) -> float:
    """How near the item's nearest score is to a line of its scorer (`lines`: scorer -> thresholds)."""
    gaps = [
        abs(score - line)
        for name, score in candidate.scores.items()
        if not math.isnan(score)
        for line in lines.get(name, (0.5,))
    ]
    return min(gaps, default=math.inf)


def _mean(candidate: Candidate) -> float:
    known = [s for s in candidate.scores.values() if not math.isnan(s)]
    return sum(known) / len(known) if known else -1.0  # unscored items form a band of their own


def stratified(pool: Sequence[Candidate], size: int, rng: random.Random) -> list[Candidate]:
    """`size` of `pool` drawn at random, each band of score given its share (largest remainder)."""
    if size >= len(pool):
        return list(pool)
    ranked = sorted(pool, key=lambda c: (_mean(c), c.id))
    bands = min(STRATA, size)
    edges = [round(i * len(ranked) / bands) for i in range(bands + 1)]
    strata = [ranked[edges[i] : edges[i + 1]] for i in range(bands)]
    exact = [size * len(s) / len(ranked) for s in strata]
    shares = [math.floor(e) for e in exact]
    for i in sorted(range(bands), key=lambda i: shares[i] - exact[i])[: size - sum(shares)]:
        shares[i] += 1
    return [c for stratum, share in zip(strata, shares, strict=True) for c in rng.sample(stratum, share)]


def select(
    pool: Sequence[Candidate],
    size: int,
    rule: str,
    lines: Mapping[str, Sequence[float]] | None = None,
    seed: int = 0,
) -> list[Candidate]:
    """`size` candidates of `pool` by `rule`, the unlabelled first, best first; ties go to the smaller
    item id (results.jsonl holds items in the order they finished, which differs between runs)."""
    fresh = [c for c in pool if not c.labelled]
    done = [c for c in pool if c.labelled]
    if rule == "random":
        rng = random.Random(seed)
        chosen = stratified(fresh, size, rng)
        return chosen + stratified(done, size - len(chosen), rng)
    if rule == "disagreement":
        ranked = sorted(pool, key=lambda c: (c.labelled, *(-v for v in disagreement(c)), c.id))
    elif rule == "threshold":
        ranked = sorted(pool, key=lambda c: (c.labelled, nearness(c, lines or {}), c.id))
    else:
        raise ValueError(f"unknown rule {rule!r}")
    return ranked[:size]
