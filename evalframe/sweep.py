"""Sweeps (`python -m evalframe -m penalties.missing=0.05,0.15,0.3 ...`): one MLflow parent run per
sweep, one child run per job, and a table of all jobs sorted by score at the end.

A Hydra callback, so it works with any launcher: the parent run is created at sweep start and its id
handed to the jobs through the environment (inherited by joblib's worker processes too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

PARENT_RUN = "EVALFRAME_PARENT_RUN_ID"
EXIT_CODE = "exit_code"  # each job's exit code, in its directory
worst_exit_code = 0  # of the last sweep's jobs, whichever process they ran in


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
        from evalframe import report

        global worst_exit_code
        codes = [int(p.read_text()) for p in Path(config.hydra.sweep.dir).glob(f"*/{EXIT_CODE}")]
        worst_exit_code = max([worst_exit_code, *codes])
        rows = []
        for manifest in sorted(Path(config.hydra.sweep.dir).glob("*/run.json")):
            data = json.loads(manifest.read_text())
            rows.append((manifest.parent.name, data.get("overrides", []), data.get("means", {})))
        report.sweep(rows)
        parent = os.environ.pop(PARENT_RUN, None)
        if parent:
            from evalframe import tracking as mlflow_tracking

            mlflow_tracking.end_parent(str(OmegaConf.select(config, "tracking.uri")), parent)
