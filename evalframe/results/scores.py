"""What a run scores, as it flows through a run: Row (data/rows.py) -> output (targets/) -> StepResult
per model call (models/steps.py) -> Judgment per judge -> ScoreResult per scorer and item -> ItemResult
per row -> RunResult (results/run_result.py) with a ScorerSummary per scorer; the objective a sweep
ranks by and the gate's verdict (GateVerdict).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from evalframe.models.steps import StepResult, Usage, cut

RAW_REPLY_LIMIT = 20000  # characters of a raw reply stored (raw_reply_limit in conf/config.yaml)


@dataclass
class Judgment:
    """One judge's verdict on one item in one repeat: what a panel of judges, or repeats, aggregate."""

    judge: str  # the judge's label: its preset's name (gpt), else its model's
    repeat: int  # 0-based
    score: float  # NaN: this judge failed on the item in this repeat (error says why)
    reason: str
    error: str | None = None


def turn_verdicts(details: Any) -> list[Mapping[str, Any]]:
    """The per-turn verdicts one judgment kept in its details (`details["turns"]`: one entry per judged
    assistant turn, in order, each {turn, verdict, score, reason}); none when it judged no turns."""
    turns = details.get("turns") if isinstance(details, Mapping) else None
    return [t for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else []


def turn_line(entry: Mapping[str, Any]) -> str:
    """One turn's verdict in a line, named by the turn's number in the conversation: `turn 4 forgot
    (0.00): reason`."""
    score = entry.get("score")
    shown = f" ({score:.2f})" if isinstance(score, int | float) and not math.isnan(score) else ""
    return f"turn {entry.get('turn')} {entry.get('verdict')}{shown}: {entry.get('reason', '')}"


def _verdict_lines(details: Any) -> list[str]:
    """The verdicts one judgment kept in its details, as ScoreResult.verdicts writes them."""
    if not isinstance(details, Mapping):
        return []
    # A conversation judge's, per assistant turn (named by its number), then any per-claim ones.
    lines = [turn_line(t) for t in turn_verdicts(details)]
    verdicts, statements = details.get("verdicts"), details.get("statements") or []
    if not isinstance(verdicts, list) and any(isinstance(s, Mapping) and "verdict" in s for s in statements):
        # the Judge's verdicts form: each statement with its verdict
        verdicts, statements = statements, [s.get("statement", "") for s in statements]
    if not isinstance(verdicts, list):
        return lines
    for i, v in enumerate(verdicts):
        if not isinstance(v, Mapping):
            continue
        said = f" “{statements[i]}”" if i < len(statements) else ""
        lines.append(f"{i} {v.get('verdict')}{said}: {v.get('reason', '')}")
    return lines


def cut_texts(value: Any, limit: int) -> Any:
    """`value` (details: JSON-like data) with every string longer than `limit` characters cut (calls.cut)."""
    if isinstance(value, str):
        return cut(value, limit, "text")
    if isinstance(value, Mapping):
        return {k: cut_texts(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [cut_texts(v, limit) for v in value]
    return value


@dataclass
class ScoreResult:
    """One scorer's verdict on one item. score is NaN when the item could not be scored."""

    score: float
    reason: str
    steps: list[StepResult] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # Every judgment the score aggregates (several judges, or repeats), in judge then repeat order;
    # empty when the score is one judgment (one judge asked once) or needed no judge at all.
    judgments: list[Judgment] = field(default_factory=list)
    # Left unscored by a scorer's written rule (its `empty` rule: "the output makes no claims"), not by
    # a failure: counted apart from the unscored items, never against max_unscored_rate (ScoreResult.empty).
    not_applicable: bool = False

    @property
    def scored(self) -> bool:
        return not math.isnan(self.score)

    @property
    def usage(self) -> Usage:
        return sum((s.usage for s in self.steps), Usage())

    @property
    def latency(self) -> float:
        return sum(s.latency for s in self.steps)

    def verdicts(self) -> list[str]:
        """One line per verdict a judge kept in details (per statement, claim or chunk, in order):
        `position verdict “statement”: reason`, or per assistant turn `turn 4 verdict: reason`; none
        when it kept no verdicts. A panel's (several
        judges, or repeats) are each judgment's in turn, named: `a: 0 yes “...”: ...`, `a, repeat 2:
        ...`, or `repeat 2: ...` for one judge."""
        return self._lines(_verdict_lines)

    def turn_lines(self) -> list[str]:
        """The per-turn verdicts alone (a conversation judge's), as verdicts() writes them: `turn 4
        forgot (0.00): reason`, a panel's named by judge."""
        return self._lines(lambda details: [turn_line(t) for t in turn_verdicts(details)])

    def _lines(self, lines_of: Callable[[Any], list[str]]) -> list[str]:
        panel = self.details.get("judgments")
        if not isinstance(panel, list):
            return lines_of(self.details)
        judges = len({j.judge for j in self.judgments}) > 1
        repeats = any(j.repeat for j in self.judgments)
        lines = []
        for j, details in zip(self.judgments, panel, strict=False):  # both in judge then repeat order
            name = ", ".join(([j.judge] if judges else []) + ([f"repeat {j.repeat + 1}"] if repeats else []))
            lines += [f"{name}: {line}" for line in lines_of(details)]
        return lines

    def truncated_turns(self) -> list[int]:
        """The turns cut from the judge's prompt (oldest first, data.conversations.truncated): the judge
        never read them, so a verdict cannot rest on them."""
        cut = self.details.get("truncated_turns")
        return [n for n in cut if isinstance(n, int)] if isinstance(cut, list) else []

    def stored(self, limit: int) -> ScoreResult:
        """The score as results.jsonl and MLflow keep it: each step as StepResult.stored, and the reason,
        the judgments' reasons and every text of the details cut to `limit` characters. They are read
        off the steps' validated replies, which hold them whole (a re-score reads them again), so a
        huge reply is not stored once more in every place that shows it (items.json, reasons.md,
        report.html, the traces' assessments)."""
        return replace(
            self,
            reason=cut(self.reason, limit, "reason"),
            steps=[s.stored(limit) for s in self.steps],
            details=cut_texts(self.details, limit),
            judgments=[replace(j, reason=cut(j.reason, limit, "reason")) for j in self.judgments],
        )

    @classmethod
    def unscored(cls, error: str, steps: list[StepResult] | None = None) -> ScoreResult:
        return cls(score=math.nan, reason=f"unscored: {error}", steps=steps or [], error=error)

    @classmethod
    def empty(cls, why: str, steps: list[StepResult] | None = None) -> ScoreResult:
        """Nothing to measure, and the scorer's rule says to leave it unscored (not_applicable)."""
        return cls(score=math.nan, reason=f"not applicable: {why}", steps=steps or [], not_applicable=True)

    def by_judge(self) -> dict[str, list[float]]:
        """Each judge's scores on this item, one per repeat (NaN where it failed)."""
        found: dict[str, list[float]] = {}
        for j in self.judgments:
            found.setdefault(j.judge, []).append(j.score)
        return found

    def repeat_std(self) -> float:
        """How much the repeats of one judge differ on this item: the population standard deviation of
        each judge's scored repeats, averaged over the judges; NaN without repeats to compare."""
        spreads = [
            statistics.pstdev(scored)
            for scores in self.by_judge().values()
            if len(scored := [s for s in scores if not math.isnan(s)]) > 1
        ]
        return statistics.fmean(spreads) if spreads else math.nan


@dataclass
class ItemResult:
    id: str
    input: str
    ground_truth: str | None
    output: str
    scores: dict[str, ScoreResult] = field(default_factory=dict)
    target_step: StepResult | None = None  # how the output was generated (target=llm)
    target_error: str | None = None
    human: float | None = None  # a person's score from the dataset, if it has one
    # The dataset record (every column): judges may use any column in their templates (`row`), so a
    # re-score renders them exactly as the run did without the dataset file.
    record: dict[str, Any] = field(default_factory=dict)
    # The MLflow trace the row came from (a trace dataset, a live target's own trace) and its RETRIEVER
    # span: where the item's verdicts are written back (tracking.feedback), also by a later log-run.
    trace_id: str | None = None
    retriever_span_id: str | None = None
    # A conversation item: the conversation its judges judged (row.messages, Conversation.as_records():
    # the dataset's, or the one a live target regenerated), whatever shape or column it was read from;
    # what report.html shows as a chat beside each turn's verdicts. None for a single-turn item.
    conversation: list[dict[str, Any]] | None = None

    def stored(self, limit: int) -> ItemResult:
        """The item as it is stored: its scores and its target step as they say (their `stored`)."""
        scores = {n: r.stored(limit) for n, r in self.scores.items()}
        target = self.target_step.stored(limit) if self.target_step else None
        return replace(self, scores=scores, target_step=target)


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str = "maximize"
    value: float = math.nan
    interval: tuple[float, float] = (math.nan, math.nan)  # its 95% interval, when the metric has one

    @property
    def worst(self) -> float:
        return -math.inf if self.direction == "maximize" else math.inf

    def returned(self) -> float:
        """What the task hands to the sweeper. A NaN objective (all items unscored, or constant scores
        so no rank correlation exists) becomes the worst value: Optuna rejects NaN and, through the
        Hydra sweeper, would crash the whole search; the worst value just steers it away."""
        return self.worst if math.isnan(self.value) else self.value

    def why_worst(self) -> str | None:
        """Why the sweeper is handed the worst value instead of this objective's (None: it is not)."""
        if not math.isnan(self.value):
            return None
        why = (
            "a model without a known price answered (README: Cost)"
            if self.metric == "usage/cost"
            else "no scored items, or every score the same"
        )
        return f"objective {self.metric} is NaN for this run ({why}); reported to the sweeper as {self.worst}"

    def to_json(self) -> dict[str, Any]:
        """As run.json records it (NaN as null: strict JSON)."""
        value, low, high = (None if math.isnan(v) else v for v in (self.value, *self.interval))
        return {
            "metric": self.metric,
            "value": value,
            "direction": self.direction,
            "ci_low": low,
            "ci_high": high,
        }

    def rank(self, value: float | None) -> float:
        """Sort key, best first; a missing or NaN value sorts last."""
        if value is None or math.isnan(value):
            return math.inf
        return -value if self.direction == "maximize" else value


@dataclass
class ScorerSummary:
    mean: float
    std: float
    min: float
    max: float
    scored: int
    unscored: int  # failed (the judge's reply unusable, a request failed): max_unscored_rate counts them
    cost: float
    not_applicable: int = 0  # left unscored by the scorer's empty rule: nothing to measure

    @classmethod
    def of_scores(cls, scores: Iterable[float], cost: float, not_applicable: int = 0) -> ScorerSummary:
        """Aggregate over scored items only: an unscored item (NaN) is counted, never averaged in as 0;
        `not_applicable` of the NaNs are items with nothing to measure, not failures."""
        every = list(scores)
        values = [v for v in every if not math.isnan(v)]
        nan = math.nan
        return cls(
            mean=statistics.fmean(values) if values else nan,
            std=statistics.pstdev(values) if len(values) > 1 else (0.0 if values else nan),
            min=min(values) if values else nan,
            max=max(values) if values else nan,
            scored=len(values),
            unscored=len(every) - len(values) - not_applicable,
            cost=cost,
            not_applicable=not_applicable,
        )


@dataclass(frozen=True)
class GateVerdict:
    """The gate's verdict on a finished run: the exit code it gives and its failed checks, a line each."""

    code: int
    failed: tuple[str, ...] = ()

    @property
    def word(self) -> str:
        return "passed" if self.code == 0 else "failed"


SHOWN_UNSCORED = 5  # unscored items per scorer listed after the summary (all are in results.jsonl)


@dataclass(frozen=True)
class Unscored:
    """An unscored item in one line: its id, the step that failed and why."""

    id: str
    step: str
    error: str

    @classmethod
    def of(cls, item_id: str, result: ScoreResult) -> Unscored:
        failed = next((s.step for s in result.steps if s.error), None)
        error = " ".join((result.error or result.reason).split())  # one line
        step, _, rest = error.partition(": ")
        if failed is None and rest and " " not in step:  # "target: ..." from an output never produced
            failed, error = step, rest
        elif failed and error.startswith(f"{failed}: "):
            error = error.removeprefix(f"{failed}: ")
        return cls(item_id, failed or "–", error)
