"""A run's result: its items (all, or the first `keep`), and the aggregates every item is counted in
as it finishes (scores, human scores, judges, figures, cost): means, summaries and metrics."""

from __future__ import annotations

import math
import statistics
from array import array
from dataclasses import asdict, dataclass, field

from evalframe.models.steps import Stats, Usage
from evalframe.results.scores import (
    SHOWN_UNSCORED,
    GateVerdict,
    ItemResult,
    Objective,
    ScoreResult,
    ScorerSummary,
    Unscored,
)


@dataclass(repr=False)
class RunResult:
    """A run's results. Aggregates (scores per scorer, human scores, cost, usage) cover every item and
    cost 8 bytes per item and scorer; `items` holds the items themselves, all of them unless `keep`
    caps it (a large run keeps the first `keep`: every item is in its results.jsonl anyway)."""

    def __repr__(self) -> str:
        # Short: asyncio puts the run's task, result and all, in the repr of its Ctrl-C handler, and
        # Python formats that repr when the handler is put back (signal.signal): a dataclass repr of
        # every item took 0.1 s at 500 items, in the time from the last item to exit.
        return f"RunResult(scorers={self.scorers}, count={self.count}, kept={len(self.items)})"

    items: list[ItemResult]
    scorers: list[str]
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)  # scorer -> metric -> value
    # metric (`<scorer>/mean`, `<scorer>/agreement/spearman`) -> its 95% interval (low, high); NaN: none
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    objective: Objective | None = None  # the number a sweep ranks by (objective.py); set once scored
    run_id: str | None = None  # the MLflow run it was logged to, if it was
    keep: int | None = None
    stats: Stats = field(default_factory=Stats)  # the run's model calls, cache hits and cost
    verdict: GateVerdict | None = None  # the gate's, once the run is scored
    facts: dict[str, str] = field(default_factory=dict)  # what was run: dataset, judges, date, version
    lower_better: frozenset[str] = frozenset()  # the scorers whose lower scores are the good ones
    count: int = field(default=0, init=False)  # items in the run, kept or not
    traced: int = field(default=0, init=False)  # of them, items read from a trace (verdicts go onto it)
    scores: dict[str, array[float]] = field(default_factory=dict, init=False)  # NaN: unscored
    human: array[float] = field(default_factory=lambda: array("d"), init=False)  # NaN: none
    usage: Usage = field(default_factory=Usage, init=False)
    # Panels and repeats (evalframe.scorers.panel), per scorer and item: each judge's score (the mean of its
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
        self.traced += bool(item.trace_id)
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
