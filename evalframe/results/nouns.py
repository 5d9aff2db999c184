"""The nouns that flow through a run, and their aggregation.

Row (data.py) -> output (targets.py) -> StepResult per model call -> ScoreResult per scorer and item
-> ItemResult per row -> RunResult with a ScorerSummary per scorer.
"""

from __future__ import annotations

import math
import statistics
import sys
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from evalframe.models.calls import Stats, StepResult, Usage

RAW_REPLY_LIMIT = 20000  # characters of a raw reply stored (raw_reply_limit in conf/config.yaml)


@dataclass
class Judgment:
    """One judge's verdict on one item in one repeat: what a panel of judges, or repeats, aggregate."""

    judge: str  # the judge's label: its preset's name (gpt), else its model's
    repeat: int  # 0-based
    score: float  # NaN: this judge failed on the item in this repeat (error says why)
    reason: str
    error: str | None = None


def _verdict_lines(details: Any) -> list[str]:
    """The verdicts one judgment kept in its details, as ScoreResult.verdicts writes them."""
    if not isinstance(details, Mapping):
        return []
    verdicts, statements = details.get("verdicts"), details.get("statements") or []
    if not isinstance(verdicts, list) and any(isinstance(s, Mapping) and "verdict" in s for s in statements):
        # the Judge's verdicts form: each statement with its verdict
        verdicts, statements = statements, [s.get("statement", "") for s in statements]
    if not isinstance(verdicts, list):
        return []
    lines = []
    for i, v in enumerate(verdicts):
        if not isinstance(v, Mapping):
            continue
        said = f" “{statements[i]}”" if i < len(statements) else ""
        lines.append(f"{i} {v.get('verdict')}{said}: {v.get('reason', '')}")
    return lines


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
        `position verdict “statement”: reason`; none when it kept no verdicts. A panel's (several
        judges, or repeats) are each judgment's in turn, named: `a: 0 yes “...”: ...`, `a, repeat 2:
        ...`, or `repeat 2: ...` for one judge."""
        panel = self.details.get("judgments")
        if not isinstance(panel, list):
            return _verdict_lines(self.details)
        judges = len({j.judge for j in self.judgments}) > 1
        repeats = any(j.repeat for j in self.judgments)
        lines = []
        for j, details in zip(self.judgments, panel, strict=False):  # both in judge then repeat order
            name = ", ".join(([j.judge] if judges else []) + ([f"repeat {j.repeat + 1}"] if repeats else []))
            lines += [f"{name}: {line}" for line in _verdict_lines(details)]
        return lines

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

    def stored(self, limit: int) -> ItemResult:
        """The item with every step's raw reply as it is stored (StepResult.stored)."""
        scores = {n: replace(r, steps=[s.stored(limit) for s in r.steps]) for n, r in self.scores.items()}
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

    def returned(self, sweep: bool = True) -> float:
        """What the task hands to the sweeper. A NaN objective (all items unscored, or constant scores
        so no rank correlation exists) becomes the worst value: Optuna rejects NaN and, through the
        Hydra sweeper, would crash the whole search; the worst value just steers it away. Said only in
        a sweep (`sweep`): a single run has no sweeper, and its summary shows the unscored items."""
        if math.isnan(self.value):
            if not sweep:
                return self.worst
            why = (
                "a model without a known price answered (README: Cost)"
                if self.metric == "usage/cost"
                else "no scored items, or every score the same"
            )
            print(
                f"warning: objective {self.metric} is NaN for this run ({why}); reported to the sweeper "
                f"as {self.worst}, the worst value",
                file=sys.stderr,
            )
            return self.worst
        return self.value

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
class Verdict:
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


@dataclass
class RunResult:
    """A run's results. Aggregates (scores per scorer, human scores, cost, usage) cover every item and
    cost 8 bytes per item and scorer; `items` holds the items themselves, all of them unless `keep`
    caps it (a large run keeps the first `keep`: every item is in its results.jsonl anyway)."""

    items: list[ItemResult]
    scorers: list[str]
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)  # scorer -> metric -> value
    # metric (`<scorer>/mean`, `<scorer>/agreement/spearman`) -> its 95% interval (low, high); NaN: none
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    objective: Objective | None = None  # the number a sweep ranks by (objective.py); set once scored
    run_id: str | None = None  # the MLflow run it was logged to, if it was
    keep: int | None = None
    stats: Stats = field(default_factory=Stats)  # the run's model calls, cache hits and cost
    verdict: Verdict | None = None  # the gate's, once the run is scored
    facts: dict[str, str] = field(default_factory=dict)  # what was run: dataset, judges, date, version
    lower_better: frozenset[str] = frozenset()  # the scorers whose lower scores are the good ones
    count: int = field(default=0, init=False)  # items in the run, kept or not
    scores: dict[str, array[float]] = field(default_factory=dict, init=False)  # NaN: unscored
    human: array[float] = field(default_factory=lambda: array("d"), init=False)  # NaN: none
    usage: Usage = field(default_factory=Usage, init=False)
    # Panels and repeats (evalframe.panel), per scorer and item: each judge's score (the mean of its
    # repeats; NaN where it failed; the item's own score where no judge had to be asked), whether
    # judges were asked (their agreement counts only those items), and the spread of the repeats.
    judges: dict[str, dict[str, array[float]]] = field(default_factory=dict, init=False)
    judged: dict[str, array[int]] = field(default_factory=dict, init=False)
    spread: dict[str, array[float]] = field(default_factory=dict, init=False)  # NaN: no repeats
    judge_agreement: dict[str, dict[str, float]] = field(default_factory=dict)  # scorer -> alpha, spearman
    # Extra per-item figures a scorer reports beside its score (details["figures"], e.g. tool-call
    # precision and recall), per scorer: figure -> [sum, items], over its scored items.
    figures: dict[str, dict[str, list[float]]] = field(default_factory=dict, init=False)
    _costs: dict[str, float] = field(default_factory=dict, init=False)
    not_applicable: dict[str, int] = field(default_factory=dict, init=False)  # per scorer (ScoreResult's)
    # the first SHOWN_UNSCORED unscored items per scorer, also when `keep` caps `items`
    unscored: dict[str, list[Unscored]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        given, self.items = self.items, []
        for name in self.scorers:
            self.scores[name], self._costs[name], self.unscored[name] = array("d"), 0.0, []
            self.judges[name], self.judged[name], self.spread[name] = {}, array("b"), array("d")
            self.figures[name], self.not_applicable[name] = {}, 0
        for item in given:
            self.add(item)

    def _add_judgments(self, name: str, result: ScoreResult) -> None:
        judges, by_judge = self.judges[name], result.by_judge()
        for label in [label for label in by_judge if label not in judges]:  # first seen on this item
            earlier = zip(self.scores[name], self.judged[name], strict=True)
            judges[label] = array("d", (math.nan if asked else score for score, asked in earlier))
        for label, scores in judges.items():
            own = [s for s in by_judge.get(label, []) if not math.isnan(s)]
            scores.append(statistics.fmean(own) if own else math.nan if by_judge else result.score)
        self.judged[name].append(bool(by_judge))
        self.spread[name].append(result.repeat_std())

    def add(self, item: ItemResult) -> None:
        """Count one finished item in the aggregates (and keep it, unless `keep` items are kept)."""
        self.count += 1
        for name in self.scorers:
            result = item.scores[name]
            self._add_judgments(name, result)
            self.scores[name].append(result.score)
            self._add_figures(name, result)
            self.not_applicable[name] += result.not_applicable
            if result.error is not None and len(self.unscored[name]) < SHOWN_UNSCORED:
                self.unscored[name].append(Unscored.of(item.id, result))
            self._costs[name] += result.usage.cost
            self.usage += result.usage
        if item.target_step:
            self.usage += item.target_step.usage
        self.human.append(math.nan if item.human is None else item.human)
        if self.keep is None or len(self.items) < self.keep:
            self.items.append(item)

    def _add_figures(self, name: str, result: ScoreResult) -> None:
        for figure, value in (result.details.get("figures") or {}).items() if result.scored else ():
            if isinstance(value, int | float) and not math.isnan(value):
                total = self.figures[name].setdefault(figure, [0.0, 0.0])
                total[0], total[1] = total[0] + value, total[1] + 1

    def figure_means(self) -> dict[str, dict[str, float]]:
        """Per scorer that reports figures, each figure's mean over its scored items."""
        return {
            name: {figure: total / n for figure, (total, n) in figures.items()}
            for name, figures in self.figures.items()
            if figures
        }

    @property
    def means(self) -> dict[str, float]:
        """Mean score per scorer, over scored items (NaN when none could be scored)."""
        return {name: s.mean for name, s in self.summaries.items()}

    @property
    def summaries(self) -> dict[str, ScorerSummary]:
        return {
            name: ScorerSummary.of_scores(self.scores[name], self._costs[name], self.not_applicable[name])
            for name in self.scorers
        }

    def metrics(self) -> dict[str, float]:
        """Aggregate metrics, named `<scorer>/<statistic>` (NaN statistics are left out)."""
        out: dict[str, float] = {}
        for name, s in self.summaries.items():
            for key, value in asdict(s).items():
                if not (isinstance(value, float) and math.isnan(value)):
                    out[f"{name}/{key}"] = float(value)
        for name, metrics in self.agreement.items():
            for key, value in metrics.items():
                if not math.isnan(value):
                    out[f"{name}/agreement/{key}"] = value
        out.update(self._panel_metrics())
        for name, means in self.figure_means().items():
            out.update({f"{name}/{figure}": mean for figure, mean in means.items()})
        for metric, (low, high) in self.intervals.items():
            if not (math.isnan(low) or math.isnan(high)):
                out[f"{metric}_ci_low"], out[f"{metric}_ci_high"] = low, high
        usage = self.usage
        out["usage/prompt_tokens"] = float(usage.prompt_tokens)
        out["usage/completion_tokens"] = float(usage.completion_tokens)
        if not math.isnan(usage.cost):  # unknown: left out, like every other NaN metric
            out["usage/cost"] = usage.cost
        out["usage/rate_limited"] = float(self.stats.rate_limited)
        out["usage/rate_limit_wait"] = self.stats.rate_wait
        return out

    def _panel_metrics(self) -> dict[str, float]:
        """`<scorer>/judge/<label>/{mean,unscored}` (two or more judges), `<scorer>/judge_agreement/*`,
        and for repeats `<scorer>/repeat_std` (mean per-item std) and `<scorer>/unstable` (share of
        items whose repeats do not all give the same score)."""
        out: dict[str, float] = {}
        for name, judges in self.judges.items():
            for label, scores in judges.items() if len(judges) > 1 else ():
                s = ScorerSummary.of_scores(scores, 0.0)
                if not math.isnan(s.mean):
                    out[f"{name}/judge/{label}/mean"] = s.mean
                out[f"{name}/judge/{label}/unscored"] = float(s.unscored)
        for name, metrics in self.judge_agreement.items():
            out.update({f"{name}/judge_agreement/{k}": v for k, v in metrics.items() if not math.isnan(v)})
        for name, spreads in self.spread.items():
            measured = [v for v in spreads if not math.isnan(v)]
            if measured:
                out[f"{name}/repeat_std"] = statistics.fmean(measured)
                out[f"{name}/unstable"] = sum(v > 1e-9 for v in measured) / len(measured)
        return out

    def unstable(self, name: str, limit: int = 5) -> list[tuple[str, float]]:
        """The kept items whose repeats differ most under scorer `name`: (id, repeat std), largest first."""
        spreads = [(i.id, i.scores[name].repeat_std()) for i in self.items if name in i.scores]
        moved = [(i, v) for i, v in spreads if not math.isnan(v) and v > 1e-9]
        return sorted(moved, key=lambda p: -p[1])[:limit]

    def table(self) -> dict[str, list[Any]]:
        """Per-item results as columns (one row per item): what MLflow's table view shows."""
        columns: dict[str, list[Any]] = {"id": [], "input": [], "ground_truth": [], "output": [], "human": []}
        judged = [n for n in self.scorers if any(i.scores[n].verdicts() for i in self.items)]
        for name in self.scorers:
            for key in ("score", "reason", "error", "raw_reply", "cost", "latency"):
                columns[f"{name}/{key}"] = []
            if name in judged:  # the verdicts each score comes from (per claim, statement or chunk)
                columns[f"{name}/verdicts"] = []
        for item in self.items:
            columns["id"].append(item.id)
            columns["input"].append(item.input)
            columns["ground_truth"].append(item.ground_truth)
            columns["output"].append(item.output)
            columns["human"].append(item.human)
            for name in self.scorers:
                r = item.scores[name]
                columns[f"{name}/score"].append(None if not r.scored else r.score)
                columns[f"{name}/reason"].append(r.reason)
                columns[f"{name}/error"].append(r.error)
                failed = next((s for s in r.steps if s.error), None)  # what the judge said, when unusable
                columns[f"{name}/raw_reply"].append(failed.raw if failed else None)
                columns[f"{name}/cost"].append(None if math.isnan(r.usage.cost) else r.usage.cost)
                columns[f"{name}/latency"].append(round(r.latency, 3))
                if name in judged:
                    columns[f"{name}/verdicts"].append("\n".join(r.verdicts()) or None)
        self._judgment_columns(columns)
        for name in self.scorers:
            for figure in self.figures[name]:
                columns[f"{name}/{figure}"] = [
                    i.scores[name].details.get("figures", {}).get(figure) for i in self.items
                ]
        return columns

    def _judgment_columns(self, columns: dict[str, list[Any]]) -> None:
        """Each judge's score (its repeats' mean) and first reason per item, and the repeats' spread."""
        for name in self.scorers:
            labels = list(dict.fromkeys(j.judge for i in self.items for j in i.scores[name].judgments))
            repeated = any(not math.isnan(i.scores[name].repeat_std()) for i in self.items)
            for label in labels if len(labels) > 1 else ():
                scores, reasons = [], []
                for item in self.items:
                    mine = [j for j in item.scores[name].judgments if j.judge == label]
                    scored = [j for j in mine if not math.isnan(j.score)]
                    scores.append(statistics.fmean(j.score for j in scored) if scored else None)
                    reasons.append((scored or mine)[0].reason if mine else None)
                columns[f"{name}/judge/{label}/score"] = scores
                columns[f"{name}/judge/{label}/reason"] = reasons
            if repeated:
                stds = [i.scores[name].repeat_std() for i in self.items]
                columns[f"{name}/repeat_std"] = [None if math.isnan(v) else round(v, 4) for v in stds]


def to_jsonable(obj: Any) -> Any:
    """Dataclasses to plain JSON values; NaN becomes null so the output is strict JSON.

    Walks the fields directly: dataclasses.asdict deep-copies everything first, which made writing
    10,000 items take seconds.
    """
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields is not None:
        return {name: to_jsonable(getattr(obj, name)) for name in fields}
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj
