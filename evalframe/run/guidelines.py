"""align.method=guidelines (and both): the judge's model reads the training part's disagreements and
writes short rules (scorers.guidelines), and each rule is tried alone on the training part, added to
the judge's prompt: kept only when it makes the judge agree with people more there (kappa, then
accuracy). The held-out part is never read here: it proves the kept rules afterwards.

Every call is a run of the one lifecycle (pipeline.evaluate, modes.ALIGN), in DIR/guidelines and
DIR/rule-N."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.data.rows import Row
from evalframe.results import agreement
from evalframe.results.alignment import Example
from evalframe.results.run_result import RunResult
from evalframe.run import modes, pipeline, planning
from evalframe.scorers import aligned
from evalframe.scorers.guidelines import GuidelineWriter

WRITER = "align_guidelines"  # the writer's name as a scorer of its one-row run

# The training part scored by the judge with the aligned files in a directory (align's own run).
ScoreTraining = Callable[[Path, Path], RunResult]


@dataclass(frozen=True)
class Trial:
    """One rule, tried alone on the training part."""

    rule: str
    kappa: float
    accuracy: float
    kept: bool


def write(
    config: dict[str, Any], candidates: Sequence[Example], most: int, directory: Path
) -> tuple[list[str], RunResult]:
    """The rules the judge's model writes from the training disagreements (none without any)."""
    output = config["scorers"][next(iter(config["scorers"]))]["output"]
    writer = GuidelineWriter(config["model"], candidates, output, most)
    if not writer.disagreements:
        return [], RunResult([], [])
    one = {**config, "scorers": {WRITER: {"_target_": f"{GuidelineWriter.__module__}.GuidelineWriter"}}}
    row = Row("guidelines", "", None, "the training part's disagreements", 0)
    given = planning.Given(rows=[row], scorers={WRITER: writer}, source="the guideline writer")
    result = pipeline.evaluate(one, directory, given=given, mode=modes.ALIGN)[0]
    rules = result.items[0].scores[WRITER].details.get("rules") or []
    return [str(r) for r in rules], result


def _rank(figures: Mapping[str, float]) -> tuple[float, float]:
    def known(value: float) -> float:
        return -math.inf if math.isnan(value) else value

    return known(figures.get("kappa", math.nan)), known(figures.get("accuracy", math.nan))


def figures(
    result: RunResult, scorer: str, human_range: Sequence[float], threshold: float
) -> dict[str, float]:
    """The judge's agreement with people over a run's items."""
    scores = [i.scores[scorer].score for i in result.items]
    human = [math.nan if i.human is None else float(i.human) for i in result.items]
    return agreement.agreement(scores, human, human_range, threshold)


def tried(
    rules: Sequence[str],
    baseline: Mapping[str, float],
    spec: Mapping[str, Any],
    scorer: str,
    score: ScoreTraining,
    directory: Path,
    human_range: Sequence[float],
    threshold: float = 0.5,
) -> tuple[list[Trial], list[RunResult]]:
    """Each rule alone in the judge's prompt, on the training part; kept when it beats `baseline`."""
    trials, results = [], []
    for number, rule in enumerate(rules, 1):
        out = directory / f"rule-{number}" / "judge"
        aligned.write(out, scorer, spec, [], f"trying rule {number} alone", [rule])
        result = score(out, directory / f"rule-{number}")
        found = figures(result, aligned.aligned_name(scorer), human_range, threshold)
        kept = _rank(found) > _rank(baseline)
        trials.append(Trial(rule, found.get("kappa", math.nan), found.get("accuracy", math.nan), kept))
        results.append(result)
    return trials, results
