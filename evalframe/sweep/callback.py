"""Sweeps (`python -m evalframe -m penalties.missing=0.05,0.15,0.3 ...`, `-m sweep=penalties_grid`,
`-m sweep=tune_penalties`): one MLflow parent run per sweep, one child run per job, and at the end a
table of all jobs ranked by the objective (objective.py) and the best job's values.

A Hydra callback, so it works with any sweeper (basic grid, Optuna) and any launcher: the parent run
is created at sweep start and its id handed to the jobs through the environment (inherited by
joblib's worker processes too). Each job's run.json (journal.py) records what the table needs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from evalframe.errors import ConfigError
from evalframe.models.cache import alive
from evalframe.models.limits import PARALLEL_JOBS
from evalframe.paths import write_atomically
from evalframe.redaction import redact_overrides
from evalframe.results.jobs import best_of, objective_of, read_jobs, swept_keys
from evalframe.results.scores import Objective
from evalframe.sweep import progress, shards, workers
from evalframe.tracking.sweeps import PARENT_RUN, SWEPT

EXIT_CODE = "exit_code"  # each job's exit code, in its directory
SWEEP = "sweep.json"  # the sweep's own record: its overrides, status, process and MLflow parent run
# What the sweep hands its jobs through the environment (and its record, for joined_job).
HANDED = (PARENT_RUN, SWEPT, PARALLEL_JOBS)
# The exit codes of the command that runs the sweep (evalframe.cli.hydra_app.hydra_app): the sweep's worst
# job's, whichever process it ran in, is added at its end. Set for one command, not for the process.
EXIT_CODES: ContextVar[list[int] | None] = ContextVar("evalframe_exit_codes", default=None)


def _without_resume(overrides: list[str]) -> list[str]:
    """A sweep's overrides, secrets blanked, `resume=...` left out."""
    return [o for o in redact_overrides(overrides) if o.split("=", 1)[0].lstrip("+~") != "resume"]


def _identity(overrides: list[str]) -> list[str]:
    """A sweep's identity: its overrides as _without_resume gives them, in any order (`-m a=1,2 b=3` is
    the sweep of `-m b=3 a=1,2`)."""
    return sorted(_without_resume(overrides))


def find_unfinished(root: Path, overrides: list[str]) -> Path | None:
    """The newest sweep directory under `root` (multirun/) whose sweep ran with these overrides, in
    any order, and did not finish, and whose process is gone (a live one is still running, not to be
    resumed)."""
    wanted = _identity(overrides)
    for marker in sorted(root.glob(f"*/*/{SWEEP}"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        if record.get("status") != "running" or _identity(record.get("overrides", [])) != wanted:
            continue
        if record.get("host") == socket.gethostname() and alive(int(record.get("pid", 0))):
            continue
        return marker.parent
    return None


def in_sweep_order(sweep_dir: Path, overrides: list[str]) -> list[str]:
    """`overrides` in the order the sweep in `sweep_dir` was started with them. Hydra numbers a grid's
    jobs by the order of its keys on the command line (`a=1,2 b=3,4`: job 1 is a=1 b=4, not a=2 b=3),
    and a resumed job continues the directory of its number: given in another order, each job would
    find another's. One the sweep did not have (resume) goes last."""
    try:
        started = _without_resume(json.loads((sweep_dir / SWEEP).read_text()).get("overrides", []))
    except (OSError, ValueError):
        return overrides

    def position(override: str) -> int:
        [blanked] = redact_overrides([override])
        return started.index(blanked) if blanked in started else len(started)

    return sorted(overrides, key=position)


def _write_marker(sweep_dir: Path, record: dict[str, Any]) -> None:
    write_atomically(sweep_dir / SWEEP, json.dumps(record, indent=1))


def require_multirun(hydra_cfg: Any) -> None:
    """A sweep preset without -m would silently run one job with the defaults: say so instead."""
    from hydra.types import RunMode

    preset = (hydra_cfg.runtime.choices or {}).get("sweep")
    if preset and hydra_cfg.mode == RunMode.RUN:
        raise ConfigError(
            f"sweep={preset} is a sweep preset and runs several jobs: add -m "
            f"(python -m evalframe -m sweep={preset} ...)"
        )


def check_objective(config: DictConfig) -> None:
    """A bad objective would fail every job the same way (30 times in an Optuna search): stop first."""
    from evalframe.results.objective import of_config

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


def parallel_jobs(config: DictConfig) -> int:
    """How many of the sweep's jobs may run at once, so each takes its share of model.rpm/tpm: one
    with Hydra's basic launcher; joblib's n_jobs (-1: every CPU) or Ray's all, at most the jobs the
    sweep has (its grid, or an Optuna batch: hydra.sweeper.n_jobs)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    launcher = str(OmegaConf.select(config, "hydra.launcher._target_") or "")
    if "joblib" in launcher:
        n = int(OmegaConf.select(config, "hydra.launcher.n_jobs") or -1)
        at_once = n if n > 0 else max(1, (os.cpu_count() or 1) + 1 + n)  # joblib's count for n < 0
    elif "ray" in launcher:
        at_once = sys.maxsize
    else:
        return 1
    if "optuna" in str(OmegaConf.select(config, "hydra.sweeper._target_") or ""):
        return max(1, min(at_once, int(OmegaConf.select(config, "hydra.sweeper.n_jobs") or 1)))
    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    given = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    swept = {o.get_key_element(): o for o in OverridesParser.create().parse_overrides(given)}
    jobs = 1
    for override in swept.values():  # a key given on the command line replaces the preset's
        if override.is_sweep_override():
            jobs *= len(list(override.sweep_iterator()))
    return max(1, min(at_once, jobs))


def joined_job(hydra_cfg: Any) -> None:
    """A job that has not the sweep's environment takes what the sweep hands its jobs (the MLflow parent
    run, the swept keys, how many jobs share the rate budget) from the sweep's record: a Ray cluster's
    workers have their own node's environment, not the command's (the sweep dir is on a file system
    they share, as a sharded evaluation's merge needs anyway)."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN or any(k in os.environ for k in HANDED):
        return  # the same process, or a worker that inherited the sweep's environment
    marker = Path(hydra_cfg.sweep.dir) / SWEEP
    if marker.is_file():
        handed = json.loads(marker.read_text()).get("handed") or {}
        os.environ.update({k: str(v) for k, v in handed.items() if k in HANDED})


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
        from evalframe.report import console as report
        from evalframe.tracking import sweeps

        check_objective(config)
        workers.guard(EXIT_CODE)  # a joblib worker that dies: one line, not joblib's traceback
        os.environ[sweeps.SWEPT] = json.dumps(sweep_keys(config))
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        overrides = list(config.hydra.overrides.task)
        # A resumed sweep (`-m ... resume=true`: evalframe.cli.hydra_app points hydra.sweep.dir at it)
        # continues its own MLflow parent run; its jobs find what they finished in their directories.
        earlier = json.loads((sweep_dir / SWEEP).read_text()) if (sweep_dir / SWEEP).is_file() else {}
        parent = earlier.get("parent_run_id")
        os.environ[PARALLEL_JOBS] = str(parallel_jobs(config))
        if OmegaConf.select(config, "tracking.enabled"):
            uri = str(OmegaConf.select(config, "tracking.uri"))
            experiment = str(OmegaConf.select(config, "tracking.experiment"))
            if not (parent and sweeps.reopen_parent(uri, parent)):
                with report.notes() as notes:
                    parent = sweeps.start_parent(
                        uri=uri,
                        experiment=experiment,
                        name=f"sweep {sweep_dir.name}",
                        overrides=overrides,
                        notes=notes,
                    )
        sharded = shards.count(config)
        if sharded is not None:
            progress.show(sweep_dir, sharded)  # the whole evaluation's bar; the shards show none
        record = {"status": "running", "overrides": redact_overrides(overrides), "parent_run_id": parent}
        record |= {"handed": {k: os.environ[k] for k in HANDED if os.environ.get(k)}}  # for joined_job
        _write_marker(sweep_dir, {**record, "host": socket.gethostname(), "pid": os.getpid()})

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from evalframe.report import console as report, sweep_html
        from evalframe.sweep import holdout
        from evalframe.tracking import store, sweeps

        progress.stop()  # a sharded evaluation's bar, as its shards left it
        sweep_dir = Path(config.hydra.sweep.dir)
        codes = EXIT_CODES.get()
        if codes is not None:
            codes.extend(int(p.read_text()) for p in sweep_dir.glob(f"*/{EXIT_CODE}"))
        jobs = read_jobs(sweep_dir)
        objective = objective_of(config, jobs)
        sharded = shards.count(config)
        if sharded is not None:  # one evaluation in shards: the whole of it, not a table of jobs
            self._whole(config, sweep_dir, sharded, objective)
            return
        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
        swept = swept_keys(jobs, [str(k) for k in params])
        best = best_of(sweep_dir, jobs, objective, swept)
        report.sweep(jobs, swept, objective)
        report.best(best, objective)
        os.environ.pop(sweeps.SWEPT, None)
        held_out = holdout.check(config, sweep_dir, best, swept, objective)
        if held_out is not None:
            report.holdout(held_out)
        written = sweep_html.write_sweep_report(sweep_dir, jobs, objective, swept, held_out)
        if written:  # written[0] is sweep.html, the plots follow
            report.console.print(f"sweep report: {written[0]}", soft_wrap=True, markup=False, highlight=False)
        if (sweep_dir / SWEEP).is_file():
            _write_marker(sweep_dir, {**json.loads((sweep_dir / SWEEP).read_text()), "status": "finished"})
        os.environ.pop(PARALLEL_JOBS, None)
        uri = str(OmegaConf.select(config, "tracking.uri"))
        extra = held_out.metrics() if held_out else {}
        with report.notes() as notes:
            parent = sweeps.end_parent(uri, best, objective, sweep_dir, written, extra, notes=notes)
        if parent:
            report.where_to_look(uri, store.display_uri(uri), *parent, what="View the sweep")

    def _whole(self, config: DictConfig, sweep_dir: Path, sharded: int, objective: Objective) -> None:
        """The end of a sharded evaluation: the shards merged into one run (its summary, gate and
        exit code) logged into the sweep's parent run. A shard that did not finish leaves the sweep
        unfinished, for `resume=true` to complete."""
        from evalframe.report import console as report
        from evalframe.tracking import store, sweeps

        os.environ.pop(sweeps.SWEPT, None)
        os.environ.pop(PARALLEL_JOBS, None)
        code, merged = shards.finish(config, sweep_dir, sharded, os.environ.get(sweeps.PARENT_RUN))
        codes = EXIT_CODES.get()
        if codes is not None:
            codes.append(code)
        if merged and (sweep_dir / SWEEP).is_file():
            _write_marker(sweep_dir, {**json.loads((sweep_dir / SWEEP).read_text()), "status": "finished"})
        uri = str(OmegaConf.select(config, "tracking.uri"))
        with report.notes() as notes:
            parent = sweeps.end_parent(uri, None, objective, sweep_dir, [], notes=notes)
        if parent and merged:
            report.where_to_look(uri, store.display_uri(uri), *parent, what="View the evaluation")
