"""Tuning that holds out (`tune.holdout: 0.3`): every job of the sweep scored the tuning part of the
rows only; at the sweep's end the held-out part is scored twice, with the best job's settings and
with the defaults (the same command without the swept values), and the difference of the objective
gets an interval that resamples the held-out items. A gain found on the tuning rows counts only if
it holds here.

The two runs are ordinary pipeline runs (in the sweep directory's `holdout/best` and
`holdout/default`), composed from the best job's own command line: the first asks the judge about the
held-out rows once, the second re-scores its cached replies.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from evalframe.config import compose as configs
from evalframe.results.intervals import NONE, bootstrap
from evalframe.results.jobs import Best, Holdout
from evalframe.results.manifest import Manifest
from evalframe.results.objective import item_statistic
from evalframe.results.run_result import RunResult
from evalframe.results.scores import Objective
from evalframe.run import modes, pipeline

DIRECTORY = "holdout"  # in the sweep directory: best/ and default/, each a run directory


def _score(overrides: list[str], directory: Path) -> tuple[RunResult, dict[str, object]]:
    """A hold-out run (modes.HOLDOUT: no MLflow run of its own, the sweep's parent logs the figures)."""
    config = configs.resolve(configs.compose([*overrides, "tune.part=holdout"]), overrides)
    return pipeline.evaluate(config, directory, mode=modes.HOLDOUT)[0], config


def check(
    sweep: DictConfig, sweep_dir: Path, best: Best | None, swept: list[str], objective: Objective
) -> Holdout | None:
    """Score the held-out rows with the best and the default settings; None when the sweep holds
    nothing out or found no best job."""
    if not OmegaConf.select(sweep, "tune.holdout"):
        return None
    if best is None or best.job is None:
        print("held-out rows: not scored, the sweep has no best job", file=sys.stderr)
        return None
    overrides = [str(o) for o in Manifest.read(sweep_dir / best.job.name).overrides]
    defaults = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in swept]
    print(f"held-out rows: scoring them with the best settings (job {best.job.name}) and with the defaults")
    tuned, config = _score(overrides, sweep_dir / DIRECTORY / "best")
    default, _ = _score(defaults, sweep_dir / DIRECTORY / "default")
    statistic = item_statistic(objective.metric, config)
    interval = NONE
    scorer = objective.metric.split("/", 1)[0]
    if statistic is not None and scorer in tuned.scores:
        # Paired by item id: items finish in any order, so the runs' score arrays do not line up.
        other = {item.id: item for item in default.items}
        paired = [
            (
                item.scores[scorer].score,
                other[item.id].scores[scorer].score,
                math.nan if item.human is None else item.human,
            )
            for item in tuned.items
            if item.id in other
        ]
        best_scores, default_scores, human = (list(column) for column in zip(*paired, strict=True))
        interval = bootstrap(
            lambda b, d, h: statistic(b, h) - statistic(d, h), best_scores, default_scores, human
        )[0]
    assert tuned.objective is not None and default.objective is not None
    return Holdout(objective, tuned.count, tuned.objective.value, default.objective.value, interval)
