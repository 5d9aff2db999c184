"""`python -m evalframe ...`: the Hydra entry point and the command-line modes it dispatches to.

- a run (`python -m evalframe ...`, `resume=...`), a sweep (`-m ...`): the pipeline;
- `log_run=DIR`: log a run that finished while MLflow was unreachable;
- `rescore run_id=ID ...`: re-score a logged run (evalframe.rescore);
- `ui [port=N] [tracking.uri=...]`: the MLflow UI on the runs' store (evalframe.ui), without Hydra.
- `compare baseline=ID candidate=ID`: compare two logged runs item by item (evalframe.compare).

Kept light so `--help` and `--cfg job` start fast: the pipeline (and litellm, mlflow, torch) is
imported only when a job really runs.
"""

from __future__ import annotations

import errno
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import hydra
from omegaconf import DictConfig, OmegaConf

from evalframe.errors import EXIT_STORAGE
from evalframe.paths import CONF_DIR

# The worst exit code of the run (or of all jobs of a sweep): Hydra passes return values to the
# sweeper, not to the shell.
_exit_code = 0


def _new_run_dir(base: str) -> str:
    """The `${evalframe.run_dir:...}` of conf/config.yaml's hydra.run.dir and hydra.sweep.dir: a fresh
    directory of this run's own. Cached by OmegaConf (and copied into every job of a sweep), so it is
    created once per run or sweep."""
    from evalframe.results.journal import new_run_dir

    try:
        return str(new_run_dir(base))
    except OSError as e:  # a read-only working directory: before Hydra writes anything
        print(
            f"error: cannot create the run directory {base} ({e.strerror}); run from a directory you can "
            "write to, or choose another with hydra.run.dir=... (a sweep: hydra.sweep.dir=...)",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_STORAGE) from None


OmegaConf.register_new_resolver("evalframe.run_dir", _new_run_dir, use_cache=True, replace=True)


def log_saved_run(directory: Path, config: dict[str, Any]) -> int:
    """`log_run=DIR`: log a run that finished while MLflow was unreachable."""
    from evalframe.errors import ConfigError
    from evalframe.results import objective
    from evalframe.results.agreement import with_agreement
    from evalframe.results.intervals import with_intervals
    from evalframe.results.journal import LOGGED, MANIFEST, Journal, read_items
    from evalframe.results.nouns import RunResult, Verdict
    from evalframe.run import pipeline
    from evalframe.tracking import log as tracking

    journal = Journal(directory)
    manifest = journal.manifest
    if manifest.get("status") != "finished":
        raise ConfigError(
            f"log_run={directory}: no finished run there "
            f"({MANIFEST} says {manifest.get('status', 'nothing')}); resume it first with resume=PATH"
        )
    if manifest.get(LOGGED) and not config.get("log_run_again"):
        print(
            f"{directory} is already logged to MLflow as run {manifest[LOGGED]}: nothing logged "
            "(log_run_again=true logs it again, as a new run)",
            file=sys.stderr,
        )
        return 0
    saved = manifest["config"]
    # Log where the current command says (tracking.uri=...), with the run's own config otherwise.
    saved["tracking"] = {**saved.get("tracking", {}), **config.get("tracking", {}), "enabled": True}
    items = read_items(journal.path)
    result = RunResult(items=items, scorers=list(saved["scorers"]), keep=pipeline.keep_items(saved))
    with_intervals(result)
    with_agreement(result, saved)
    result.objective = objective.from_json(manifest.get("objective"))
    if gate := manifest.get("gate"):  # the verdict the run reached, recorded again in MLflow
        result.verdict = Verdict(int(gate["exit_code"]), tuple(gate["failed"]))
    result.facts = dict(manifest.get("about") or {})
    print(f"logging {len(items)} items from {journal.path}", file=sys.stderr)
    code = tracking.log(result, saved, journal.path, manifest.get("overrides"))
    if result.run_id:
        journal.logged(result.run_id)
    return code


def _finished_job(directory: Path, config: dict[str, Any]) -> int:
    """A job of a resumed sweep that had finished before the kill: kept as it is (logged to MLflow
    now if the kill came before it was), not run again."""
    from evalframe.sweep.callback import EXIT_CODE

    code_file = directory / EXIT_CODE
    if not code_file.is_file():  # finished, but killed before its exit code (so before MLflow) was in
        return log_saved_run(directory, config)
    print(f"job {directory.name}: finished before the sweep was stopped; kept", file=sys.stderr)
    return int(code_file.read_text())


def run(cfg: DictConfig) -> tuple[int, float]:
    """Hydra's task: resolve the config, run the mode it asks for, and turn every outcome into an
    exit code. Also returns the run's objective for a sweeper such as Optuna (the worst value when
    there is none)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from evalframe import redaction
    from evalframe.config import compose as configs
    from evalframe.errors import EXIT_USAGE, EvalframeError
    from evalframe.report import console as report
    from evalframe.results import objective as objectives
    from evalframe.results.journal import Journal, resume_dir
    from evalframe.results.nouns import Objective
    from evalframe.run import pipeline
    from evalframe.sweep.callback import require_multirun

    hydra_cfg = HydraConfig.get()
    report.quiet_libraries(bool(hydra_cfg.verbose))
    direction = "minimize" if OmegaConf.select(cfg, "objective.direction") == "minimize" else "maximize"
    failed = Objective("none", direction)
    output_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    # Hydra has already written the command line to .hydra/ (and a sweep's to multirun.yaml): blank
    # every secret value passed on it, then those set in YAML files too. A joblib worker never ran
    # main(): its console and log files are guarded here.
    hydra_files = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else output_dir
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml" if hydra_cfg.mode == RunMode.MULTIRUN else None
    redaction.remember_overrides(overrides)
    redaction.guard_console()

    def scrub_hydra_files() -> None:
        redaction.scrub(hydra_files)
        if sweep_file:
            redaction.scrub_file(sweep_file)

    scrub_hydra_files()
    try:
        config = configs.resolve(cfg)
        redaction.remember(config)
        scrub_hydra_files()
        if config.get("log_run"):
            return log_saved_run(Path(config["log_run"]), config), failed.worst
        if config.get("rescore"):
            from evalframe.cli import rescore

            code, objective = rescore.main(config, output_dir, overrides)
            return code, (objective or failed).returned()
        require_multirun(hydra_cfg)
        if hydra_cfg.mode == RunMode.MULTIRUN and config.get("resume") not in (None, False, "false"):
            # A job of a resumed sweep: its directory is the killed sweep's, holding what it did.
            manifest = Journal(output_dir).manifest
            if manifest.get("status") == "finished":
                kept = objectives.from_json(manifest.get("objective"))
                return _finished_job(output_dir, config), (kept or failed).returned()
            resume_from = resume_dir(str(output_dir), output_dir, config) if manifest else None
        else:
            # Hydra's default run directory is outputs/DATE/TIME: unfinished runs are looked for there.
            resume_from = resume_dir(config.get("resume"), output_dir.parent.parent, config)
        result, code = pipeline.evaluate(config, output_dir, resume_from, overrides)
        return code, (result.objective or failed).returned()
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.exit_code == EXIT_USAGE:
            discard_unused(output_dir, hydra_files)
        return e.exit_code, failed.worst
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        # Past the journal (which says how to resume): its items are all on disk, the report is not.
        print(
            f"error: cannot write {e.filename or output_dir} ({e.strerror}); the finished items are in "
            f"{output_dir}. Free some space, then log them with: python -m evalframe log_run={output_dir}",
            file=sys.stderr,
        )
        return EXIT_STORAGE, failed.worst


def discard_unused(output_dir: Path, hydra_files: Path) -> None:
    """A run stopped by a usage error before any work leaves no directory behind: Hydra made it and
    put only its .hydra/ there. Its parents (outputs/DATE, outputs) go too once empty; never the
    working directory or anything above it."""
    import shutil

    here = Path.cwd().resolve()
    output_dir = output_dir.resolve()
    if here not in output_dir.parents or not output_dir.is_dir():
        return
    if any(p != hydra_files.resolve() for p in output_dir.iterdir()):
        return  # the run wrote something (results, run.json): keep it
    shutil.rmtree(output_dir, ignore_errors=True)
    for parent in output_dir.parents:
        if parent == here:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _task(cfg: DictConfig) -> float:
    from evalframe.sweep import callback as sweep

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
    from evalframe.cli.rescore import command_line
    from evalframe.errors import EvalframeError

    try:
        return command_line(argv[1:], Path(scratch))
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None


def _ui(args: list[str]) -> int:
    from evalframe.cli import ui
    from evalframe.errors import EvalframeError

    try:
        return ui.main(args)
    except EvalframeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def _resumed_sweep(argv: list[str]) -> list[str]:
    """`-m ... resume=true` continues the newest unfinished sweep with the same overrides (or
    `resume=multirun/DATE/TIME`, that one) in its own directory: hydra.sweep.dir is set to it, where
    each job finds what it finished, and the sweep's MLflow parent run goes on."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args, _ = get_args_parser().parse_known_args(argv)
    if not args.multirun or not args.overrides:
        return argv
    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except Exception:  # Hydra says what is wrong with the command line
        return argv
    given = {o.get_key_element().lstrip("+~"): o for o in parsed}
    resume = given.get("resume")
    if resume is None or "hydra.sweep.dir" in given or str(resume.value()).lower() in ("false", "none"):
        return argv
    from evalframe.errors import ConfigError
    from evalframe.sweep import callback as sweep

    task = [str(o.input_line) for o in parsed if not o.is_hydra_override()]
    if str(resume.value()).lower() == "true":
        found = sweep.find_unfinished(Path("multirun"), task)
        if found is None:
            raise ConfigError(
                f"resume=true: no unfinished sweep with these overrides under {Path('multirun').resolve()}; "
                "name its directory with resume=multirun/DATE/TIME, or drop resume"
            )
    else:
        found = Path(str(resume.value())).expanduser()
        if not (found / sweep.SWEEP).is_file():
            raise ConfigError(
                f"resume={resume.value()}: {found} holds no evalframe sweep ({sweep.SWEEP} is missing)"
            )
    print(f"resuming the sweep in {found}", file=sys.stderr)
    return [*argv, f"hydra.sweep.dir='{found}'"]


# What only prints or lists (Hydra answers them itself) and what needs no model: no litellm for them.
_NO_MODEL = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def main() -> None:
    from evalframe import redaction

    # Before Hydra prints anything (its launch lines, --cfg job, its errors): the secrets typed on the
    # command line are blanked on the console from the start.
    redaction.remember_overrides(sys.argv[1:])
    redaction.guard_console()
    no_model = sys.argv[1:2] in (["ui"], ["compare"]) or any(
        a in _NO_MODEL or a.startswith(("--cfg=", "log_run=")) for a in sys.argv[1:]
    )
    if not no_model:
        from evalframe.models import llm

        llm.preload()  # while Hydra composes the config and the dataset is validated

    if sys.argv[1:2] == ["ui"]:  # not a run: no run directory, no Hydra app
        sys.exit(_ui(sys.argv[2:]))
    from evalframe.errors import EvalframeError

    if sys.argv[1:2] == ["compare"]:  # no config to compose: Hydra is not involved
        from evalframe.cli import compare

        sys.exit(compare.main(sys.argv[2:]))
    with tempfile.TemporaryDirectory(prefix="evalframe-") as scratch:  # a re-scored run's download
        sys.argv[1:] = _subcommand(sys.argv[1:], scratch)
        try:
            sys.argv[1:] = _resumed_sweep(sys.argv[1:])
        except EvalframeError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(e.exit_code) from None
        try:
            _task()
        except SystemExit as e:
            # Hydra reports a bad command line (unknown option, bad override) with exit code 1, which
            # a CI pipeline would read as "gate failed": it is a usage error.
            raise SystemExit(2 if e.code == 1 else e.code) from None
    from evalframe.sweep import callback as sweep

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
