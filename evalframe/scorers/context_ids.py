"""Retrieval scored from chunk ids, no model call (RAGAS' IDBasedContextPrecision and
IDBasedContextRecall): the ids retrieved (`context_ids`) against the ids that should have been
(`reference_context_ids`), each list taken as a set, so a duplicated id counts once and rank does not
matter (the LLM judge `context_precision` is the one that rewards relevant chunks ranked first).

- context_precision_ids = |retrieved ∩ reference| / |retrieved|: the share of retrieved ids that are
  relevant; no id retrieved → the `empty` rule (a reference with no id makes every retrieved one
  irrelevant: 0).
- context_recall_ids = |retrieved ∩ reference| / |reference|: the share of the reference ids retrieved;
  no reference id → the `empty` rule.
The `empty` rule is unscored by default, as RAGAS gives NaN there; 0 or 1 on request.
"""

from __future__ import annotations

from typing import Any

from evalframe.data.rows import Row
from evalframe.models.context import Context
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import Scorer, empty_rule, when_empty


class _ContextIds(Scorer):
    require_ground_truth = False
    needs = ("context_ids", "reference_context_ids")
    key = ""  # its config name, for errors

    def __init__(self, empty: Any = "unscored"):
        self.empty = empty_rule(empty, f"scorers.{self.key}")

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        return [self.score_ids(row.context_ids or [], row.reference_context_ids or []) for row, _ in items]

    def score_ids(self, retrieved: list[str], reference: list[str]) -> ScoreResult:
        raise NotImplementedError

    @staticmethod
    def _share(part: list[str], whole: list[str], what: str) -> ScoreResult:
        value = round(len(part) / len(whole), 4)
        reason = f"{len(part)} of {len(whole)} {what}"
        return ScoreResult(value, reason, details={"ids": whole, "hits": part})


class ContextPrecisionIds(_ContextIds):
    key = "context_precision_ids"

    def score_ids(self, retrieved: list[str], reference: list[str]) -> ScoreResult:
        got, wanted = list(dict.fromkeys(retrieved)), set(reference)  # distinct, in rank order
        if not got:
            return when_empty(self.empty, "no context id was retrieved")
        result = self._share([i for i in got if i in wanted], got, "retrieved ids are in the reference")
        irrelevant = [i for i in got if i not in wanted]
        result.reason += f"; not in the reference: {', '.join(irrelevant)}." if irrelevant else "."
        return result


class ContextRecallIds(_ContextIds):
    key = "context_recall_ids"

    def score_ids(self, retrieved: list[str], reference: list[str]) -> ScoreResult:
        got, wanted = set(retrieved), list(dict.fromkeys(reference))
        if not wanted:
            return when_empty(self.empty, "the reference names no context id")
        result = self._share([i for i in wanted if i in got], wanted, "reference ids were retrieved")
        missed = [i for i in wanted if i not in got]
        result.reason += f"; not retrieved: {', '.join(missed)}." if missed else "."
        return result
