"""`python -m evalframe ...`: the Hydra entry point and the command-line modes it dispatches to.

- a run (`python -m evalframe ...`, `resume=...`), a sweep (`-m ...`): the pipeline;
- `log_run=DIR`: log a run that finished while MLflow was unreachable;
- `rescore run_id=ID ...`: re-score a logged run (evalframe.rescore).

Kept light so `--help` and `--cfg job` start fast: the pipeline (and litellm, mlflow, torch) is
imported only when a job really runs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import hydra
from omegaconf import DictConfig

from evalframe.paths import CONF_DIR

# The worst exit code of the run (or of all jobs of a sweep): Hydra passes return values to the
# sweeper, not to the shell.
_exit_code = 0


def log_saved_run(directory: Path, config: dict[str, Any]) -> int:
    """`log_run=DIR`: log a run that finished while MLflow was unreachable."""
    from evalframe import objective, pipeline, tracking
    from evalframe.agreement import with_agreement
    from evalframe.errors import ConfigError
    from evalframe.journal import MANIFEST, Journal, read_items
    from evalframe.results import RunResult

    journal = Journal(directory)
    manifest = journal.manifest
    if manifest.get("status") != "finished":
        raise ConfigError(
            f"log_run={directory}: no finished run there "
            f"({MANIFEST} says {manifest.get('status', 'nothing')}); resume it first with resume=PATH"
        )
    saved = manifest["config"]
    # Log where the current command says (tracking.uri=...), with the run's own config otherwise.
    saved["tracking"] = {**saved.get("tracking", {}), **config.get("tracking", {}), "enabled": True}
    items = read_items(journal.path)
    result = RunResult(items=items, scorers=list(saved["scorers"]), keep=pipeline.keep_items(saved))
    with_agreement(result, saved)
    result.objective = objective.from_json(manifest.get("objective"))
    print(f"logging {len(items)} items from {journal.path}", file=sys.stderr)
    return tracking.log(result, saved, journal.path, manifest.get("overrides"))


def run(cfg: DictConfig) -> tuple[int, float]:
    """Hydra's task: resolve the config, run the mode it asks for, and turn every outcome into an
    exit code. Also returns the run's objective for a sweeper such as Optuna (the worst value when
    there is none)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from evalframe import config as configs
    from evalframe import pipeline, redaction, report
    from evalframe.errors import EvalframeError
    from evalframe.journal import resume_dir
    from evalframe.results import Objective
    from evalframe.sweep import require_multirun

    report.quiet_libraries()
    hydra_cfg = HydraConfig.get()
    direction = "minimize" if OmegaConf.select(cfg, "objective.direction") == "minimize" else "maximize"
    failed = Objective("none", direction)
    output_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    # Hydra has already written the command line to .hydra/: blank any secret passed on it.
    hydra_files = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else output_dir
    given = [o.split("=", 1) for o in overrides if "=" in o]
    redaction.scrub(hydra_files, [v for k, v in given if redaction.is_secret(k.lstrip("+~"))])
    try:
        config = configs.resolve(cfg)
        redaction.scrub(hydra_files, list(redaction.values(config)))  # secrets set in YAML files too
        if config.get("log_run"):
            return log_saved_run(Path(config["log_run"]), config), failed.worst
        if config.get("rescore"):
            from evalframe import rescore

            code, objective = rescore.main(config, output_dir, overrides)
            return code, (objective or failed).returned()
        require_multirun(hydra_cfg)
        # Hydra's default run directory is outputs/DATE/TIME: unfinished runs are looked for there.
        resume_from = resume_dir(config.get("resume"), output_dir.parent.parent, config)
        result, code = pipeline.evaluate(config, output_dir, resume_from, overrides)
        return code, (result.objective or failed).returned()
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code, failed.worst


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _task(cfg: DictConfig) -> float:
    from evalframe import sweep

    global _exit_code
    code, objective = run(cfg)
    sweep.record_exit_code(code)  # a parallel sweep's job runs in another process: leave it on disk
    _exit_code = max(_exit_code, code)
    return objective  # what a sweeper optimises (Optuna reads the task's return value)


def _subcommand(argv: list[str], scratch: str) -> list[str]:
    """`rescore run_id=ID ...` -> the command line Hydra runs: Hydra reads only overrides, not a bare
    word, and a re-score is the logged run's own command line plus the new overrides."""
    if not argv or argv[0] != "rescore":
        return argv
    from evalframe.errors import EvalframeError
    from evalframe.rescore import command_line

    try:
        return command_line(argv[1:], Path(scratch))
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None


# What only prints or lists (Hydra answers them itself) and what needs no model: no litellm for them.
_NO_MODEL = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def main() -> None:
    if not any(a in _NO_MODEL or a.startswith(("--cfg=", "log_run=")) for a in sys.argv[1:]):
        from evalframe import llm

        llm.preload()  # while Hydra composes the config and the dataset is validated
    with tempfile.TemporaryDirectory(prefix="evalframe-") as scratch:  # a re-scored run's download
        sys.argv[1:] = _subcommand(sys.argv[1:], scratch)
        try:
            _task()
        except SystemExit as e:
            # Hydra reports a bad command line (unknown option, bad override) with exit code 1, which
            # a CI pipeline would read as "gate failed": it is a usage error.
            raise SystemExit(2 if e.code == 1 else e.code) from None
    from evalframe import sweep

    _exit(max(_exit_code, sweep.worst_exit_code))


def _exit(code: int) -> NoReturn:
    """Exit at once: every result is written and closed by now (the atexit handlers still run), and
    tearing the interpreter down, freeing litellm's, matplotlib's and mlflow's modules object by
    object, would hold the exit code back 0.3-0.5 s for nothing."""
    import atexit
    import os
    import threading

    # What the interpreter does first at exit: join the threads and shut down executors (a joblib
    # sweep's worker processes), then the atexit handlers; only the teardown of modules is skipped.
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
