"""People's labels pulled from a review queue, and what they say about the judges.

labels.jsonl holds one line per answer: the item, its trace, the scorer, the answer as given (`label`),
its value on the scorer's scale (`value`, review_questions.Question.score), who gave it, their
comment and when. Per scorer, the judge's scores are compared with the people's (the mean of an item's
reviewers) by the agreement figures a dataset's human scores get (results/agreement.py: κ, accuracy,
Spearman, each with its 95% interval), and, where two or more people labelled an item, the people with
each other (Krippendorff's α at the interval level, with its interval over the items).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.results.agreement import agreement, intervals, krippendorff_alpha
from evalframe.results.intervals import NONE, Interval, bootstrap

FILE = "labels.jsonl"
SHOWN = ("n", "kappa", "accuracy", "spearman")  # the judge-vs-people figures a pull reports


@dataclass(frozen=True)
class Label:
    item_id: str
    trace_id: str
    scorer: str
    label: Any  # the answer as the reviewer gave it (a choice's name, a number, true/false)
    value: float  # on the scorer's scale
    reviewer: str
    comment: str | None
    time: str  # ISO 8601, UTC


def once_each(labels: Sequence[Label]) -> None:
    """A ConfigError when a reviewer answered one question on one item twice: which answer counts
    is theirs to say, not ours to guess."""
    seen: set[tuple[str, str, str]] = set()
    for label in labels:
        key = (label.item_id or label.trace_id, label.scorer, label.reviewer)
        if key in seen:
            raise ConfigError(
                f"reviewer {label.reviewer} answered {label.scorer} twice on item {label.item_id} "
                f"(trace {label.trace_id}): keep one answer in MLflow's Review tab, then pull again"
            )
        seen.add(key)


def write(path: Path, labels: Iterable[Label]) -> int:
    """labels.jsonl, written whole (a temporary file renamed over it): a pull never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as out:
        for label in labels:
            out.write(json.dumps(asdict(label), ensure_ascii=False) + "\n")
            count += 1
    partial.replace(path)
    return count


def read(path: Path) -> list[Label]:
    return [Label(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _by_item(labels: Sequence[Label]) -> dict[str, dict[str, float]]:
    """item id -> reviewer -> value."""
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for label in labels:
        found[label.item_id][label.reviewer] = label.value
    return found


def reviewers_alpha(labels: Sequence[Label]) -> tuple[float, Interval, int]:
    """Krippendorff's α of the reviewers over the items two or more of them labelled, its 95% interval
    (resampling those items) and how many items that is."""
    items = {i: by for i, by in _by_item(labels).items() if len(by) > 1}
    reviewers = sorted({r for by in items.values() for r in by})
    rows = [[items[i].get(r, math.nan) for i in sorted(items)] for r in reviewers]
    if not items:
        return math.nan, NONE, 0

    def alpha(*resampled: Sequence[float]) -> float:
        return krippendorff_alpha(resampled)

    [interval] = bootstrap(alpha, *rows)
    return krippendorff_alpha(rows), interval, len(items)


def figures(labels: Sequence[Label], scores: Mapping[str, float], threshold: float) -> dict[str, float]:
    """One scorer's figures: the judge (`scores`: item id -> its score) against the people (each
    item's mean label), and the people against each other; NaN where a figure has too few items."""
    people = {i: sum(by.values()) / len(by) for i, by in _by_item(labels).items()}
    ids = sorted(i for i in people if i in scores)
    ours, theirs = [scores[i] for i in ids], [people[i] for i in ids]
    found = agreement(ours, theirs, (0.0, 1.0), threshold)
    out: dict[str, float] = {"labels": float(len(labels)), "n": found["n"]}
    spans = intervals(ours, theirs, (0.0, 1.0), threshold) if len(ids) > 1 else {}
    for key in SHOWN[1:]:
        out[key] = found.get(key, math.nan)
        low, high = spans.get(key, NONE)
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = low, high
    alpha, (low, high), n = reviewers_alpha(labels)
    out.update({"reviewers_alpha": alpha, "reviewers_alpha_ci_low": low, "reviewers_alpha_ci_high": high})
    out["reviewers_n"] = float(n)
    return out
