"""A worker process of the joblib launcher that dies under a sweep (SIGKILL by a person or the
out-of-memory killer, a segmentation fault) stops the sweep with one line: which jobs (shards) did not
finish, and that the same command plus `resume=true` continues them, keeping what finished. joblib
alone raises TerminatedWorkerError, which Hydra prints as a traceback guessing at "a segmentation
fault ... or excessive memory usage" and exits 1 (read as exit code 2).

The exit code is the one a shell gives a process killed by that signal, 128 + N (137 for SIGKILL), so
a CI step reads the same as if the command itself had been killed."""

from __future__ import annotations

import functools
import json
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalframe.errors import EXIT_INTERRUPTED


def guard(exit_code_file: str) -> None:
    """From now on in this process, a joblib worker's death ends the sweep with one line (see above);
    a job that finished left `exit_code_file` in its directory. Once per process; nothing without the
    joblib launcher installed."""
    try:
        from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
    except ImportError:
        return
    launch = JoblibLauncher.launch
    if getattr(launch, "_evalframe_guard", False):
        return

    @functools.wraps(launch)
    def guarded(self: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from joblib.externals.loky.process_executor import TerminatedWorkerError

        try:
            return launch(self, job_overrides, initial_job_idx)
        except TerminatedWorkerError as e:
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            jobs = [(i, o, sweep_dir / str(i)) for i, o in enumerate(job_overrides, start=initial_job_idx)]
            lost = [_name(*job) for job in jobs if not (job[2] / exit_code_file).is_file()]
            raise SystemExit(died(str(e), lost, sweep_dir)) from None

    guarded._evalframe_guard = True  # type: ignore[attr-defined]  # marks the launcher guarded once
    JoblibLauncher.launch = guarded  # Launcher.launch, the plugin interface, wrapped


def _name(index: int, overrides: Sequence[str], directory: Path) -> str:
    """A job as the console calls it, `shard K` in a sharded evaluation, else `job N`, with how far it
    got: joblib says that a worker died, not which job it ran (it stops the others with it)."""
    shard = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == "shard"), None)
    name = f"shard {shard}" if shard is not None else f"job {index}"
    try:
        total = json.loads((directory / "run.json").read_text())["total"]
        with (directory / "results.jsonl").open("rb") as journal:
            done = sum(1 for _ in journal)
    except (OSError, ValueError, KeyError, TypeError):
        return f"{name} (not started)"
    return f"{name} ({done} of {total} items done)"


def died(error: str, lost: list[str], sweep_dir: Path) -> int:
    """Say in one line that a worker died (joblib's `error` names its exit codes: `{SIGKILL(-9)}`) and
    what did not finish; the exit code, 128 + the signal (EXIT_INTERRUPTED when none is named)."""
    signals = sorted({int(n) for n in re.findall(r"\(-(\d+)\)", error)})
    how = ", ".join(_signal_name(n) for n in signals) or "it exited"
    unfinished = " and ".join(lost) or "no job"
    print(
        f"error: a worker process of the joblib launcher died ({how}) with {unfinished} unfinished "
        f"({sweep_dir}): the same command plus resume=true continues, keeping every finished item",
        file=sys.stderr,
    )
    return 128 + signals[0] if signals else EXIT_INTERRUPTED


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
