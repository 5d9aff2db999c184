"""Peak memory and rows/s of a large judge-only run: recorded outputs, one LLM judge, MLflow on SQLite.

    python bench/large_judge_run.py                          # 100,000 rows (~10 min on 2 cores)
    python bench/large_judge_run.py --rows 10000 20000 --code /tmp/old-checkout   # another checkout
    python bench/large_judge_run.py --rows 100000 -- shards=2     # more overrides after --

Generates an N-row JSONL dataset (bench/memory.py's distinct question/answer texts), starts the fake
judge (tests/testserver.py as a constrained decoder: every reply valid, in its own process) and runs
`python -m evalframe dataset=jsonl target=dataset scorer=factuality model.api_base=...` in a subprocess,
tracking on a fresh SQLite MLflow store, uncached. Prints the wall time, rows/s and the child's peak
resident memory (its own ru_maxrss, from wait4: the judge server is not counted). Figures, not
pass/fail: no test times this.

Measured 2026-11-27 (2 cores shared with other work, load 6-12; both 100,000-row runs side by side):
    rows      before (main dcd1d84)         after (branch flat)
    2,000     517 MiB, 103 s                506 MiB, 101 s
    100,000   642 MiB, 1,381 s (72 rows/s)  518 MiB, 1,267 s (79 rows/s)
About 430 MiB of the peak are the libraries a logged run has loaded (litellm 164, mlflow with
SQLAlchemy and alembic ~115, scipy 72, matplotlib 27 MiB, measured one import at a time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import dataset

from bench import judge_server

ROOT = Path(__file__).resolve().parents[1]


def measure(code: Path, data: Path, work: Path, base: str, extra: list[str]) -> tuple[float, float, int]:
    """Run one evaluation; returns (seconds, peak RSS in MiB, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [
        *(sys.executable, "-m", "evalframe", "dataset=jsonl", f"dataset.path={data}", "target=dataset"),
        *("scorer=factuality", "model=gpt", f"model.api_base={base}/v1", "concurrency=32"),
        *("tracking=mlflow", f"tracking.uri=sqlite:///{work / 'mlflow.db'}", "max_judgments=null"),
        *("cache.mode=off", f"hydra.run.dir={work / 'run'}", *extra),
    ]
    started = time.perf_counter()
    with (work / "log.txt").open("w") as log:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not its children's
    seconds = time.perf_counter() - started
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


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
    print(f"{'rows':>8} {'wall s':>8} {'rows/s':>7} {'peak RSS MiB':>13} exit   code: {args.code}")
    # the constrained decoder: every reply a random valid instance of the request's schema, seeded
    with judge_server(args.latency, extra=["--constrained", "--seed", "7"], responder=None) as base:
        for rows in args.rows:
            with tempfile.TemporaryDirectory(prefix="evalframe-large-") as tmp:
                work = Path(tmp)
                data = work / "data.jsonl"
                dataset(data, rows)
                seconds, peak, code = measure(args.code.resolve(), data, work, base, args.extra)
                if code != 0:
                    print((work / "log.txt").read_text()[-3000:], file=sys.stderr)
                print(f"{rows:>8} {seconds:>8.1f} {rows / seconds:>7.0f} {peak:>13.0f} {code:>4}", flush=True)


if __name__ == "__main__":
    main()
