"""Cheap reference scorers for context beside the judges: SQuAD-style exact match and token F1.

No model calls. Normalisation follows the SQuAD evaluation script: lower case, drop punctuation and the
articles a/an/the, collapse whitespace.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from evalframe.data.rows import Row
from evalframe.models.context import Context
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import Scorer, no_truth

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(output: str, truth: str) -> float:
    return float(normalize(output) == normalize(truth))


def token_f1(output: str, truth: str) -> float:
    """Harmonic mean of token precision and recall over the normalised token multisets."""
    predicted, expected = normalize(output).split(), normalize(truth).split()
    if not predicted or not expected:
        return float(predicted == expected)  # both empty: a match; one empty: nothing in common
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


class _Reference(Scorer):
    def __init__(self, require_ground_truth: bool = True):
        self.require_ground_truth = require_ground_truth

    @staticmethod
    def measure(output: str, truth: str) -> float:
        raise NotImplementedError

    def explain(self, value: float) -> str:
        raise NotImplementedError

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        results = []
        for row, output in items:
            result = no_truth(row.ground_truth)  # missing or empty ground truth: 0, as for every scorer
            if result is None:
                value = round(self.measure(output, row.ground_truth or ""), 4)
                result = ScoreResult(value, self.explain(value))
            results.append(result)
        return results


class ExactMatch(_Reference):
    measure = staticmethod(exact_match)

    def explain(self, value: float) -> str:
        return "Normalised output equals the ground truth." if value else "Normalised output differs."


class TokenF1(_Reference):
    measure = staticmethod(token_f1)

    def explain(self, value: float) -> str:
        return f"Token F1 {value:.2f} between normalised output and ground truth."
