"""The objective: the one number that ranks the jobs of a sweep and that the task returns to an optimiser.

`objective.metric` names any metric a run logs (`<scorer>/mean`, `<scorer>/agreement/spearman`,
`usage/cost`, ...); null means the first scorer's mean. It is checked against the selected scorers and
the dataset before any model call, so a typo does not cost a sweep.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.errors import ConfigError

DIRECTIONS = ("maximize", "minimize")
# What a run logs per scorer (results.ScorerSummary) and per scorer against people (agreement.py).
_STATISTICS = ("mean", "std", "min", "max", "scored", "unscored", "cost")
_AGREEMENT = ("spearman", "pearson", "kendall", "mae", "accuracy", "kappa", "n")
_USAGE = ("usage/prompt_tokens", "usage/completion_tokens", "usage/cost")


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


def direction_of(config: Mapping[str, Any]) -> str:
    direction = str((config.get("objective") or {}).get("direction") or "maximize")
    if direction not in DIRECTIONS:
        raise ConfigError(f"objective.direction={direction!r}: choose maximize or minimize")
    return direction


def of_config(config: Mapping[str, Any]) -> Objective:
    """The configured objective, checked against the selected scorers and the dataset."""
    spec = config.get("objective") or {}
    direction = direction_of(config)
    scorers = list(config.get("scorers") or {})
    metric = spec.get("metric")
    if not metric:
        if not scorers:
            raise ConfigError("no scorer selected; choose one, e.g. scorer=answer_similarity")
        return Objective(f"{scorers[0]}/mean", direction)
    metric = str(metric)
    if metric in _USAGE:
        return Objective(metric, direction)
    scorer, _, statistic = metric.partition("/")
    if scorer not in scorers:
        raise ConfigError(
            f"objective.metric={metric}: scorer {scorer!r} is not selected (scorers: {', '.join(scorers)}); "
            f"add scorer={scorer} or name a metric of a selected scorer, e.g. {scorers[0]}/mean"
        )
    if statistic.startswith("agreement/"):
        if statistic.removeprefix("agreement/") not in _AGREEMENT:
            raise ConfigError(
                f"objective.metric={metric}: unknown agreement metric; choose one of {', '.join(_AGREEMENT)}"
            )
        if not (config.get("dataset") or {}).get("human_score"):
            raise ConfigError(
                f"objective.metric={metric} compares with human scores, but the dataset has none: set "
                "dataset.human_score=COLUMN (and dataset.human_range), or use dataset=sas_squad"
            )
    elif statistic not in _STATISTICS:
        raise ConfigError(
            f"objective.metric={metric}: unknown metric; choose <scorer>/{{{','.join(_STATISTICS)}}}, "
            f"<scorer>/agreement/{{{','.join(_AGREEMENT)}}} or one of {', '.join(_USAGE)}"
        )
    return Objective(metric, direction)


def from_json(recorded: Mapping[str, Any] | None) -> Objective | None:
    """An objective as run.json records it."""
    if not recorded or not recorded.get("metric"):
        return None
    value = recorded.get("value")
    return Objective(
        str(recorded["metric"]),
        str(recorded.get("direction") or "maximize"),
        math.nan if value is None else float(value),
    )


def measure(objective: Objective, metrics: Mapping[str, float]) -> Objective:
    """The objective's value in a finished run (NaN when the run has no such metric, e.g. no scores)."""
    return Objective(objective.metric, objective.direction, float(metrics.get(objective.metric, math.nan)))
