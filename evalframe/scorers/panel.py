"""Several judgments per item, aggregated: a panel of judge models, each asked `repeats` times.

A judge scorer's whole chain (extract -> analyse -> score, say) runs once per judge and per repeat, each
with its own model settings: a panel member's, and from the second repeat on a `seed` in the request
(the cache keys each repeat apart through it). A judge's score on an item is the mean of its repeats;
the item's score is the judges' scores combined by `aggregate`. A judge that fails on an item is left
out of that item's aggregate; when every judge fails the item is unscored.

One judge asked once is the plain case: its result is the item's, unchanged.
"""

from __future__ import annotations

import asyncio
import math
import re
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalframe.config.compose import preset
from evalframe.errors import ConfigError
from evalframe.models.settings import ModelSettings
from evalframe.results.scores import Judgment, ScoreResult

AGGREGATES = ("mean", "median", "min", "max", "majority", "consensus")


@dataclass(frozen=True)
class Aggregate:
    """How several scores of one item (judges, embedding models) become its score.

    majority: 1.0 when more than half of the scores are >= 0.5, else 0.0; consensus: the mean when
    max - min <= tolerance, else no score (they disagree too much to trust any figure).
    """

    how: str = "mean"
    tolerance: float = 0.2

    def __post_init__(self) -> None:
        if self.how not in AGGREGATES:
            raise ConfigError(f"aggregate={self.how!r} is not an option; use one of {', '.join(AGGREGATES)}")
        if not 0 <= self.tolerance <= 1:
            raise ConfigError(
                f"tolerance={self.tolerance} must be between 0 and 1 (consensus's largest spread)"
            )

    def __call__(self, scores: Mapping[str, float]) -> tuple[float, str | None]:
        """The combined score, or NaN and why there is none (consensus without agreement)."""
        values = list(scores.values())
        if self.how == "majority":
            return float(sum(v >= 0.5 for v in values) > len(values) / 2), None
        if self.how == "consensus":
            spread = max(values) - min(values)
            if spread > self.tolerance + 1e-9:  # float noise must not turn 0.2 into "more than 0.2"
                each = ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
                return math.nan, f"no consensus: spread {spread:.2f} > tolerance {self.tolerance} ({each})"
            return statistics.fmean(values), None
        pick: dict[str, Callable[[Sequence[float]], float]] = {
            "mean": statistics.fmean,
            "median": statistics.median,
            "min": min,
            "max": max,
        }
        return float(pick[self.how](values)), None


@dataclass(frozen=True)
class Judge:
    label: str  # how metrics, tables and judgments name it: the preset's name, else the model's
    settings: ModelSettings


def _label(text: str) -> str:
    # MLflow metric names allow letters, digits, _ - . / and space: `ollama/llama3:8b` -> `ollama/llama3_8b`
    return re.sub(r"[^\w.\-/ ]", "_", text)


def judges(model: Mapping[str, Any], models: Sequence[Any] | None, key: str) -> tuple[Judge, ...]:
    """The panel: `models` (preset names or mappings of model settings, a mapping may add a `label`),
    or the scorer's one `model` when there is no list."""
    if not models:
        settings = ModelSettings.from_config(model)
        return (Judge(_label(settings.name), settings),)
    found: list[Judge] = []
    for i, entry in enumerate(models):
        where = f"{key}.models[{i}]"
        if isinstance(entry, str):
            spec, label = preset(entry, where), entry
        elif isinstance(entry, Mapping):
            spec = {k: v for k, v in entry.items() if k != "label"}
            label = str(entry.get("label") or spec.get("name") or "")
        else:
            raise ConfigError(f"{where}={entry!r}: give a model preset's name (gpt, claude...) or a mapping")
        try:
            settings = ModelSettings.from_config(spec)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        unique, n = _label(label), 1
        while unique in {j.label for j in found}:  # the same model twice (two servers): gpt, gpt_2
            n += 1
            unique = f"{_label(label)}_{n}"
        found.append(Judge(unique, settings))
    return tuple(found)


def for_repeat(settings: ModelSettings, repeat: int) -> ModelSettings:
    """The settings of one repeat: the first as configured, each later one with its own `seed` (offset
    from a configured one), so the request, and its cache key, differ per repeat. Providers without a
    seed parameter get the same request again (LiteLLM drops the parameter), answered anew."""
    if repeat == 0:
        return settings
    return replace(settings, extra={**settings.extra, "seed": int(settings.extra.get("seed") or 0) + repeat})


Chain = Callable[[ModelSettings], Awaitable[ScoreResult]]


@dataclass(frozen=True)
class Panel:
    judges: tuple[Judge, ...]
    aggregate: Aggregate = Aggregate()
    repeats: int = 1

    @classmethod
    def of(
        cls,
        model: Mapping[str, Any],
        models: Sequence[Any] | None = None,
        aggregate: str = "mean",
        tolerance: float = 0.2,
        repeats: int = 1,
        key: str = "scorers.<judge>",
    ) -> Panel:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(
                f"repeats={repeats!r} must be a whole number >= 1 (judgments per judge and item)"
            )
        return cls(judges(model, models, key), Aggregate(aggregate, tolerance), repeats)

    def models(self) -> list[ModelSettings]:
        return [j.settings for j in self.judges]

    async def score(self, chain: Chain) -> ScoreResult:
        """Run `chain` once per judge and repeat, all at once (the run's limiter bounds the requests),
        and combine the results into the item's."""
        runs = [(judge, r) for judge in self.judges for r in range(self.repeats)]
        if len(runs) == 1:
            return await chain(self.judges[0].settings)
        results = await asyncio.gather(*(chain(for_repeat(judge.settings, r)) for judge, r in runs))
        if not results[0].steps:
            # Decided without asking any model (empty output, no ground truth): the same for every
            # judge, and no judgment to count in their agreement.
            return results[0]
        judgments = [
            Judgment(judge.label, r, res.score, res.reason, res.error)
            for (judge, r), res in zip(runs, results, strict=True)
        ]
        steps = [s for res in results for s in res.steps]
        details = {"judgments": [res.details for res in results]}
        per_judge = {
            judge.label: [j.score for j in judgments if j.judge == judge.label and not math.isnan(j.score)]
            for judge in self.judges
        }
        scores = {label: statistics.fmean(v) for label, v in per_judge.items() if v}
        failed = [
            f"{j.judge}: {j.error}"
            for (j, res) in zip(judgments, results, strict=True)
            if math.isnan(j.score) and not res.not_applicable and not per_judge[j.judge]
        ]
        if all(res.not_applicable for res in results):  # every judge found nothing to measure: no failure
            return ScoreResult(math.nan, results[0].reason, steps, details, None, judgments, True)
        if not scores:
            error = "every judge failed: " + "; ".join(dict.fromkeys(failed))
            return ScoreResult(math.nan, f"unscored: {error}", steps, details, error, judgments)
        value, problem = self.aggregate(scores)
        if problem:
            return ScoreResult(math.nan, f"unscored: {problem}", steps, details, problem, judgments)
        return ScoreResult(
            round(value, 4), self._reason(value, scores, judgments, failed), steps, details, None, judgments
        )

    def _reason(
        self, value: float, scores: Mapping[str, float], judgments: list[Judgment], failed: list[str]
    ) -> str:
        """`mean of 2 judges 0.72 (gpt 0.63, claude 0.80). gpt: <its reason> | claude: <its reason>`"""
        if len(self.judges) == 1:
            each = ", ".join(f"{j.score:.2f}" if not math.isnan(j.score) else "failed" for j in judgments)
            head = f"mean of {self.repeats} repeats {value:.2f} ({each})."
        else:
            each = ", ".join(f"{label} {s:.2f}" for label, s in scores.items())
            gone = f"; failed: {'; '.join(dict.fromkeys(failed))}" if failed else ""
            head = f"{self.aggregate.how} of {len(self.judges)} judges {value:.2f} ({each}{gone})."
        first: dict[str, str] = {}  # each judge's first scored reason
        for j in judgments:
            if not math.isnan(j.score):
                first.setdefault(j.judge, j.reason)
        if len(self.judges) == 1:
            return f"{head} {next(iter(first.values()))}"
        return f"{head} " + " | ".join(f"{label}: {reason}" for label, reason in first.items())
