"""The question people answer about a scorer, made from the scorer's own reply schema, and the way back
from their answer to the scorer's scale.

A person is asked what the judge was asked, with the same words: a `choice` judge's enum becomes a
categorical question with the same names (a pass/fail question when the choices are one scoring 1 and
one scoring 0), a `number` judge's range a numeric question on that range; any other scorer (a
computed score, statements' verdicts averaged) a numeric question on its score's own scale, [0, 1].
Every question takes a comment. An answer is turned into a score as the judge's reply would be
(scorers/judge.py: a choice's value, (n - min) / (max - min), times the scorer's `scale`), so the
judge's scores and the people's are compared on one scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.errors import ConfigError

PASS_FAIL, CATEGORICAL, NUMERIC = "pass_fail", "categorical", "numeric"


@dataclass(frozen=True)
class Question:
    """What reviewers are asked about one scorer's verdict on an item."""

    scorer: str
    kind: str  # PASS_FAIL, CATEGORICAL or NUMERIC
    options: tuple[str, ...] = ()  # a categorical question's choices; pass/fail: (positive, negative)
    values: tuple[float, ...] = ()  # each option's score, before `scale`
    low: float = 0.0  # a numeric question's range
    high: float = 1.0
    scale: float = 1.0  # the scorer's `scale`: its score is the answer's value times this

    def instruction(self) -> str:
        if self.kind == NUMERIC:
            return f"How would you score this answer for {self.scorer}, from {self.low:g} to {self.high:g}?"
        return f"Your verdict for {self.scorer}, as its judge was asked to give it."

    def score(self, answer: Any) -> float:
        """The answer on the scorer's scale; a ConfigError naming the scale when it is outside it."""
        if self.kind == PASS_FAIL and isinstance(answer, bool):
            return self.values[0 if answer else 1] * self.scale
        if self.kind in (PASS_FAIL, CATEGORICAL) and isinstance(answer, str) and answer in self.options:
            return self.values[self.options.index(answer)] * self.scale
        if self.kind == NUMERIC and isinstance(answer, int | float) and not isinstance(answer, bool):
            number = float(answer)
            if self.low <= number <= self.high and not math.isnan(number):
                return (number - self.low) / (self.high - self.low) * self.scale
        scale = f"{self.low:g} to {self.high:g}" if self.kind == NUMERIC else " or ".join(self.options)
        raise ConfigError(f"{answer!r} is outside {self.scorer}'s scale ({scale})")


def question(scorer: str, spec: Any) -> Question:
    """The question of scorer `scorer`, from its config (`output` of a configured judge)."""
    spec = spec if isinstance(spec, Mapping) else {}
    output = spec.get("output") if isinstance(spec.get("output"), Mapping) else {}
    scale = float(spec.get("scale") or 1.0)
    if output.get("type") == "choice" and isinstance(output.get("choices"), Mapping):
        choices = {str(k): float(v) for k, v in output["choices"].items()}
        if len(choices) == 2 and sorted(choices.values()) == [0.0, 1.0]:
            ranked = sorted(choices, key=lambda name: -choices[name])  # the one scoring 1 first
            return Question(scorer, PASS_FAIL, tuple(ranked), (1.0, 0.0), scale=scale)
        return Question(scorer, CATEGORICAL, tuple(choices), tuple(choices.values()), scale=scale)
    if output.get("type") == "number":
        return Question(scorer, NUMERIC, low=float(output["min"]), high=float(output["max"]), scale=scale)
    return Question(scorer, NUMERIC)


def questions(scorers: Mapping[str, Any], names: list[str]) -> dict[str, Question]:
    """The question of each scorer in `names`, in that order."""
    return {name: question(name, scorers.get(name)) for name in names}
