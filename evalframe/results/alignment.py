"""Aligning a judge with people, the pure part (evalframe.run.align runs it): which labelled items
become the aligned judge's examples, how the judge agrees with people on the held-out items before
and after, and the check that no held-out item reached a prompt as an example.

Everything here is computed from items already judged; nothing calls a model.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalframe.results import agreement
from evalframe.results.intervals import NONE, Interval
from evalframe.results.scores import ItemResult

# An aligned judge's name is its judge's and this (scorers.aligned writes it; compare pairs the two).
SUFFIX = "_aligned"
# The agreement figures the held-out table shows, each with a change between the two judges.
SHOWN = ("kappa", "accuracy", "spearman")
# How an example's texts are marked in a prompt: fenced (scorers.prompts.fence) under these labels, so
# the recorded prompts say which items were shown as examples (`leaks`).
EXAMPLE_LABELS = {
    "input": "EXAMPLE_INPUT",
    "ground_truth": "EXAMPLE_GROUND_TRUTH",
    "output": "EXAMPLE_OUTPUT",
}
_FENCED = re.compile(r"<(EXAMPLE_[A-Z_]+)-([0-9a-f]{8})>\n(.*?)\n</\1-\2>", re.DOTALL)
EXAMPLE_HEADING = "### Example "  # each example of the prompt starts with it


@dataclass(frozen=True)
class Example:
    """A labelled training item shown to the aligned judge: the item, people's verdict, their comment,
    and what the judge had said of it."""

    id: str
    input: str
    ground_truth: str | None
    output: str
    human: float  # on the dataset's scale (dataset.human_range)
    normalized: float  # on [0, 1]
    judge: float  # the unaligned judge's score, on [0, 1]
    judge_reason: str
    comment: str | None = None

    @property
    def disagrees(self) -> bool:
        return abs(self.judge - self.normalized) >= 0.5

    def texts(self) -> tuple[str, str, str]:
        """What identifies the item in a prompt: its input, ground truth and output."""
        return (self.input or "", self.ground_truth or "", self.output or "")


def labelled(
    items: Iterable[ItemResult],
    scorer: str,
    human_range: Sequence[float],
    comment: str | None = None,
    comments: Mapping[str, str] | None = None,
) -> list[Example]:
    """The items people labelled and the judge scored, as candidate examples. People's comment on an
    item: what they said with their label (`comments`, by item id: review pull's labels.jsonl), else
    the record's column `comment`, else, for a trace, the rationale of its newest HUMAN feedback that
    has one (the Review tab's comment, or log_feedback's rationale), if any."""
    low, high = float(human_range[0]), float(human_range[1])
    found = []
    for item in items:
        result = item.scores.get(scorer)
        if item.human is None or result is None or math.isnan(result.score):
            continue
        said = (
            (comments or {}).get(item.id)
            or (item.record.get(comment) if comment else None)
            or _people_said(item.record)
        )
        found.append(
            Example(
                item.id,
                item.input,
                item.ground_truth,
                item.output,
                float(item.human),
                (float(item.human) - low) / (high - low),
                float(result.score),
                result.reason,
                str(said) if said not in (None, "") else None,
            )
        )
    return found


def _people_said(record: Mapping[str, Any]) -> str | None:
    """A trace record's newest valid HUMAN feedback rationale (evalframe.tracking.trace_records' shape);
    None for a record that is no trace or has none."""
    found = None
    assessments = record.get("assessments")
    for a in assessments if isinstance(assessments, list) else []:
        human = isinstance(a, Mapping) and a.get("kind") == "feedback" and a.get("source_type") == "HUMAN"
        if human and a.get("valid", True) and a.get("rationale"):
            found = str(a["rationale"])
    return found


def select(candidates: Sequence[Example], k: int, seed: int = 0) -> list[Example]:
    """`k` examples balanced over people's labels, taken in turn from each label (lowest first): within
    a label, the judge's disagreements first (largest first), then a seeded order of the rest, so the
    same labels always give the same examples."""
    by_label: dict[float, list[Example]] = {}
    for example in candidates:
        by_label.setdefault(example.human, []).append(example)

    def order(e: Example) -> tuple[float, str]:
        shuffled = hashlib.sha256(f"{seed}:{e.id}".encode()).hexdigest()
        return (-abs(e.judge - e.normalized) if e.disagrees else 1.0, shuffled)

    queues = [sorted(by_label[label], key=order) for label in sorted(by_label)]
    chosen: list[Example] = []
    while len(chosen) < k and any(queues):
        for queue in queues:
            if queue and len(chosen) < k:
                chosen.append(queue.pop(0))
    return chosen


@dataclass(frozen=True)
class Change:
    """One agreement figure on the held-out items: before, after (each with its interval) and the
    after − before difference with its paired-bootstrap interval (items resampled, both judges' scores
    of an item kept together)."""

    metric: str
    before: float
    before_interval: Interval
    after: float
    after_interval: Interval
    difference: float
    interval: Interval

    @property
    def verdict(self) -> str:
        """As `evalframe compare` says it: better or worse when the whole interval is above or below 0."""
        if self.interval.known and self.interval.low > 0:
            return "better"
        if self.interval.known and self.interval.high < 0:
            return "worse"
        return "unclear"


@dataclass(frozen=True)
class HeldOut:
    """The two judges on the same held-out items, paired by id."""

    n: int  # held-out items both judges scored and people labelled
    changes: list[Change]
    confusion: dict[str, list[list[int]]] = field(default_factory=dict)  # before/after: [[TN, FP], [FN, TP]]

    def change(self, metric: str) -> Change:
        return next(c for c in self.changes if c.metric == metric)


def held_out(
    before: Sequence[ItemResult],
    after: Sequence[ItemResult],
    before_scorer: str,
    after_scorer: str,
    human_range: Sequence[float],
    threshold: float = 0.5,
) -> HeldOut:
    """Agreement with people of the judge before and after alignment, on the items both scored."""
    theirs = {item.id: item for item in after}
    rows = [
        (item.scores[before_scorer].score, theirs[item.id].scores[after_scorer].score, float(item.human))
        for item in before
        if item.id in theirs and item.human is not None
    ]
    rows = [r for r in rows if not (math.isnan(r[0]) or math.isnan(r[1]))]
    old, new, human = ([r[i] for r in rows] for i in range(3))
    old_figures = agreement.agreement(old, human, human_range, threshold)
    new_figures = agreement.agreement(new, human, human_range, threshold)
    old_intervals = agreement.intervals(old, human, human_range, threshold, keys=SHOWN)
    new_intervals = agreement.intervals(new, human, human_range, threshold, keys=SHOWN)
    changes = []
    for metric in SHOWN:
        interval = (
            agreement.change(metric, old, new, human, human_range, threshold) if len(rows) > 1 else NONE
        )
        b, a = old_figures.get(metric, math.nan), new_figures.get(metric, math.nan)
        changes.append(
            Change(
                metric,
                b,
                old_intervals.get(metric, NONE),
                a,
                new_intervals.get(metric, NONE),
                a - b,
                interval,
            )
        )
    low, high = float(human_range[0]), float(human_range[1])
    people = [(h - low) / (high - low) >= threshold for h in human]
    confusion = {
        "before": _confusion(people, [s >= threshold for s in old]),
        "after": _confusion(people, [s >= threshold for s in new]),
    }
    return HeldOut(len(rows), changes, confusion)


def _confusion(people: Sequence[bool], judge: Sequence[bool]) -> list[list[int]]:
    """Pass/fail counts: rows people's fail, pass; columns the judge's fail, pass."""
    table = [[0, 0], [0, 0]]
    for p, j in zip(people, judge, strict=True):
        table[int(p)][int(j)] += 1
    return table


def shown_examples(prompt: str) -> list[tuple[str, str, str]]:
    """The items a rendered prompt shows as examples, each as (input, ground truth, output): its
    example sections' fenced texts."""
    found = []
    for section in prompt.split(EXAMPLE_HEADING)[1:]:
        texts = {label: body for label, _, body in _FENCED.findall(section)}
        found.append(
            (
                texts.get(EXAMPLE_LABELS["input"], ""),
                texts.get(EXAMPLE_LABELS["ground_truth"], ""),
                texts.get(EXAMPLE_LABELS["output"], ""),
            )
        )
    return found


def leaks(prompts: Iterable[tuple[str, str]], held: Iterable[ItemResult]) -> list[tuple[str, str]]:
    """(held-out item, prompt's item) for every prompt that shows a held-out item as an example: from
    `prompts`, (judged item id, rendered prompt text) as the run recorded them. None is the proof that
    the held-out figures were measured on items the aligned judge never saw labelled."""
    by_texts = {(i.input or "", i.ground_truth or "", i.output or ""): i.id for i in held}
    found = []
    for judged, text in prompts:
        for texts in shown_examples(text):
            if texts in by_texts:
                found.append((by_texts[texts], judged))
    return found
