"""`evalframe [COMMAND] ARGS`: the command line as a plain function, `main(argv) -> int`.

Commands: `run` (the default: `evalframe OVERRIDES`, `-m` for a sweep, `resume=...`), `rescore`,
`log-run`, `compare`, `runs`, `align`, `ui`, `review`. Each returns its exit code; nothing is left behind in
the process (the console guard, Hydra's state and the command line are put back), so tests and other
programs call it in process. `entry()` is the installed command: it exits at once with that code.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from evalframe import redaction
from evalframe.errors import EvalframeError

COMMANDS = ("run", "rescore", "log-run", "compare", "runs", "align", "ui", "review")
# What only prints or lists (Hydra answers them itself) and what needs no model: no litellm for them.
_NO_MODEL = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")
# Run modes that were config keys: the command that replaced each.
_MOVED = {
    "log_run": "evalframe log-run RUN_DIR",
    "log_run_again": "evalframe log-run RUN_DIR --again",
    "rescore": "evalframe rescore run_id=ID",
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    console = sys.stdout, sys.stderr
    _preload(args)  # first: importing litellm is most of a run's start-up, and it runs on a thread
    # Before anything prints (Hydra's launch lines, --cfg job, its errors): the secrets typed on the
    # command line are blanked on the console from the start.
    redaction.remember_overrides(args)
    redaction.guard_console()
    try:
        return _dispatch(args)
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        sys.stdout, sys.stderr = console


def _split(args: list[str]) -> tuple[str, list[str]]:
    return (args[0], args[1:]) if args[:1] and args[0] in COMMANDS else ("run", args)


def _preload(args: list[str]) -> None:
    """Start importing litellm for a run or a re-score, while the command line is read, Hydra composes
    the config and the rows are validated; not for what only prints, nor for a sweep whose jobs run
    in processes of their own."""
    command, rest = _split(args)
    if command not in ("run", "rescore", "align") or _jobs_elsewhere(rest):
        return
    if not any(a in _NO_MODEL or a.startswith("--cfg=") for a in rest):
        from evalframe.models import loader

        loader.preload()


def _jobs_elsewhere(args: list[str]) -> bool:
    """A sweep on a launcher other than Hydra's basic one (joblib's worker processes, Ray's): this
    process calls no model, and litellm's import (~160 MiB, 2 s of CPU) would only sit beside its
    jobs (a sharded run's shards) on the same cores and memory. Read from the strings, as _NO_MODEL is:
    Hydra's override parser (config.compose.multirun_overrides) takes ~0.15 s to import, which would
    hold back the import it decides on."""
    launchers = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("hydra/launcher=")]
    return any(a in ("-m", "--multirun") for a in args) and bool(launchers) and launchers[-1] != "basic"


def _help(command: str, rest: list[str]) -> bool:
    """`evalframe COMMAND --help` (or -h): the command's usage (its module's USAGE), nothing run. A
    run's (`evalframe --help`, `evalframe run --help`) is Hydra's: the groups, options and config."""
    if command == "run" or not {"--help", "-h"} & set(rest):
        return False
    import importlib

    print(importlib.import_module(f"evalframe.cli.{command.replace('-', '_')}").USAGE)
    return True


def _dispatch(args: list[str]) -> int:
    command, rest = _split(args)
    if _help(command, rest):
        return 0
    if command == "ui":  # not a run: no run directory, no Hydra app
        from evalframe.cli import ui

        return ui.main(rest)
    if command == "compare":  # no config to compose: Hydra is not involved
        from evalframe.cli import compare

        return compare.main(rest)
    if command == "review":  # like compare: a tracking URI, no config to compose
        from evalframe.cli import review

        return review.main(rest)
    if command == "align":  # its runs are composed from its own command line (evalframe.cli.align)
        from evalframe.cli import align

        return align.main(rest)
    if command == "runs":  # reads MLflow only
        from evalframe.cli import runs

        return runs.main(rest)
    if command == "log-run":
        from evalframe.cli import log_run

        return log_run.main(rest)
    _no_moved_keys(rest)
    from evalframe.config import typos

    typos.check([a for a in rest if not (command == "rescore" and a.startswith("run_id="))])
    from evalframe.cli import hydra_app

    if command == "rescore":
        from evalframe.cli.rescore import command_line

        with tempfile.TemporaryDirectory(prefix="evalframe-") as scratch:  # the logged run's download
            run_id, line = command_line(rest, Path(scratch))
            return hydra_app.hydra_app(line, rescoring=run_id)
    from evalframe.sweep import ray_cluster, shards

    # -m shards=N: N jobs, one evaluation; a Ray cluster joined as Ray allows, once it answers
    ray_cluster.reachable(rest)
    return hydra_app.hydra_app(hydra_app.resumed_sweep(ray_cluster.joined(shards.expand(rest))))


def _no_moved_keys(args: list[str]) -> None:
    from evalframe.errors import ConfigError

    for arg in args:
        key = arg.split("=", 1)[0].lstrip("+~")
        if "=" in arg and key in _MOVED:
            raise ConfigError(f"{key}= is a command now: {_MOVED[key]} (see evalframe --help)")


def entry() -> NoReturn:
    """The `evalframe` command: main()'s exit code, at once. Every result is written and closed by
    then (the atexit handlers still run), and tearing the interpreter down, freeing litellm's,
    matplotlib's and mlflow's modules object by object, would hold the exit code back 0.3-0.5 s."""
    import atexit
    import os
    import threading

    code = main()
    # What the interpreter does first at exit: join the threads and shut down executors (a joblib
    # sweep's worker processes), then the atexit handlers; only the teardown of modules is skipped.
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
