"""The objective: the one number that ranks the jobs of a sweep and that the task returns to an optimiser.

`objective.metric` names any metric a run logs (`<scorer>/mean`, `<scorer>/agreement/spearman`,
`usage/cost`, a scorer's own figure such as `tool_call_accuracy/recall`, ...); null means the first
scorer's mean (minimized when that scorer says `better: lower`, as hallucination does). It is checked
against the selected scorers and the dataset before any model call, so a typo does not cost a sweep,
nor does maximizing a score whose lower values are the good ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalframe.errors import ConfigError
from evalframe.results import agreement
from evalframe.results.agreement import METRICS as _AGREEMENT
from evalframe.results.scores import Objective, ScorerSummary

DIRECTIONS = ("maximize", "minimize")
# What a run logs per scorer (results.ScorerSummary) and per scorer against people (agreement.py).
_STATISTICS = tuple(ScorerSummary.__dataclass_fields__)
_USAGE = ("usage/prompt_tokens", "usage/completion_tokens", "usage/cost")


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
    lower = {name for name, s in (config.get("scorers") or {}).items() if (s or {}).get("better") == "lower"}
    if not metric:
        if not scorers:
            raise ConfigError("no scorer selected; choose one, e.g. scorer=answer_similarity")
        return Objective(f"{scorers[0]}/mean", "minimize" if scorers[0] in lower else direction)
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
        dataset = config.get("dataset") or {}
        if not (dataset.get("human_score") or dataset.get("labels")):
            raise ConfigError(
                f"objective.metric={metric} compares with human scores, but the dataset has none: set "
                "dataset.human_score=COLUMN (and dataset.human_range), or use dataset=sas_squad"
            )
    elif statistic in _figures((config.get("scorers") or {}).get(scorer)):
        return Objective(metric, direction)
    elif statistic not in _STATISTICS:
        raise ConfigError(
            f"objective.metric={metric}: unknown metric; choose <scorer>/{{{','.join(_STATISTICS)}}}, "
            f"<scorer>/agreement/{{{','.join(_AGREEMENT)}}} or one of {', '.join(_USAGE)}"
        )
    elif scorer in lower and statistic in ("mean", "min", "max") and direction == "maximize":
        raise ConfigError(
            f"objective.metric={metric}: lower {scorer} scores are better; add objective.direction=minimize"
        )
    return Objective(metric, direction)


def _figures(spec: Any) -> tuple[str, ...]:
    """The figures a scorer's class reports beside its score (Scorer.figures), from its `_target_`."""
    from hydra.utils import get_class

    try:
        return tuple(getattr(get_class(str((spec or {}).get("_target_"))), "figures", ()))
    except Exception:  # no class to ask (a typo is reported when the scorer is built)
        return ()


def from_json(recorded: Mapping[str, Any] | None) -> Objective | None:
    """An objective as run.json records it."""
    if not recorded or not recorded.get("metric"):
        return None
    low, value, high = (
        math.nan if v is None else float(v) for v in map(recorded.get, ("ci_low", "value", "ci_high"))
    )
    return Objective(
        str(recorded["metric"]), str(recorded.get("direction") or "maximize"), value, (low, high)
    )


def measure(objective: Objective, metrics: Mapping[str, float]) -> Objective:
    """The objective's value in a finished run (NaN when the run has no such metric, e.g. no scores)."""
    found = [float(metrics.get(f"{objective.metric}{end}", math.nan)) for end in ("", "_ci_low", "_ci_high")]
    return Objective(objective.metric, objective.direction, found[0], (found[1], found[2]))


def item_statistic(
    metric: str, config: Mapping[str, Any]
) -> Callable[[Sequence[float], Sequence[float]], float] | None:
    """The metric as a function of its scorer's item scores and the human scores, for intervals that
    resample items: a scorer's mean or agreement metric; None for the others (std, cost, ...)."""
    _, _, statistic = metric.partition("/")
    if statistic == "mean":
        return lambda scores, human: ScorerSummary.of_scores(scores, 0.0).mean
    key = statistic.removeprefix("agreement/")
    if key == statistic or key == "n":
        return None
    human_range = (config.get("dataset") or {}).get("human_range") or (0, 1)
    threshold = float(config.get("agreement_threshold", 0.5))
    return lambda scores, human: agreement.one(key, scores, human, human_range, threshold)
