"""`evaluate` and `evaluate_async`: a run from Python, through the command line's own pipeline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalframe.scorers.base import Scorer
    from evalframe.targets.base import Target

from evalframe.api.arguments import Prepared, prepare
from evalframe.api.evaluation import Evaluation


def _run(prepared: Prepared) -> Evaluation:
    from evalframe.errors import EXIT_INTERRUPTED
    from evalframe.report import console as report
    from evalframe.run import completion, pipeline

    report.quiet_libraries()
    try:
        with report.silenced(not prepared.verbose):  # code prints what it wants: str(result), .summary()
            resume_from, given = prepared.resume_from, prepared.given
            if resume_from is not None and completion.finished(resume_from):  # killed in its write-back
                result, code = completion.complete(resume_from)
            else:
                config, output_dir, overrides = prepared.config, prepared.output_dir, prepared.overrides
                result, code = pipeline.evaluate(config, output_dir, resume_from, overrides, given)
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:  # the CLI's Ctrl-C exit; in code it is what it was
            raise KeyboardInterrupt from None
        raise
    return Evaluation(result, prepared.config, prepared.resume_from or prepared.output_dir, code)


def evaluate(
    data: Any,
    scorers: str | Scorer | Iterable[str | Scorer] | Mapping[str, Mapping[str, Any] | Scorer],
    target: Callable[..., Any] | str | Target | None = None,
    *,
    model: str | Mapping[str, Any] | None = None,
    penalties: str | Mapping[str, Any] | None = None,
    columns: Mapping[str, str | None] | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    tracking: bool | str = False,
    experiment: str | None = None,
    run_name: str | None = None,
    dataset_name: str | None = None,
    output_dir: str | Path | None = None,
    cache: str = "readwrite",
    reason: str | None = None,
    resume: bool | str | Path | None = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> Evaluation:
    """Evaluate `target` on `data` with `scorers`; the same run as `python -m evalframe ...`.

    data: a list of dicts, a pandas DataFrame, a .jsonl/.csv path, or None for the config's dataset
        (the bundled sample, or `overrides=["dataset=..."]`); `columns` maps your column names
        ({"input": "question"}), `limit` keeps the first N rows.
    scorers: "answer_similarity", a list of names and Scorer objects, or {name: {option: value}}.
    target: a function `input -> answer` (sync or async), "module:function", a Target object
        (evalframe.targets.HTTPTarget, PythonTarget(fn, pass_row=True), ...), or None for the outputs
        recorded in the data's `output` column.
    model: the judge: a preset ("gpt", "claude", ...), a LiteLLM model string, or a dict of settings.
    penalties: a preset ("strict") or a dict of weights over the defaults.
    tracking: False (default: results on disk only), True (MLflow at $MLFLOW_TRACKING_URI, else
        ./mlflow.db), or a tracking URI.
    output_dir: where results.jsonl and run.json go (default outputs/DATE/TIME, as the CLI).
    resume: a run directory (or True: the newest unfinished run like this one under outputs/) to finish.
    overrides: any other CLI override, e.g. ["max_unscored_rate=0.2", "scorers.answer_similarity.scale=10"].
    verbose: print the progress bar and summary as the CLI does (default: print nothing; `print(result)`).

    Works where an event loop is already running (Jupyter, async tests): the run then goes to a worker
    thread. In async code, `await evaluate_async(...)` keeps your loop free and runs an async target on it.
    """
    prepared = prepare(**locals())  # first statement: locals() are exactly the arguments
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(prepared)
    return _on_a_worker_thread(prepared)


def _on_a_worker_thread(prepared: Prepared) -> Evaluation:
    """A loop is running in this thread (a notebook cell, an async test) and asyncio cannot nest
    loops: run on a worker thread with its own loop, and wait for it."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evalframe")
    try:
        return pool.submit(_run, prepared).result()
    except KeyboardInterrupt:
        # A thread cannot be stopped from outside: say so rather than hang until it is done.
        print(
            f"interrupted: the run goes on in the background until it finishes, journaling into "
            f"{prepared.resume_from or prepared.output_dir}",
            file=sys.stderr,
        )
        raise
    finally:
        pool.shutdown(wait=False)


async def evaluate_async(
    data: Any,
    scorers: str | Scorer | Iterable[str | Scorer] | Mapping[str, Mapping[str, Any] | Scorer],
    target: Callable[..., Any] | str | Target | None = None,
    *,
    model: str | Mapping[str, Any] | None = None,
    penalties: str | Mapping[str, Any] | None = None,
    columns: Mapping[str, str | None] | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    tracking: bool | str = False,
    experiment: str | None = None,
    run_name: str | None = None,
    dataset_name: str | None = None,
    output_dir: str | Path | None = None,
    cache: str = "readwrite",
    reason: str | None = None,
    resume: bool | str | Path | None = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> Evaluation:
    """`evaluate` for async code (same arguments): the run works on a worker thread while your loop
    stays free, and an async target function runs on your loop, where its clients and pools live."""
    prepared = prepare(**locals())  # first statement: locals() are exactly the arguments
    from evalframe.targets.python import PythonTarget

    if isinstance(prepared.given.target, PythonTarget):
        prepared.given.target.run_on(asyncio.get_running_loop())
    return await asyncio.to_thread(_run, prepared)
