"""Sweeps (`python -m evalframe -m penalties.missing=0.05,0.15,0.3 ...`, `-m sweep=penalties_grid`,
`-m sweep=tune_penalties`): one MLflow parent run per sweep, one child run per job, and at the end a
table of all jobs ranked by the objective (objective.py) and the best job's values.

A Hydra callback, so it works with any sweeper (basic grid, Optuna) and any launcher: the parent run
is created at sweep start and its id handed to the jobs through the environment (inherited by
joblib's worker processes too). Each job's run.json (journal.py) records what the table needs.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from evalframe.errors import ConfigError
from evalframe.journal import MANIFEST
from evalframe.objective import Objective

PARENT_RUN = "EVALFRAME_PARENT_RUN_ID"
SWEPT = "EVALFRAME_SWEPT_KEYS"  # the keys a sweep varies (JSON list), for its jobs' run names
OPTUNA_RESULTS = "optimization_results.yaml"  # written into the sweep directory by the Optuna sweeper
EXIT_CODE = "exit_code"  # each job's exit code, in its directory
worst_exit_code = 0  # of the last sweep's jobs, whichever process they ran in


@dataclass
class Job:
    name: str  # the job's directory in the sweep directory: 0, 1, ...
    overrides: dict[str, str]  # key -> value, as given to the job
    means: dict[str, float]
    objective: float  # NaN when the job finished without one (or did not finish)
    metric: str | None = None  # what `objective` measures, as the job recorded it
    direction: str = "maximize"


@dataclass
class Best:
    params: dict[str, str]
    value: float
    job: Job | None


def require_multirun(hydra_cfg: Any) -> None:
    """A sweep preset without -m would silently run one job with the defaults: say so instead."""
    from hydra.types import RunMode

    preset = (hydra_cfg.runtime.choices or {}).get("sweep")
    if preset and hydra_cfg.mode == RunMode.RUN:
        raise ConfigError(
            f"sweep={preset} is a sweep preset and runs several jobs: add -m "
            f"(python -m evalframe -m sweep={preset} ...)"
        )


def read_jobs(sweep_dir: Path) -> list[Job]:
    jobs = []
    for manifest in Path(sweep_dir).glob(f"*/{MANIFEST}"):
        data = json.loads(manifest.read_text())
        recorded = data.get("objective") or {}
        value = recorded.get("value")
        overrides = dict(o.split("=", 1) for o in data.get("overrides", []) if "=" in o)
        jobs.append(
            Job(
                manifest.parent.name,
                {k.lstrip("+~"): v for k, v in overrides.items()},
                data.get("means", {}),
                math.nan if value is None else float(value),
                recorded.get("metric"),
                recorded.get("direction") or "maximize",
            )
        )
    return sorted(jobs, key=lambda j: (len(j.name), j.name))  # 0, 1, ..., 10 in launch order


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


def check_objective(config: DictConfig) -> None:
    """A bad objective would fail every job the same way (30 times in an Optuna search): stop first."""
    from evalframe.objective import of_config

    objective = config.get("objective")
    try:
        of_config(
            {
                "objective": OmegaConf.to_container(objective, resolve=True) if objective else {},
                "scorers": dict.fromkeys(config.get("scorers") or {}),
                "dataset": {"human_score": OmegaConf.select(config, "dataset.human_score")},
            }
        )
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None


def sweep_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: its sweeper's params (presets, Optuna) and the command line's sweep
    overrides (`penalties.missing=0.05,0.3`, `range(...)`, `interval(...)`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = [str(k).lstrip("+~") for k in OmegaConf.select(config, "hydra.sweeper.params") or {}]
    parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
    keys += [o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()]
    return list(dict.fromkeys(keys))


def job_label() -> str:
    """`penalties.missing=0.05 penalties.contradiction=1.0` for a sweep's job (its swept values), so
    the jobs' MLflow runs are told apart by name; "" outside a sweep."""
    from hydra.core.hydra_config import HydraConfig

    keys = json.loads(os.environ.get(SWEPT) or "[]")
    if not keys or not HydraConfig.initialized():
        return ""
    values = dict(o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    return " ".join(f"{k}={values[k]}" for k in keys if k in values)


def record_exit_code(code: int) -> None:
    """Leave a sweep job's exit code in its directory: with hydra/launcher=joblib the job runs in a
    worker process, and the sweep's exit code (the worst job's) is decided in the main one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        (Path(hydra_cfg.runtime.output_dir) / EXIT_CODE).write_text(str(code))


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_objective(config)
        os.environ[SWEPT] = json.dumps(sweep_keys(config))
        tracking = config.get("tracking") or {}
        if not tracking.get("enabled"):
            return
        from evalframe import tracking as mlflow_tracking

        overrides = list(config.hydra.overrides.task)
        name = f"sweep {Path(config.hydra.sweep.dir).name}"
        os.environ[PARENT_RUN] = mlflow_tracking.start_parent(
            uri=str(OmegaConf.select(config, "tracking.uri")),
            experiment=str(tracking.get("experiment")),
            name=name,
            overrides=overrides,
        )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from evalframe import html_report, report

        global worst_exit_code
        sweep_dir = Path(config.hydra.sweep.dir)
        codes = [int(p.read_text()) for p in sweep_dir.glob(f"*/{EXIT_CODE}")]
        worst_exit_code = max([worst_exit_code, *codes])
        jobs = read_jobs(sweep_dir)
        objective = objective_of(config, jobs)
        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
        swept = swept_keys(jobs, [str(k) for k in params])
        best = best_of(sweep_dir, jobs, objective, swept)
        report.sweep(jobs, swept, objective)
        report.best(best, objective)
        html_report.write_sweep_report(
            sweep_dir,
            jobs,
            objective,
            swept,
            os.environ.get(PARENT_RUN),
            OmegaConf.select(config, "tracking.uri"),
        )
        os.environ.pop(SWEPT, None)
        parent = os.environ.pop(PARENT_RUN, None)
        if parent:
            from evalframe import tracking as mlflow_tracking

            tags = {
                "evalframe.sweep.objective": objective.metric,
                "evalframe.sweep.direction": objective.direction,
            }
            metrics = {}
            if best is not None:
                tags["evalframe.sweep.best"] = " ".join(f"{k}={v}" for k, v in best.params.items())
                tags.update({f"evalframe.sweep.best.{k}": v for k, v in best.params.items()})
                if best.job is not None:
                    tags["evalframe.sweep.best_job"] = best.job.name
                metrics["objective"] = best.value
            mlflow_tracking.end_parent(str(OmegaConf.select(config, "tracking.uri")), parent, tags, metrics)
