"""Tool-call accuracy: the calls an application made (`tool_calls`) against those it should have made
(`expected_tool_calls`), in order. No model call, so re-scoring with other settings is free.

A made call matches an expected call when their names are equal and their arguments agree under `args`:
`exact` (the same argument names, each value equal), `subset` (every expected argument present with an
equal value; extra arguments are allowed) or `ignore` (names only). Values are equal as JSON values: 5
equals 5.0, "5" does not, true is not 1. Calls are matched one to one, as many pairs as possible (a
maximum bipartite matching), so an expected call made twice matches once and the repeat is unexpected.

With m calls made, e expected and k of them matched:
- precision = k / m; recall = k / e; f1 = 2·precision·recall / (precision + recall), 0 when both are 0;
- order = LCS / max(m, e), LCS being the length of the longest common subsequence of the made and the
  expected sequence (two calls agreeing as above): the share of calls made in the expected relative
  order, an extra or missing call counting against it;
- exact = 1 when the calls made are the expected ones, one for one and in the same order (order = 1),
  else 0.
Nothing expected and nothing made: every figure is the `empty` rule's (1 by default, or 0, or
unscored). Only one side empty: nothing can match and every figure is 0; a 0/0 precision (no call made)
or recall (none expected) is 0, not left out of its mean, which would hide the item.

The headline score is one of these (`score`, f1 by default); all five are in the item's details
(`figures`, logged as run means `tool_call_accuracy/<figure>`). `compat` makes the headline another
tool's formula instead, edge cases included, for people moving from it (the figures stay evalframe's):
- ragas (RAGAS ToolCallAccuracy, strict_order=True): 0 unless the sequences of names are equal; then the
  mean over the call pairs of the share of expected arguments present with the same value as text
  (str(made) == str(expected)); a pair whose expected call has no arguments scores 1 if the made one
  has none, else 0. Both empty 1; either empty 0.
- deepeval (DeepEval ToolCorrectnessMetric at its defaults: no exact match, no ordering, names only):
  each expected call, in order, takes the first made call of the same name not already taken, where
  "taken" compares whole calls (so two identical made calls are taken once) → taken / e; extra calls
  cost nothing. Both empty 1; nothing expected 0. (Its LLM check of `available_tools` is not run.)
- mastra (Mastra's code tool-call-accuracy scorer, strictMode=false, the expected names as its
  expectedToolOrder): 1 if each expected name occurs among the made calls and their first occurrences
  are in the expected order, else 0 (so an expected name repeated scores 0). No call made 0; nothing
  expected 0.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalframe.data.rows import Row
from evalframe.data.values import ToolCall
from evalframe.models.context import Context
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import COMPATS, Scorer, choice, empty_rule, when_empty

ARGS = ("exact", "subset", "ignore")
FIGURES = ("precision", "recall", "f1", "exact", "order")
COMPAT = (None, *COMPATS)

Match = Callable[[ToolCall, ToolCall], bool]  # (made, expected) -> whether they agree


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value, but a boolean only equals a boolean."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def matcher(args: str) -> Match:
    def agree(made: ToolCall, expected: ToolCall) -> bool:
        if made.name != expected.name:
            return False
        if args == "ignore":
            return True
        if args == "exact" and made.arguments.keys() != expected.arguments.keys():
            return False
        return all(k in made.arguments and same(made.arguments[k], v) for k, v in expected.arguments.items())

    return agree


def pairs(made: Sequence[ToolCall], expected: Sequence[ToolCall], agree: Match) -> list[tuple[int, int]]:
    """The most one-to-one (made index, expected index) pairs that agree: a maximum bipartite matching
    (a greedy pass can pair a made call with the wrong one of two expected calls it fits)."""
    if not made or not expected:
        return []
    from scipy.optimize import linear_sum_assignment

    gain = [[-1.0 if agree(m, e) else 0.0 for e in expected] for m in made]
    rows, cols = linear_sum_assignment(gain)
    return [(int(i), int(j)) for i, j in zip(rows, cols, strict=True) if gain[i][j] < 0]


def lcs(made: Sequence[ToolCall], expected: Sequence[ToolCall], agree: Match) -> int:
    """Length of the longest common subsequence (dynamic programming, one row at a time)."""
    previous = [0] * (len(expected) + 1)
    for m in made:
        current = [0]
        for j, e in enumerate(expected):
            current.append(previous[j] + 1 if agree(m, e) else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def figures(made: Sequence[ToolCall], expected: Sequence[ToolCall], agree: Match, k: int) -> dict[str, float]:
    """precision, recall, f1, exact and order of two call lists, not both empty, `k` calls matched."""
    precision = k / len(made) if made else 0.0
    recall = k / len(expected) if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    order = lcs(made, expected, agree) / max(len(made), len(expected))
    values = {"precision": precision, "recall": recall, "f1": f1, "exact": float(order == 1), "order": order}
    return {name: round(value, 4) for name, value in values.items()}


# ------------------------------------------------------------------ other tools' formulas (compat)


def ragas(made: Sequence[ToolCall], expected: Sequence[ToolCall]) -> float:
    if not made or not expected:
        return float(not made and not expected)
    if [c.name for c in made] != [c.name for c in expected]:
        return 0.0  # (equal names mean equal lengths: its coverage penalty never applies)

    def arguments(made_args: Mapping[str, Any], expected_args: Mapping[str, Any]) -> float:
        if not expected_args:
            return float(not made_args)
        hits = sum(k in made_args and str(made_args[k]) == str(v) for k, v in expected_args.items())
        return hits / len(expected_args)

    return sum(arguments(m.arguments, e.arguments) for m, e in zip(made, expected, strict=True)) / len(
        expected
    )


def deepeval(made: Sequence[ToolCall], expected: Sequence[ToolCall]) -> float:
    if not expected:
        return float(not made)
    taken: list[tuple[str, Mapping[str, Any]]] = []  # compared as whole calls, as its set of ToolCalls is
    for e in expected:
        for m in made:
            if (m.name, m.arguments) not in taken and m.name == e.name:
                taken.append((m.name, m.arguments))
                break
    return len(taken) / len(expected)


def mastra(made: Sequence[ToolCall], expected: Sequence[ToolCall]) -> float:
    names = [c.name for c in made]
    if not names or not expected or any(e.name not in names for e in expected):
        return 0.0
    first = [names.index(e.name) for e in expected]
    return float(all(a < b for a, b in itertools.pairwise(first)))


FORMULAS: dict[str, Callable[[Sequence[ToolCall], Sequence[ToolCall]], float]] = {
    "ragas": ragas,
    "deepeval": deepeval,
    "mastra": mastra,
}


def text(call: ToolCall) -> str:
    """A call as it reads in a reason: weather(city="Paris", unit="c")."""
    arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    return f"{call.name}({arguments})"


class ToolCallAccuracy(Scorer):
    require_ground_truth = False
    needs = ("tool_calls", "expected_tool_calls")
    figures = FIGURES

    def __init__(self, args: str = "subset", score: str = "f1", empty: Any = 1, compat: str | None = None):
        where = "scorers.tool_call_accuracy"
        self.agree = matcher(choice(args, ARGS, f"{where}.args"))
        self.headline = choice(score, FIGURES, f"{where}.score")
        self.empty = empty_rule(empty, where)
        self.compat = choice(compat, COMPAT, f"{where}.compat")

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        return [self.score_calls(row.tool_calls or [], row.expected_tool_calls or []) for row, _ in items]

    def score_calls(self, made: Sequence[ToolCall], expected: Sequence[ToolCall]) -> ScoreResult:
        compat = FORMULAS[self.compat](made, expected) if self.compat else None
        paired = pairs(made, expected, self.agree)
        if not made and not expected:
            found = {} if math.isnan(self.empty) else dict.fromkeys(FIGURES, self.empty)
            if compat is None:
                empty = when_empty(self.empty, "no calls expected and none made")
                empty.details = {"figures": found} if found else {}
                return empty
        else:
            found = figures(made, expected, self.agree, len(paired))
        made_paired, expected_paired = {i for i, _ in paired}, {j for _, j in paired}
        missing = [text(c) for j, c in enumerate(expected) if j not in expected_paired]
        unexpected = [text(c) for i, c in enumerate(made) if i not in made_paired]
        said = ", ".join(f"{name} {value:.2f}" for name, value in found.items()) or "no calls either way"
        for what, calls in (("missing", missing), ("unexpected", unexpected)):
            said += f"; {what}: {', '.join(calls)}" if calls else ""
        details: dict[str, Any] = {"figures": found, "missing": missing, "unexpected": unexpected}
        if compat is None:
            return ScoreResult(found[self.headline], f"{said}.", details=details)
        details["compat"] = {self.compat: compat}
        return ScoreResult(
            round(compat, 4), f"{self.compat} formula {compat:.2f}; evalframe: {said}.", [], details
        )
