"""The nouns that flow through a run, and their aggregation.

Row (data.py) -> output (targets.py) -> StepResult per model call -> ScoreResult per scorer and item
-> ItemResult per row -> RunResult with a ScorerSummary per scorer.
"""

from __future__ import annotations

import math
import statistics
import sys
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

Message = dict[str, str]  # one chat message: {"role": ..., "content": ...}


@dataclass
class Stats:
    """A run's running totals, for the progress bar and the summary."""

    calls: int = 0  # requests sent to a model, retries included
    hits: int = 0  # replies taken from the cache or shared with an identical request in flight
    cost: float = 0.0
    batched: int = 0  # requests sent through a batch API (model.batch=true), counted in calls too
    batch_cost: float = 0.0  # what those cost at the batch price (part of cost)
    unbatched_cost: float = 0.0  # what they would have cost as normal calls


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0  # USD, from LiteLLM's local price map; 0 when the model is not priced

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost + other.cost,
        )


@dataclass
class StepResult:
    """One step of a scorer or target: a rendered prompt, the model's reply, and what it cost."""

    step: str
    messages: list[Message]
    reply: dict[str, Any] | None = None  # the validated structured reply
    raw: str | None = None  # the model's last raw text, kept for debugging unparseable replies
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    latency: float = 0.0  # seconds spent waiting for the model, all attempts
    error: str | None = None
    cached: bool = False  # served from the cache or shared with an identical request: no cost
    # The request's cache key (model, parameters, messages, schema): a re-score of a logged run
    # serves exactly the requests it made from its stored steps, and no other (evalframe.rescore).
    key: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.reply is not None


@dataclass
class ScoreResult:
    """One scorer's verdict on one item. score is NaN when the item could not be scored."""

    score: float
    reason: str
    steps: list[StepResult] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def scored(self) -> bool:
        return not math.isnan(self.score)

    @property
    def usage(self) -> Usage:
        return sum((s.usage for s in self.steps), Usage())

    @property
    def latency(self) -> float:
        return sum(s.latency for s in self.steps)

    @classmethod
    def unscored(cls, error: str, steps: list[StepResult] | None = None) -> ScoreResult:
        return cls(score=math.nan, reason=f"unscored: {error}", steps=steps or [], error=error)


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


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str = "maximize"
    value: float = math.nan

    @property
    def worst(self) -> float:
        return -math.inf if self.direction == "maximize" else math.inf

    def returned(self) -> float:
        """What the task hands to the sweeper. A NaN objective (all items unscored, or constant scores
        so no rank correlation exists) becomes the worst value: Optuna rejects NaN and, through the
        Hydra sweeper, would crash the whole search; the worst value just steers it away."""
        if math.isnan(self.value):
            print(
                f"warning: objective {self.metric} is NaN for this run (no scored items, or every score "
                f"the same); reported to the sweeper as {self.worst}, the worst value",
                file=sys.stderr,
            )
            return self.worst
        return self.value

    def to_json(self) -> dict[str, Any]:
        """As run.json records it (NaN as null: strict JSON)."""
        value = None if math.isnan(self.value) else self.value
        return {"metric": self.metric, "value": value, "direction": self.direction}

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
    unscored: int
    cost: float

    @classmethod
    def of_scores(cls, scores: Iterable[float], cost: float) -> ScorerSummary:
        """Aggregate over scored items only: an unscored item (NaN) is counted, never averaged in as 0."""
        every = list(scores)
        values = [v for v in every if not math.isnan(v)]
        nan = math.nan
        return cls(
            mean=statistics.fmean(values) if values else nan,
            std=statistics.pstdev(values) if len(values) > 1 else (0.0 if values else nan),
            min=min(values) if values else nan,
            max=max(values) if values else nan,
            scored=len(values),
            unscored=len(every) - len(values),
            cost=cost,
        )


@dataclass
class RunResult:
    """A run's results. Aggregates (scores per scorer, human scores, cost, usage) cover every item and
    cost 8 bytes per item and scorer; `items` holds the items themselves, all of them unless `keep`
    caps it (a large run keeps the first `keep`: every item is in its results.jsonl anyway)."""

    items: list[ItemResult]
    scorers: list[str]
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)  # scorer -> metric -> value
    objective: Objective | None = None  # the number a sweep ranks by (objective.py); set once scored
    run_id: str | None = None  # the MLflow run it was logged to, if it was
    keep: int | None = None
    stats: Stats = field(default_factory=Stats)  # the run's model calls, cache hits and cost
    count: int = field(default=0, init=False)  # items in the run, kept or not
    scores: dict[str, array[float]] = field(default_factory=dict, init=False)  # NaN: unscored
    human: array[float] = field(default_factory=lambda: array("d"), init=False)  # NaN: none
    usage: Usage = field(default_factory=Usage, init=False)
    _costs: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        given, self.items = self.items, []
        for name in self.scorers:
            self.scores[name], self._costs[name] = array("d"), 0.0
        for item in given:
            self.add(item)

    def add(self, item: ItemResult) -> None:
        """Count one finished item in the aggregates (and keep it, unless `keep` items are kept)."""
        self.count += 1
        for name in self.scorers:
            result = item.scores[name]
            self.scores[name].append(result.score)
            self._costs[name] += result.usage.cost
            self.usage += result.usage
        if item.target_step:
            self.usage += item.target_step.usage
        self.human.append(math.nan if item.human is None else item.human)
        if self.keep is None or len(self.items) < self.keep:
            self.items.append(item)

    @property
    def means(self) -> dict[str, float]:
        """Mean score per scorer, over scored items (NaN when none could be scored)."""
        return {name: s.mean for name, s in self.summaries.items()}

    @property
    def summaries(self) -> dict[str, ScorerSummary]:
        return {name: ScorerSummary.of_scores(self.scores[name], self._costs[name]) for name in self.scorers}

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
        usage = self.usage
        out["usage/prompt_tokens"] = float(usage.prompt_tokens)
        out["usage/completion_tokens"] = float(usage.completion_tokens)
        out["usage/cost"] = usage.cost
        return out

    def table(self) -> dict[str, list[Any]]:
        """Per-item results as columns (one row per item): what MLflow's table view shows."""
        columns: dict[str, list[Any]] = {"id": [], "input": [], "ground_truth": [], "output": [], "human": []}
        for name in self.scorers:
            for key in ("score", "reason", "error", "raw_reply", "cost", "latency"):
                columns[f"{name}/{key}"] = []
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
                columns[f"{name}/cost"].append(r.usage.cost)
                columns[f"{name}/latency"].append(round(r.latency, 3))
        return columns


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
