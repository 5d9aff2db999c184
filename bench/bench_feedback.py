"""Verdicts written back onto traces, timed: feedbacks per second into an SQLite MLflow store.

    python bench/bench_feedback.py                  # 1,000 traces, 3 feedbacks each, 1 and 4 writers
    python bench/bench_feedback.py --traces 200 --workers 1 2 4 8

Seeds the traces of the tests' traced RAG app (tests/traced_app.py: a root span, a RETRIEVER span with
ranked documents, TOOL spans for some questions), reads them back as a run does (dataset=mlflow_traces),
then writes two scorers' verdicts from a results.jsonl the way a run does
(evalframe.tracking.feedback.write_back: a feedback per scorer on the trace, the per-chunk verdicts on
the RETRIEVER span, the run linked to every trace 100 at a time), once per number of writers, each
into a fresh copy of the seeded store; beside it, MLflow's own `mlflow.log_feedback` in a loop.
Prints figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
# Seeding exports each trace as it ends: MLflow's background queue drops traces made faster than it drains.
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")

from evalframe.config.compose import compose, resolve  # noqa: E402
from evalframe.data.rows import Row  # noqa: E402
from evalframe.results.journal import Journal  # noqa: E402
from evalframe.results.scores import ItemResult, ScoreResult  # noqa: E402
from evalframe.run import sources  # noqa: E402
from evalframe.tracking import feedback  # noqa: E402
from tests import traced_app  # noqa: E402

EXPERIMENT = traced_app.EXPERIMENT

DIGESTS = {"context_precision": "c" * 16, "exact_match": "e" * 16}
CONFIG_SCORERS = {"context_precision": {"model": {"name": "openai/gpt-4o-mini"}}, "exact_match": {}}


def seeded(folder: Path, traces: int) -> Path:
    start = time.perf_counter()
    traced_app.ask(f"sqlite:///{folder / 'seed.db'}", EXPERIMENT, traces)
    print(f"seeded {traces} traces in {time.perf_counter() - start:.1f} s (not timed below)")
    return folder / "seed.db"


def read(uri: str) -> list[Row]:
    """The store's traces as the rows of dataset=mlflow_traces (the reader a run uses)."""
    cfg = resolve(compose(["dataset=mlflow_traces", f"dataset.experiment={EXPERIMENT}"]))
    return list(iter(sources.rows(cfg["dataset"], {"uri": uri})))


def results_file(folder: Path, uri: str) -> Path:
    """results.jsonl of a run that judged every trace with a ranking judge and a no-call scorer."""
    journal = Journal(folder / "run")
    rows = read(uri)
    journal.start({}, len(rows))
    for row in rows:
        chunks = [{"reason": "it says so", "verdict": "relevant"} for _ in row.contexts or []]
        scores = {
            "context_precision": ScoreResult(
                1.0, "Score 1.00: every chunk relevant.", details={"verdicts": chunks}
            ),
            "exact_match": ScoreResult(1.0, "the same text"),
        }
        journal.append(
            ItemResult(
                row.id,
                row.input,
                row.ground_truth,
                row.output or "",
                scores=scores,
                record=dict(row.extra),
                trace_id=row.trace_id,
                retriever_span_id=row.retriever_span_id,
            )
        )
    journal.finish()
    return journal.path


def bench_write_back(seed: Path, folder: Path, workers: int) -> None:
    from mlflow.tracking import MlflowClient

    db = folder / f"w{workers}.db"
    shutil.copy(seed, db)
    uri = f"sqlite:///{db}"
    results = results_file(folder / f"w{workers}", uri)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    run = client.create_run(experiment.experiment_id)
    config = {"scorers": CONFIG_SCORERS, "tracking": {"uri": uri}}
    feedback.WORKERS = workers
    notes: list[str] = []
    start = time.perf_counter()
    tally = feedback.write_back(results, config, run.info.run_id, DIGESTS, notes)
    seconds = time.perf_counter() - start
    assert tally is not None and tally.failed == 0, notes
    print(
        f"write_back, {workers} writer(s): {tally.written} feedbacks on {tally.traces} traces, "
        f"{tally.linked} linked, in {seconds:.2f} s = {tally.written / seconds:.0f} feedbacks/s"
    )


def bench_log_feedback(seed: Path, folder: Path) -> None:
    import mlflow

    from evalframe.tracking.store import fluent_store

    db = folder / "plain.db"
    shutil.copy(seed, db)
    uri = f"sqlite:///{db}"
    ids = [row.trace_id for row in read(uri)]
    with fluent_store(uri):
        start = time.perf_counter()
        for trace_id in ids:
            mlflow.log_feedback(trace_id=trace_id, name="exact_match", value=1.0, rationale="the same text")
        seconds = time.perf_counter() - start
    print(
        f"mlflow.log_feedback in a loop: {len(ids)} feedbacks in {seconds:.2f} s = {len(ids) / seconds:.0f}/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="evalframe-bench-feedback-"))
    try:
        seed = seeded(folder, args.traces)
        for workers in args.workers:
            bench_write_back(seed, folder, workers)
        bench_log_feedback(seed, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
