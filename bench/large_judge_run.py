"""Peak memory and rows/s of a large judge-only run: recorded outputs, one LLM judge, MLflow on SQLite.

    python bench/large_judge_run.py                          # 100,000 rows (~10 min on 2 cores)
    python bench/large_judge_run.py --rows 10000 20000 --code /tmp/old-checkout   # another checkout
    python bench/large_judge_run.py --rows 100000 -- -m shards=2 hydra/launcher=joblib  # more after --

Generates an N-row JSONL dataset (bench/memory.py's distinct question/answer texts), starts the fake
judge (tests/testserver.py as a constrained decoder: every reply valid, in its own process) and runs
`python -m evalframe dataset=jsonl target=dataset scorer=factuality model.api_base=...` in a subprocess,
tracking on a fresh SQLite MLflow store, uncached. Prints the wall time, rows/s, the peak resident
memory of the largest of the evaluation's processes (wait4's ru_maxrss of the child: its own and the
processes it waited for, such as joblib's workers; the judge server is not counted) and the peak of its
whole process tree's proportional set size, sampled every 0.2 s (`shards=2` runs its shards in worker
processes: what the machine gives the evaluation is their sum; shared library pages counted once).
Figures, not pass/fail: no test times this.

Measured 2026-11-27, one run after another on 2 cores with little else running (load ~1), 100,000 rows:
    overrides after --                      before (5dbbff8)           after
    (none: MLflow on SQLite)                604 MiB (594), 606 rows/s  509 MiB (501), 610 rows/s
    tracking=none                           458 MiB (423), 705 rows/s  347 MiB (339), 709 rows/s
    -m shards=2 hydra/launcher=joblib       590 MiB (1,365), 679 rows/s 497 MiB (1,188), 719 rows/s
    -m shards=2 ... tracking=none                                      344 MiB (842), 903 rows/s
(largest process's peak RSS; in brackets the process tree's summed PSS). After: the bootstrap's
smaller batches (results/intervals.py) and no litellm in a sharded run's own process. What is left
is the libraries: litellm, mlflow with pandas and pyarrow, its SQLite store, scipy.stats and
matplotlib take 407 MiB imported into a bare Python.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import dataset

from bench import judge_server

ROOT = Path(__file__).resolve().parents[1]


def _tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc's parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, []))
    return found


def _pss(pid: int) -> int:
    """A process's proportional set size in KiB (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _sample_tree(root: int, peak: list[int], done: threading.Event) -> None:
    """Keep in peak[0] the largest summed PSS (KiB) of root's process tree until `done` (not by
    polling the child: that would reap it before wait4 reads its peak)."""
    while not done.wait(0.2):
        peak[0] = max(peak[0], sum(_pss(pid) for pid in _tree(root)))


def measure(
    code: Path, data: Path, work: Path, base: str, extra: list[str]
) -> tuple[float, float, float, int]:
    """Run one evaluation; returns (seconds, its largest process's peak RSS, its process tree's peak
    PSS, both in MiB, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("MLFLOW_TRACKING_URI", None)
    multirun = [arg for arg in extra if arg in ("-m", "--multirun")]  # Hydra takes it before overrides
    command = [
        *(
            sys.executable,
            "-m",
            "evalframe",
            *multirun,
            "dataset=jsonl",
            f"dataset.path={data}",
            "target=dataset",
        ),
        *("scorer=factuality", "model=gpt", f"model.api_base={base}/v1", "concurrency=32"),
        *("tracking=mlflow", f"tracking.uri=sqlite:///{work / 'mlflow.db'}", "max_judgments=null"),
        *("cache.mode=off", f"hydra.run.dir={work / 'run'}", *(a for a in extra if a not in multirun)),
    ]
    started = time.perf_counter()
    with (work / "log.txt").open("w") as log:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        tree, done = [0], threading.Event()
        sampler = threading.Thread(target=_sample_tree, args=(proc.pid, tree, done), daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the largest peak of the child and its children
        done.set()
        sampler.join()
    seconds = time.perf_counter() - started
    return seconds, usage.ru_maxrss / 1024, tree[0] / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--latency", type=float, default=0.0, help="the judge's seconds per request")
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="the evalframe checkout to run (default: this one)"
    )
    parser.add_argument("extra", nargs="*", help="more overrides, e.g. window=500")
    args = parser.parse_args()
    print(
        f"{'rows':>8} {'wall s':>8} {'rows/s':>7} {'peak RSS MiB':>13} {'tree PSS MiB':>13} exit"
        f"   code: {args.code}"
    )
    # the constrained decoder: every reply a random valid instance of the request's schema, seeded
    with judge_server(args.latency, extra=["--constrained", "--seed", "7"], responder=None) as base:
        for rows in args.rows:
            with tempfile.TemporaryDirectory(prefix="evalframe-large-") as tmp:
                work = Path(tmp)
                data = work / "data.jsonl"
                dataset(data, rows)
                seconds, peak, tree, code = measure(args.code.resolve(), data, work, base, args.extra)
                if code != 0:
                    print((work / "log.txt").read_text()[-3000:], file=sys.stderr)
                print(
                    f"{rows:>8} {seconds:>8.1f} {rows / seconds:>7.0f} {peak:>13.0f} {tree:>13.0f} {code:>4}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
