"""A sweep's jobs as their run directories recorded them (run.json), and the best of them: what the
end-of-sweep table, sweep.html and the parent MLflow run show."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from evalframe.results.manifest import MANIFEST, Manifest
from evalframe.results.scores import Objective
from evalframe.results.summary import fmt_interval, fmt_metric

if TYPE_CHECKING:  # numpy comes with intervals: not on `--help`'s path (the sweep callback imports this)
    from evalframe.results.intervals import Interval

OPTUNA_RESULTS = "optimization_results.yaml"  # written into the sweep directory by the Optuna sweeper


@dataclass
class Job:
    name: str  # the job's directory in the sweep directory: 0, 1, ...
    overrides: dict[str, str]  # key -> value, as given to the job
    means: dict[str, float]
    objective: float  # NaN when the job finished without one (or did not finish)
    metric: str | None = None  # what `objective` measures, as the job recorded it
    direction: str = "maximize"
    interval: tuple[float, float] = (math.nan, math.nan)  # the objective's 95% interval, when it has one


@dataclass
class Best:
    params: dict[str, str]
    value: float
    job: Job | None


@dataclass
class Holdout:
    """The held-out rows scored with the best job's settings and with the defaults (tune.holdout)."""

    objective: Objective
    rows: int
    best: float
    default: float
    interval: Interval  # of best − default, resampling the held-out items

    @property
    def difference(self) -> float:
        return self.best - self.default

    @property
    def outcome(self) -> str:
        """better, worse or unclear: where the interval of the gain (in the objective's direction) lies."""
        sign = 1 if self.objective.direction == "maximize" else -1
        low, high = sorted((sign * self.interval.low, sign * self.interval.high))
        if not self.interval.known:
            return "unclear"
        return "better" if low > 0 else "worse" if high < 0 else "unclear"

    @property
    def verdict(self) -> str:
        return {
            "better": "the tuned settings beat the defaults on the held-out rows",
            "worse": "the tuned settings are worse than the defaults on the held-out rows",
        }.get(
            self.outcome,
            "the tuned settings do not clearly beat the defaults on the held-out rows (the interval holds 0)",
        )

    def lines(self) -> list[str]:
        metric = self.objective.metric
        return [
            f"held-out rows: {self.rows}; {self.objective.metric} ({self.objective.direction})",
            f"  best settings     {fmt_metric(metric, self.best)}",
            f"  default settings  {fmt_metric(metric, self.default)}",
            f"  difference        {fmt_metric(metric, self.difference, signed=True)} "
            f"95% CI {fmt_interval(self.interval, self.rows)}",
            self.verdict,
        ]

    def metrics(self) -> dict[str, float]:
        """What the sweep's parent run logs (NaN left out)."""
        metric = self.objective.metric
        found = {
            f"holdout/best/{metric}": self.best,
            f"holdout/default/{metric}": self.default,
            "holdout/difference": self.difference,
            "holdout/difference_ci_low": self.interval.low,
            "holdout/difference_ci_high": self.interval.high,
            "holdout/rows": float(self.rows),
        }
        return {k: v for k, v in found.items() if not math.isnan(v)}


def read_jobs(sweep_dir: Path) -> list[Job]:
    jobs = []
    for path in Path(sweep_dir).glob(f"*/{MANIFEST}"):
        manifest = Manifest.read(path.parent)
        recorded = manifest.objective or {}
        value = recorded.get("value")
        low, high = (
            math.nan if v is None else float(v) for v in (recorded.get("ci_low"), recorded.get("ci_high"))
        )
        overrides = dict(o.split("=", 1) for o in manifest.overrides if "=" in o)
        jobs.append(
            Job(
                path.parent.name,
                {k.lstrip("+~"): v for k, v in overrides.items()},
                manifest.means,
                math.nan if value is None else float(value),
                recorded.get("metric"),
                recorded.get("direction") or "maximize",
                (low, high),
            )
        )
    return sorted(jobs, key=lambda j: (len(j.name), j.name))  # 0, 1, ..., 10 in launch order


def like_the_best(jobs: list[Job], objective: Objective) -> dict[str, str]:
    """ "best" for the best job, "≈ best" for the jobs whose objective cannot be told apart from it:
    their 95% intervals overlap. A rule of thumb that errs on the side of "the same": two jobs whose
    intervals overlap may still differ item by item, which `compare` tests."""
    ranked = sorted(jobs, key=lambda j: objective.rank(j.objective))
    if not ranked or math.isnan(ranked[0].objective):
        return {}
    top, (low, high) = ranked[0], ranked[0].interval
    alike = [
        j.name
        for j in ranked[1:]
        if not math.isnan(low + high + j.interval[0] + j.interval[1])
        and j.interval[0] <= high
        and low <= j.interval[1]
    ]
    return {top.name: "best", **dict.fromkeys(alike, "≈ best")}


def swept_keys(jobs: list[Job], configured: list[str]) -> list[str]:
    """The keys a sweep varies: its preset's parameters plus any override that differs between jobs."""
    keys = [k.lstrip("+~") for k in configured]
    for job in jobs:
        for key, value in job.overrides.items():
            if key not in keys and any(other.overrides.get(key) != value for other in jobs):
                keys.append(key)
    return keys


def objective_of(config: DictConfig, jobs: list[Job]) -> Objective:
    """The metric the jobs recorded (a null objective.metric resolves in each job to its first
    scorer's mean), else what the config says."""
    recorded = next((j for j in jobs if j.metric), None)
    if recorded is not None:
        return Objective(str(recorded.metric), recorded.direction)
    direction = "minimize" if OmegaConf.select(config, "objective.direction") == "minimize" else "maximize"
    return Objective(str(OmegaConf.select(config, "objective.metric") or "objective"), direction)


def best_of(sweep_dir: Path, jobs: list[Job], objective: Objective, swept: list[str]) -> Best | None:
    """The best job: Optuna's own verdict when it ran (its optimization_results.yaml), else the
    ranking's first. None when no job has an objective value."""
    ranked = sorted(jobs, key=lambda j: objective.rank(j.objective))
    top = ranked[0] if ranked and not math.isnan(ranked[0].objective) else None
    optuna = Path(sweep_dir) / OPTUNA_RESULTS
    if optuna.is_file():
        results = OmegaConf.to_container(OmegaConf.load(optuna))
        assert isinstance(results, dict)
        value = float(results.get("best_value", math.nan))
        if "best_params" not in results or not math.isfinite(value):
            return None  # multi-objective, or every trial reported the worst value (NaN objective)
        params = {str(k): str(v) for k, v in results["best_params"].items()}
        job = next((j for j in ranked if all(j.overrides.get(k) == v for k, v in params.items())), top)
        return Best(params, value, job)
    if top is None:
        return None
    return Best({k: top.overrides[k] for k in swept if k in top.overrides}, top.objective, top)
