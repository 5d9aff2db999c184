"""`evalframe compare baseline=RUN candidate=RUN`: the regression gate between two
logged runs (or a baseline and each job of a sweep, `candidate=` the sweep's parent run).

Both runs' results.jsonl are read from MLflow and their items paired by dataset id (comparison.py);
the table goes to the console and compare.html, and each comparison is logged as an MLflow run of its
own. Exit code 1 when a candidate is significantly worse on any scorer both ran (the whole interval of
the difference below 0), 2 for unknown ids, no store or nothing in common, 3 when the store does not
answer within seconds or cannot be written (both checked first), or the comparison could not be logged.

No Hydra here: a comparison has no dataset, target or judge to compose, only a tracking URI.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime
from pathlib import Path

from evalframe.cli.answered import answered
from evalframe.errors import EXIT_GATE_FAILED, EXIT_OK, EXIT_TRACKING, ConfigError
from evalframe.report import compare_html, console as report
from evalframe.results.comparison import Comparison, compare
from evalframe.results.results_file import read_items
from evalframe.results.scores import ItemResult
from evalframe.tracking.comparison import log_comparison
from evalframe.tracking.read import check_store, fetch_run, get_run, resolve, sweep_children
from evalframe.tracking.store import display_uri

USAGE = (
    "usage: evalframe compare baseline=RUN candidate=RUN [tracking.uri=URI] [experiment=NAME]\n"
    "         [output_dir=DIR]\n"
    "  two logged runs item by item; exit code 1 when the candidate is significantly worse on a scorer.\n"
    "  RUN: a run id, last (the experiment's newest run), last~1 (the one before), or the start of a name\n"
    "  (evalframe runs lists them). candidate= may be a sweep's parent run: each of its jobs is compared\n"
    "  with the baseline"
)
KEYS = ("baseline", "candidate", "tracking.uri", "experiment", "output_dir")
# Why compare needs a store it can write, and so what to do when it cannot.
WRITES = "compare logs each comparison there as a run: run it as a user who can write it and its directory"


def _arguments(argv: list[str]) -> dict[str, str]:
    args = {}
    for arg in argv:
        key, equals, value = arg.partition("=")
        if not equals or key not in KEYS or not value:
            raise ConfigError(f"compare: cannot read {arg!r}\n{USAGE}")
        args[key] = value
    missing = [k for k in ("baseline", "candidate") if k not in args]
    if missing:
        raise ConfigError(f"compare needs {' and '.join(f'{k}=RUN' for k in missing)}\n{USAGE}")
    return args


def _default(key: str) -> str:
    """tracking.`key` as a run would log: the URI $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db; the
    experiment evalframe."""
    from omegaconf import OmegaConf

    from evalframe.config import compose as config

    return str(OmegaConf.select(config.compose([]), f"tracking.{key}"))


def _checked(uri: str, role: str, run_id: str) -> dict[str, str]:
    """The tags of the run given as baseline= or candidate=, or a ConfigError saying why that run
    cannot be one: MLflow would only say it has no results.jsonl."""
    try:
        found = get_run(uri, run_id)
    except ConfigError as e:
        raise ConfigError(f"{role}={run_id}: {e}") from None
    if found.info.lifecycle_stage == "deleted":  # MLflow still serves a deleted run by its id
        restore = f"MLFLOW_TRACKING_URI={display_uri(uri)} mlflow runs restore --run-id {run_id}"
        raise ConfigError(
            f"{role}={run_id} is a deleted run (in MLflow's trash until `mlflow gc`): restore it with "
            f"`{restore}`, or give another run"
        )
    tags = dict(found.data.tags)
    if "evalframe.compare.baseline" in tags:
        raise ConfigError(
            f"{role}={run_id} is a comparison logged by evalframe compare (of "
            f"{tags.get('evalframe.compare.candidate')} against {tags['evalframe.compare.baseline']}): "
            "it holds the figures, not the items; give one of the runs it compared"
        )
    if role == "baseline" and tags.get("evalframe.sweep") == "true":
        best = f" (the best: {tags['evalframe.sweep.best']})" if "evalframe.sweep.best" in tags else ""
        # Each job of a sweep is paired with one baseline; a sweep as baseline would leave open which
        # of its jobs every candidate is measured against.
        raise ConfigError(
            f"baseline={run_id} is a sweep's parent run: it holds no items, only its jobs' runs, and a "
            "baseline must be one run whose items each candidate is paired with: give one of its jobs"
            f"{best}, or compare each job with a baseline run by giving the sweep as candidate={run_id}"
        )
    return tags


def _items(uri: str, role: str, run_id: str, scratch: Path) -> tuple[str, list[ItemResult]]:
    """A run's experiment and items, or a ConfigError naming which side is wrong."""
    try:
        logged = fetch_run(uri, run_id, scratch / run_id)
    except ConfigError as e:
        raise ConfigError(f"{role}={run_id}: {e}") from None
    return logged.experiment_id, read_items(logged.results_file)


def run(argv: list[str]) -> int:
    args = _arguments(argv)
    uri = args.get("tracking.uri") or _default("uri")
    # Within seconds, where MLflow would take minutes, and before anything is printed or written.
    check_store(uri, WRITES)
    experiment = args.get("experiment") or _default("experiment")
    for role in ("baseline", "candidate"):  # last, last~1, the start of a name -> the run's id
        args[role] = resolve(uri, experiment, args[role], role)
    output_dir = Path(args.get("output_dir") or Path("outputs", datetime.now().strftime("%Y-%m-%d/%H-%M-%S")))
    baseline_id = args["baseline"]
    comparisons: list[Comparison] = []
    _checked(uri, "baseline", baseline_id)
    sweep = _checked(uri, "candidate", args["candidate"]).get("evalframe.sweep") == "true"
    with tempfile.TemporaryDirectory(prefix="evalframe-compare-") as scratch:
        experiment_id, baseline = _items(uri, "baseline", baseline_id, Path(scratch))
        jobs = sweep_children(uri, args["candidate"]) if sweep else []
        if sweep:
            if not jobs:
                raise ConfigError(
                    f"candidate={args['candidate']} is a sweep's parent run with no job runs in MLflow "
                    "(none was logged, or they were deleted): there is nothing to compare"
                )
            print(
                f"candidate {args['candidate']} is a sweep: comparing each of its {len(jobs)} jobs",
                file=sys.stderr,
            )
        for candidate_id in jobs or [args["candidate"]]:
            _, candidate = _items(uri, "candidate", candidate_id, Path(scratch))
            found = compare(baseline_id, baseline, candidate_id, candidate)
            if not found.paired or not found.scorers:
                what = "no item id" if not found.paired else "no scorer"
                raise ConfigError(
                    f"baseline {baseline_id} and candidate {candidate_id} have {what} in common "
                    f"({len(baseline)} and {len(candidate)} items): compare two runs of the same dataset "
                    "with a scorer both ran"
                )
            comparisons.append(found)
    for found in comparisons:
        report.comparison(found)
    written = compare_html.write_compare_report(output_dir, comparisons)
    print(f"compare.html: {written[0]}")
    code = EXIT_OK
    for found in comparisons:
        try:
            run_id = log_comparison(uri, experiment_id, found, written)
            print(f"logged to MLflow at {display_uri(uri)} as run {run_id}")
        except Exception as e:  # the comparison is printed and on disk; say what is missing
            print(
                f"error: could not log the comparison to MLflow ({type(e).__name__}: {str(e)[:300]})",
                file=sys.stderr,
            )
            code = EXIT_TRACKING
    worse = [f.candidate for f in comparisons if f.worse]
    if worse:
        print(f"candidate {', '.join(worse)} is significantly worse than the baseline (exit code 1)")
        return EXIT_GATE_FAILED
    return code


def main(argv: list[str]) -> int:
    """The command's exit code; a user error is one line on stderr, never a traceback."""
    return answered(run, argv)
