"""Memory and time of reading an MLflow experiment's traces as rows (dataset=mlflow_traces).

    python bench/bench_traces.py                         # 1,000 and 10,000 traces
    python bench/bench_traces.py --store /tmp/traces.db  # keep the seeded store and reuse it next time

Seeds N traces of the tests' traced RAG app (tests/traced_app.py: a root span, a RETRIEVER span with
three documents, a TOOL span for some questions) into a fresh SQLite store through MLflow's public
tracing API, then, each in a subprocess of its own, for every size:

- `read`: the reader alone, the rows read twice as a run reads them (validate, then score);
- `run`: `python -m evalframe dataset=mlflow_traces scorer=tool_call_accuracy` end to end (process
  start to exit, the run logged to the same store), expected calls mapped to the made ones so that
  no judge is needed.

Prints wall time and peak resident memory (the child's own ru_maxrss, from wait4) at each size and
page size. Figures, not pass/fail: memory should stay flat while the traces grow tenfold.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "bench-rag-app"

SEED = """
import sys
from tests import traced_app
traced_app.ask(sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""

READ = """
import sys
from evalframe.run import sources
cfg = {"format": "mlflow_traces", "experiment": sys.argv[2], "status": None, "limit": int(sys.argv[3]),
       "page_size": int(sys.argv[4]), "columns": {"id": "trace_id", "input": "root.inputs",
       "output": "root.outputs", "contexts": "span:RETRIEVER[-1].outputs", "tool_calls": "span:TOOL[*]"}}
rows = sources.rows(cfg, {"uri": sys.argv[1]})
for _ in range(2):  # validate, then score: the pipeline reads its rows twice
    count = sum(1 for _ in rows)
assert count == int(sys.argv[3]), count
"""


def run(command: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """(seconds, peak RSS in MiB, exit code, output) of one child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("MLFLOW_TRACKING_URI", None)
    started = time.perf_counter()
    log = cwd / "log.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return (
        time.perf_counter() - started,
        usage.ru_maxrss / 1024,
        os.waitstatus_to_exitcode(status),
        log.read_text(),
    )


def seed(uri: str, traces: int, work: Path) -> None:
    seconds, _, code, out = run([sys.executable, "-c", SEED, uri, EXPERIMENT, str(traces)], work)
    if code != 0:
        sys.exit(out[-3000:])
    print(f"seeded {traces} traces in {seconds:.0f} s ({traces / seconds:.0f}/s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--pages", type=int, nargs="+", default=[100], help="dataset.page_size values")
    parser.add_argument("--store", type=Path, help="the SQLite file to seed (kept, and reused if there)")
    parser.add_argument("--what", nargs="+", choices=["read", "run"], default=["read", "run"])
    parser.add_argument("extra", nargs="*", help="more overrides for the runs, e.g. keep_items=1000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalframe-traces-") as tmp:
        work = Path(tmp)
        store = (args.store or work / "traces.db").resolve()
        uri = f"sqlite:///{store}"
        if not store.exists():
            seed(uri, max(args.traces), work)
        print(
            f"{'what':>5} {'traces':>7} {'page':>5} {'wall s':>7} {'traces/s':>9} {'peak RSS MiB':>13} exit"
        )
        for traces in args.traces:
            for page in args.pages if "read" in args.what else []:
                read = [sys.executable, "-c", READ, uri, EXPERIMENT, str(traces), str(page)]
                report("read", traces, page, *run(read, work))
            if "run" not in args.what:
                continue
            evaluate = [
                *(
                    sys.executable,
                    "-m",
                    "evalframe",
                    "dataset=mlflow_traces",
                    f"dataset.experiment={EXPERIMENT}",
                ),
                *("dataset.status=null", f"dataset.limit={traces}", "scorer=tool_call_accuracy"),
                "dataset.columns.expected_tool_calls='span:TOOL[*]'",  # no judge, no expectation needed
                *(f"tracking.uri={uri}", "cache.mode=off", f"hydra.run.dir={work / 'run'}", *args.extra),
            ]
            report("run", traces, 100, *run(evaluate, work))


def report(what: str, traces: int, page: int, seconds: float, peak: float, code: int, out: str) -> None:
    if code != 0:
        print(out[-3000:], file=sys.stderr)
    print(
        f"{what:>5} {traces:>7} {page:>5} {seconds:>7.1f} {traces / seconds:>9.0f} {peak:>13.0f} {code:>4}",
        flush=True,
    )


if __name__ == "__main__":
    main()
