"""Time and memory of reading MLflow sessions as conversation items (dataset=mlflow_traces
dataset.sessions=true).

    python bench/bench_sessions.py                 # 50 and 200 sessions of 4 turns (200 and 800 traces)
    python bench/bench_sessions.py --sessions 100 --turns 8

Seeds the sessions into a fresh SQLite store through MLflow's public tracing API (`@mlflow.trace`, a
RETRIEVER span per turn, `mlflow.update_current_trace(session_id=...)`), the sessions' turns interleaved
(turn 1 of every session, then turn 2, ...), then reads them as a run does, the rows streamed and not
kept, and prints the wall time, the store searches made and the peak memory Python allocated while
reading (tracemalloc). Figures, not pass/fail: the memory should follow one session, not the store.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlflow
from mlflow.entities import Document


@mlflow.trace(span_type="RETRIEVER")
def _retrieve(query: str) -> list[Document]:
    return [
        Document(page_content=f"document {i} about {query}", metadata={"doc_uri": f"kb://{i}"})
        for i in range(3)
    ]


@mlflow.trace
def _reply(message: str, session: str) -> str:
    _retrieve(message)
    mlflow.update_current_trace(session_id=session)
    return f"an answer to {message}"


def seed(uri: str, sessions: int, turns: int) -> None:
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("chats")
    for turn in range(turns):
        for s in range(sessions):
            _reply(f"question {turn} of session {s}", f"session-{s}")
        mlflow.flush_trace_async_logging()  # MLflow's export queue drops traces beyond its size


def read(uri: str, page_size: int) -> tuple[int, int, float, int]:
    """(sessions read, turns, seconds, peak bytes allocated while reading), rows not kept."""
    from mlflow.tracking import MlflowClient

    from evalframe.config.compose import compose
    from evalframe.run import sources

    cfg = compose(
        [
            "dataset=mlflow_traces",
            "dataset.experiment=chats",
            "dataset.sessions=true",
            "dataset.columns.input=root.inputs.message",
            f"dataset.page_size={page_size}",
        ]
    )
    dataset = {str(k): v for k, v in dict(cfg.dataset).items()}
    searches = [0]
    real = MlflowClient.search_traces

    def counted(self: MlflowClient, *args: object, **kwargs: object) -> object:
        searches[0] += 1
        return real(self, *args, **kwargs)

    MlflowClient.search_traces = counted  # type: ignore[method-assign]
    start = time.perf_counter()
    count = turns = 0
    for row in sources.rows(dataset, {"uri": uri}):  # timed without tracemalloc, which slows Python
        count += 1
        turns += len(row.messages or ())
    seconds = time.perf_counter() - start
    MlflowClient.search_traces = real  # type: ignore[method-assign]
    print(f"    {searches[0]} searches", end="")
    tracemalloc.start()
    for _ in sources.rows(dataset, {"uri": uri}):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return count, turns, seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="*", default=[50, 200])
    parser.add_argument("--turns", type=int, default=4)
    args = parser.parse_args()
    for sessions in args.sessions:
        folder = tempfile.mkdtemp(prefix="evalframe-bench-sessions-")
        uri = f"sqlite:///{folder}/mlflow.db"
        start = time.perf_counter()
        seed(uri, sessions, args.turns)
        print(f"{sessions} sessions x {args.turns} turns seeded in {time.perf_counter() - start:.1f} s")
        try:
            for page_size in (100, 10):
                count, turns, seconds, peak = read(uri, page_size)
                print(
                    f"; page_size={page_size}: {count} sessions ({turns} messages) read in {seconds:.2f} s "
                    f"({1000 * seconds / max(count, 1):.1f} ms a session), peak {peak / 2**20:.1f} MiB"
                )
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
