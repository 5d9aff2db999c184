"""Memory and time of reading an MLflow experiment's traces as rows (dataset=mlflow_traces).

    python bench/bench_traces.py                         # 1,000 and 10,000 traces
    python bench/bench_traces.py --store /tmp/traces.db  # keep the seeded store and reuse it next time
    python bench/bench_traces.py --versus-mlflow         # evalframe beside mlflow.genai.evaluate

Seeds N traces of the tests' traced RAG app (tests/traced_app.py: a root span, a RETRIEVER span with
three documents, a TOOL span for some questions) into a fresh SQLite store through MLflow's public
tracing API, then, each in a subprocess of its own, for every size:

- `read`: the reader alone, the rows read twice as a run reads them (validate, then score);
- `run`: `python -m evalframe dataset=mlflow_traces scorer=tool_call_accuracy` end to end (process
  start to exit, the run logged to the same store), expected calls mapped to the made ones so that
  no judge is needed.

Prints wall time and peak resident memory (the child's own ru_maxrss, from wait4) at each size and
page size. Figures, not pass/fail: memory should stay flat while the traces grow tenfold.

`--versus-mlflow` answers issue 24's question instead: N traces (1,000 by default), each with an
`expected_response` expectation (the answer for two traces in three, another text for the third), and
then, on two copies of that store so that neither sees the other's verdicts, each in a process of its own
timed from start to exit:

- `evalframe`: `python -m evalframe dataset=mlflow_traces scorer=exact_match` (no model call), the run
  logged and one feedback written back onto every trace;
- `mlflow`: `mlflow.genai.evaluate(data=mlflow.search_traces(...), scorers=[a trivial @scorer])`, which
  also logs a run and one feedback per trace.

Both are checked afterwards (one feedback on each trace), then the two times and their ratio are printed
(the issue's goal: evalframe at most a quarter of MLflow's time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "bench-rag-app"

SEED = """
import sys, mlflow
from tests import traced_app
mlflow.set_tracking_uri(sys.argv[1])
mlflow.set_experiment(sys.argv[2])
expect = len(sys.argv) > 4
for i in range(int(sys.argv[3])):
    question = traced_app.QUESTIONS[i % len(traced_app.QUESTIONS)]
    try:
        answer = traced_app.answer(f"{question} (asked {i} times)")
    except ValueError:
        continue
    if i % 200 == 199:  # MLflow's export queue drops the spans of traces beyond its size
        mlflow.flush_trace_async_logging()
    if expect:  # a reviewer's expected answer: the app's own for two traces in three
        expected = answer if i % 3 else "No idea."
        trace_id = mlflow.get_last_active_trace_id()
        mlflow.log_expectation(trace_id=trace_id, name="expected_response", value=expected)
mlflow.flush_trace_async_logging()
"""

# MLflow's own way: its traces as a DataFrame, a trivial scorer, one evaluation run.
MLFLOW_EVALUATE = """
import sys, mlflow
from mlflow.genai.scorers import scorer
mlflow.set_tracking_uri(sys.argv[1])
experiment = mlflow.set_experiment(sys.argv[2])

@scorer
def matches(outputs, expectations):
    return outputs == (expectations or {}).get("expected_response")

traces = mlflow.search_traces(locations=[experiment.experiment_id], max_results=int(sys.argv[3]))
assert len(traces) == int(sys.argv[3]), len(traces)
mlflow.genai.evaluate(data=traces, scorers=[matches])
"""

# Afterwards, untimed: how many traces carry a feedback of that name.
JUDGED = """
import sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
experiment = mlflow.get_experiment_by_name(sys.argv[2])
traces = mlflow.search_traces(
    locations=[experiment.experiment_id], max_results=100_000, return_type="list", include_spans=False
)
print(sum(any(a.name == sys.argv[3] for a in t.info.assessments) for t in traces))
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


def run(command: list[str], cwd: Path, **more: str) -> tuple[float, float, int, str]:
    """(seconds, peak RSS in MiB, exit code, output) of one child process (`more`: its variables)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **more}
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


def seed(uri: str, traces: int, work: Path, expect: bool = False) -> None:
    command = [sys.executable, "-c", SEED, uri, EXPERIMENT, str(traces), *(["expect"] if expect else [])]
    # Synchronous export: an expectation is logged onto a trace that must already be in the store.
    more = {"MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "false"} if expect else {}
    seconds, _, code, out = run(command, work, **more)
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
    parser.add_argument("--versus-mlflow", action="store_true", help="exact_match beside genai.evaluate")
    parser.add_argument("extra", nargs="*", help="more overrides for the runs, e.g. keep_items=1000")
    args = parser.parse_args()
    if args.versus_mlflow:
        versus_mlflow(args.traces[0], args.store, args.extra)  # 1,000 by default
        return
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


def versus_mlflow(traces: int, keep: Path | None, extra: list[str]) -> None:
    """evalframe's exact_match run and mlflow.genai.evaluate, each on its own copy of the same store."""
    with tempfile.TemporaryDirectory(prefix="evalframe-versus-") as tmp:
        work = Path(tmp)
        store = (keep or work / "traces.db").resolve()
        if not store.exists():
            seed(f"sqlite:///{store}", traces, work, expect=True)
        timed = {}
        for who in ("evalframe", "mlflow"):
            copy = work / f"{who}.db"
            shutil.copyfile(store, copy)
            uri = f"sqlite:///{copy}"
            if who == "evalframe":
                command = [
                    *(sys.executable, "-m", "evalframe", "dataset=mlflow_traces"),
                    *(f"dataset.experiment={EXPERIMENT}", f"dataset.limit={traces}", "scorer=exact_match"),
                    *(f"tracking.uri={uri}", "cache.mode=off", f"hydra.run.dir={work / 'run'}", *extra),
                ]
                name = "exact_match"
            else:
                command, name = (
                    [sys.executable, "-c", MLFLOW_EVALUATE, uri, EXPERIMENT, str(traces)],
                    "matches",
                )
            seconds, peak, code, out = run(command, work)
            if code != 0:
                sys.exit(f"{who} exited {code}:\n{out[-3000:]}")
            judged = run([sys.executable, "-c", JUDGED, uri, EXPERIMENT, name], work)[3].split()[-1]
            if int(judged) != traces:
                sys.exit(f"{who}: {judged} of {traces} traces got a {name} feedback\n{out[-3000:]}")
            timed[who] = seconds
            print(f"{who:>9}: {traces} traces judged, feedback written: {seconds:.1f} s, {peak:.0f} MiB")
        print(
            f"evalframe / mlflow.genai.evaluate: {timed['evalframe'] / timed['mlflow']:.2f} (goal: <= 0.25)"
        )
        print(f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def report(what: str, traces: int, page: int, seconds: float, peak: float, code: int, out: str) -> None:
    if code != 0:
        print(out[-3000:], file=sys.stderr)
    print(
        f"{what:>5} {traces:>7} {page:>5} {seconds:>7.1f} {traces / seconds:>9.0f} {peak:>13.0f} {code:>4}",
        flush=True,
    )


if __name__ == "__main__":
    main()
