"""`evalframe [run] OVERRIDES` and `evalframe rescore ...`: the Hydra app. `hydra_app(argv)` runs one
command line through @hydra.main and returns its exit code (the worst job's, for a sweep).

Kept light so `--help` and `--cfg job` start fast: the pipeline (litellm, mlflow, the embedding model) is
imported only when a job really runs.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig, OmegaConf

from evalframe.cli import hydra_shortcuts
from evalframe.errors import EXIT_STORAGE, ConfigError
from evalframe.paths import CONF_DIR

if TYPE_CHECKING:
    from evalframe.results.scores import Objective


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


hydra_shortcuts.share_the_config_store()


def _finished_job(directory: Path, config: dict[str, Any]) -> int:
    """A job of a resumed sweep that had finished before the kill: kept as it is (logged to MLflow
    now if the kill came before it was), not run again."""
    from evalframe.cli.log_run import log_saved_run
    from evalframe.sweep.callback import EXIT_CODE

    code_file = directory / EXIT_CODE
    if not code_file.is_file():  # finished, but killed before its exit code (so before MLflow) was in
        return log_saved_run(directory, config["tracking"])
    print(f"job {directory.name}: finished before the sweep was stopped; kept", file=sys.stderr)
    return int(code_file.read_text())


def run(cfg: DictConfig, rescoring: str | None = None) -> tuple[int, float]:
    """Hydra's task: resolve the config, run the mode the command chose (`rescoring`: the logged run a
    re-score replays) or the config asks for (watch), and turn every outcome into an exit code. Also
    returns the run's objective for a sweeper such as Optuna (the worst value when there is none)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from evalframe import redaction
    from evalframe.config import compose as configs
    from evalframe.errors import EXIT_USAGE, EvalframeError
    from evalframe.report import console as report
    from evalframe.results.scores import Objective
    from evalframe.sweep.callback import joined_job

    hydra_cfg = HydraConfig.get()
    joined_job(hydra_cfg)  # a job on a Ray cluster's node: what the sweep hands it, from its record
    report.quiet_libraries(bool(hydra_cfg.verbose))
    direction = "minimize" if OmegaConf.select(cfg, "objective.direction") == "minimize" else "maximize"
    failed = Objective("none", direction)
    sweep = hydra_cfg.mode == RunMode.MULTIRUN
    output_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    # Hydra has already written the command line to .hydra/ (and a sweep's to multirun.yaml): blank
    # every secret value passed on it, then those set in YAML files too. A joblib worker never ran
    # main(): its console and log files are guarded here.
    hydra_files = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else output_dir
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml" if sweep else None
    redaction.remember_overrides(overrides)
    redaction.guard_console()

    def scrub_hydra_files() -> None:
        redaction.scrub(hydra_files)
        if sweep_file:
            redaction.scrub_file(sweep_file)

    scrub_hydra_files()
    try:
        config = configs.resolve(cfg, overrides)
        redaction.remember(config)
        scrub_hydra_files()
        return _job(config, hydra_cfg, output_dir, overrides, failed, rescoring)
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
            f"{output_dir}. Free some space, then log them with: evalframe log-run {output_dir}",
            file=sys.stderr,
        )
        return EXIT_STORAGE, failed.worst


def _job(
    config: dict[str, Any],
    hydra_cfg: Any,
    output_dir: Path,
    overrides: list[str],
    failed: Objective,
    rescoring: str | None,
) -> tuple[int, float]:
    """The job: a re-score, a watcher, a resumed sweep's job, or a run (resumed or new). Its exit code
    and the objective a sweeper reads."""
    from hydra.types import RunMode

    from evalframe.results import objective as objectives
    from evalframe.results.journal import Journal, resume_dir
    from evalframe.run import completion, pipeline
    from evalframe.sweep.callback import require_multirun

    if rescoring is not None:
        from evalframe.run import rescore

        code, objective = rescore.main(rescoring, config, output_dir, overrides)
        return code, _returned(objective or failed, hydra_cfg)
    if (config.get("watch") or {}).get("every") is not None:
        return _watch(config, hydra_cfg, output_dir), failed.worst
    require_multirun(hydra_cfg)
    if hydra_cfg.mode == RunMode.MULTIRUN and config.get("resume") not in (None, False, "false"):
        # A job of a resumed sweep: its directory is the killed sweep's, holding what it did.
        manifest = Journal(output_dir).manifest
        if manifest.finished:
            kept = objectives.from_json(manifest.objective)
            return _finished_job(output_dir, config), _returned(kept or failed, hydra_cfg)
        resume_from = resume_dir(str(output_dir), output_dir, config) if manifest.status else None
    else:
        # Hydra's default run directory is outputs/DATE/TIME: unfinished runs are looked for there.
        resume_from = resume_dir(config.get("resume"), output_dir.parent.parent, config)
    if resume_from is not None and completion.finished(resume_from):  # killed in its write-back, say
        result, code = completion.complete(resume_from)
    else:
        result, code = pipeline.evaluate(config, output_dir, resume_from, overrides)
    return code, _returned(result.objective or failed, hydra_cfg)


def _watch(config: dict[str, Any], hydra_cfg: Any, output_dir: Path) -> int:
    """Watch mode: one watcher, ticking until stopped (evalframe.run.watch)."""
    from hydra.types import RunMode

    from evalframe.run import watch

    if hydra_cfg.mode == RunMode.MULTIRUN:
        raise ConfigError("watch mode runs one watcher: drop -m (a sweep) or watch.every")
    if config.get("resume") not in (None, False, "false"):
        raise ConfigError("watch mode resumes by itself from its checkpoint: drop resume")
    return watch.main(config, output_dir)


def _returned(objective: Objective, hydra_cfg: Any) -> float:
    """The value a sweeper reads; in a sweep, a NaN objective says why the worst value goes instead
    (a single run has no sweeper, and its summary shows the unscored items)."""
    from hydra.types import RunMode

    if hydra_cfg.mode == RunMode.MULTIRUN and (why := objective.why_worst()):
        print(f"warning: {why}, the worst value", file=sys.stderr)
    return objective.returned()


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


def hydra_app(argv: list[str], rescoring: str | None = None) -> int:
    """Run `argv` (Hydra's command line: flags and overrides) as a run or a sweep, each job a re-score
    of the logged run `rescoring` when given; its exit code."""
    from hydra.core.global_hydra import GlobalHydra

    from evalframe.sweep import progress
    from evalframe.sweep.callback import EXIT_CODES, record_exit_code

    codes: list[int] = []  # every job's that ran in this process, and a sweep's worst (the callback's)

    @hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
    def task(cfg: DictConfig) -> float:
        code, objective = run(cfg, rescoring)
        record_exit_code(code)  # a parallel sweep's job runs in another process: leave it on disk
        codes.append(code)
        return objective  # what a sweeper optimises (Optuna reads the task's return value)

    command_line, sys.argv = sys.argv, [sys.argv[0] if sys.argv else "evalframe", *argv]
    token = EXIT_CODES.set(codes)
    try:
        with hydra_shortcuts.mode_from_the_command_line(argv):
            task()
    except SystemExit as e:
        # Hydra reports a bad command line (unknown option, bad override) with exit code 1, which
        # a CI pipeline would read as "gate failed": it is a usage error.
        return 2 if e.code == 1 else int(e.code or 0)
    finally:
        progress.stop()  # a sharded evaluation's bar, when a launcher raised before the sweep's end
        EXIT_CODES.reset(token)
        sys.argv = command_line
        GlobalHydra.instance().clear()  # the next command (or a test's compose) starts afresh
    return max(codes, default=0)


def resumed_sweep(argv: list[str]) -> list[str]:
    """`-m ... resume=true` continues the newest unfinished sweep with the same overrides in any order
    (or `resume=multirun/DATE/TIME`, that one) in its own directory: hydra.sweep.dir is set to it, where
    each job finds what it finished, and the sweep's MLflow parent run goes on."""
    from evalframe.config.compose import keyed, multirun_overrides

    parsed = multirun_overrides(argv)
    if parsed is None:
        return argv
    given = keyed(parsed)
    resume = given.get("resume")
    if resume is None or "hydra.sweep.dir" in given or str(resume.value()).lower() in ("false", "none"):
        return argv
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
    ordered = iter(sweep.in_sweep_order(found, task))  # each job to its own directory
    argv = [next(ordered) if a in task else a for a in argv]
    return [*argv, f"hydra.sweep.dir='{found}'"]
