"""Verdicts a row's trace already carries, under the same settings, are this run's results: the run asks
its scorers only about the other (row, scorer) pairs. A trace holding every scorer's verdict is not
read at all (data.judged.Unjudged); one holding some (a scorer added to a judged experiment) is judged
by the others, and the verdicts it has are reused, never asked again and never written twice."""

from __future__ import annotations

import math
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from evalframe.data import judged
from evalframe.data.rows import Row
from evalframe.models.context import Context
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import Scorer

Record = Callable[[str, Row, ScoreResult], None]  # (scorer, row, its result): the pipeline's record


def result(verdict: Mapping[str, Any]) -> ScoreResult:
    """A verdict already on the row's trace, as this run's result: its score and reason; `details.reused`
    says where it came from (and keeps it from being written back again)."""
    details = {
        "reused": {
            "assessment_id": verdict.get("assessment_id"),
            "run_id": (verdict.get("metadata") or {}).get(judged.RUN_ID),
        }
    }
    rationale = str(verdict.get("rationale") or "")
    if judged.error_code(verdict) == judged.NOT_APPLICABLE:
        return ScoreResult(math.nan, rationale, details=details, not_applicable=True)
    return ScoreResult(float(verdict["value"]), rationale, details=details)


def lacking(field: str) -> ScoreResult:
    """A scorer's result on a row whose trace lacks a field it needs (an expectation, say): not
    applicable, and said so on the trace (judged.MISSING: judged again once the field is there)."""
    found = ScoreResult.empty(f"the trace carries no {field}")
    found.details[judged.MISSING] = field
    return found


def ask(
    scorers: Mapping[str, Scorer],
    found: Mapping[str, str],
    ready: list[tuple[Row, str]],
    ctx: Context,
    record: Record,
    missing: Callable[[str, Row], str | None] = lambda name, row: None,
) -> list[tuple[str, Row, Awaitable[ScoreResult]]]:
    """Each scorer's pending result for the (row, output) pairs whose trace lacks its verdict under
    its digest in `found`; the verdicts the traces carry are recorded at once, and so is "not
    applicable" where the row lacks a field the scorer needs (`missing`: which one)."""
    pending: list[tuple[str, Row, Awaitable[ScoreResult]]] = []
    for name, scorer in scorers.items():
        mine = []
        for row, output in ready:
            digest = found.get(name)
            earlier = judged.verdict(
                judged.assessments_of(row),
                name,
                judged.digest_for(row.extra, digest) if digest else None,
                row,
            )
            if earlier is not None:
                record(name, row, result(earlier))
            elif lacks := missing(name, row):
                record(name, row, lacking(lacks))
            else:
                mine.append((row, output))
        if mine:
            pending += [
                (name, row, p) for (row, _), p in zip(mine, scorer.score_each(mine, ctx), strict=True)
            ]
    return pending


def planned(plan: Callable[[], Any], scorers: list[str]) -> tuple[Any, RunResult | None]:
    """`plan()`'s plan and None, saying what is not judged again and what a scorer does not apply to;
    or, when every trace carries every verdict already, None and an empty result: a clean end, no run
    (it says so in one line)."""
    try:
        p = plan()
    except judged.AllJudged as e:
        print(e, file=sys.stderr)
        return None, RunResult(items=[], scorers=scorers)
    if p.unjudged and (line := p.unjudged.said()):
        print(line, file=sys.stderr)
    if p.needs and (line := p.needs.said(p.unjudged.unit if p.unjudged else "row(s)")):
        print(line, file=sys.stderr)
    return p, None
