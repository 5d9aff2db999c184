"""`python -m evalframe ...`: the Hydra entry point. Kept light so `--help` and `--cfg job` start
fast: the pipeline (and litellm, mlflow, torch) is imported only when a job really runs."""

import sys

import hydra
from omegaconf import DictConfig

from evalframe.paths import CONF_DIR

# The worst exit code of the run (or of all jobs of a sweep): Hydra passes return values to the
# sweeper, not to the shell.
_exit_code = 0


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _task(cfg: DictConfig) -> float:
    from evalframe import sweep
    from evalframe.run import main as run_main

    global _exit_code
    code, objective = run_main(cfg)
    sweep.record_exit_code(code)  # a parallel sweep's job runs in another process: leave it on disk
    _exit_code = max(_exit_code, code)
    return objective  # what a sweeper optimises (Optuna reads the task's return value)


def _subcommand(argv: list[str]) -> list[str]:
    """`rescore run_id=ID ...` -> the command line Hydra runs: Hydra reads only overrides, not a bare
    word, and a re-score is the logged run's own command line plus the new overrides."""
    if not argv or argv[0] != "rescore":
        return argv
    from evalframe.errors import EvalframeError
    from evalframe.rescore import command_line

    try:
        return command_line(argv[1:])
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None


def main() -> None:
    sys.argv[1:] = _subcommand(sys.argv[1:])
    try:
        _task()
    except SystemExit as e:
        # Hydra reports a bad command line (unknown option, bad override) with exit code 1, which
        # a CI pipeline would read as "gate failed": it is a usage error.
        raise SystemExit(2 if e.code == 1 else e.code) from None
    from evalframe import sweep

    sys.exit(max(_exit_code, sweep.worst_exit_code))


if __name__ == "__main__":
    main()
