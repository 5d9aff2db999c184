"""The CI gate: turn a finished run into an exit code a pipeline can branch on.

Checked in this order, because a mean over mostly unscored items would be meaningless:
1. too many unscored items (max_unscored_rate)  -> EXIT_UNSCORED
2. gate.min_score.<scorer> (mean), gate.max_score.<scorer> (mean, for a scorer whose lower scores are
   good, e.g. hallucination) and gate.min_pass_rate.<scorer> (share of items passing: >= pass_threshold,
   or <= it for a lower-is-better scorer) -> EXIT_GATE_FAILED with a short table of what failed
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_UNSCORED, ConfigError
from evalframe.results.run_result import RunResult
from evalframe.results.scores import GateVerdict


@dataclass(frozen=True)
class Check:
    scorer: str
    what: str  # "unscored rate", "mean score", "pass rate"
    required: str
    actual: float
    passed: bool


def _thresholds(gate: Mapping[str, Any], key: str) -> dict[str, float]:
    return {name: float(v) for name, v in (gate.get(key) or {}).items() if v is not None}


def validate(gate: Mapping[str, Any], scorers: list[str], lower_better: set[str] | None = None) -> None:
    """Gating a scorer the run does not use is a typo, and a floor under a lower-is-better score gates
    the wrong way: say so before the run."""
    for key in ("min_score", "max_score", "min_pass_rate"):
        for name in _thresholds(gate, key):
            if name not in scorers:
                raise ConfigError(
                    f"gate.{key}.{name} names a scorer this run does not use (scorers: {scorers})"
                )
    for name in _thresholds(gate, "min_score"):
        if name in (lower_better or set()):
            raise ConfigError(
                f"gate.min_score.{name}: lower {name} scores are better, so a minimum gates the wrong way; "
                f"use +gate.max_score.{name}=... (the highest mean that passes)"
            )


def _pass_threshold(gate: Mapping[str, Any], scorer: str) -> float:
    threshold = gate.get("pass_threshold", 0.5)
    if isinstance(threshold, Mapping):
        return float(threshold.get(scorer, 0.5))
    return float(threshold)


def decide(result: RunResult, gate: Mapping[str, Any], max_unscored_rate: float) -> tuple[int, list[Check]]:
    checks: list[Check] = []
    summaries = result.summaries
    for name, s in summaries.items():
        total = s.scored + s.unscored
        rate = s.unscored / total if total else 0.0
        checks.append(
            Check(name, "unscored rate", f"<= {max_unscored_rate:g}", rate, rate <= max_unscored_rate)
        )
    if not all(c.passed for c in checks):
        return EXIT_UNSCORED, checks
    for name, minimum in _thresholds(gate, "min_score").items():
        mean = summaries[name].mean
        checks.append(Check(name, "mean score", f">= {minimum:g}", mean, mean >= minimum))  # NaN fails
    for name, maximum in _thresholds(gate, "max_score").items():
        mean = summaries[name].mean
        checks.append(Check(name, "mean score", f"<= {maximum:g}", mean, mean <= maximum))  # NaN fails
    for name, minimum in _thresholds(gate, "min_pass_rate").items():
        threshold = _pass_threshold(gate, name)
        scores = [s for s in result.scores[name] if not math.isnan(s)]  # every item, kept or not
        lower = name in result.lower_better
        rate = (
            sum(s <= threshold if lower else s >= threshold for s in scores) / len(scores) if scores else 0.0
        )
        passing = f"score {'<=' if lower else '>='} {threshold:g}"
        checks.append(Check(name, f"pass rate ({passing})", f">= {minimum:g}", rate, rate >= minimum))
    return (EXIT_OK if all(c.passed for c in checks) else EXIT_GATE_FAILED), checks


def verdict(code: int, checks: list[Check]) -> GateVerdict:
    """What the run records of its gate (MLflow tag, run.json, report.html): the failed checks in words."""
    failed = tuple(
        f"{c.scorer} {c.what} {c.actual:.4g} (required {c.required})" for c in checks if not c.passed
    )
    return GateVerdict(code, failed)
