"""Time and memory of a live RAG function handing over its contexts, and of `dataset=run` judging that
run's items again, against a function returning a plain string.

    python bench/live_and_earlier.py                    # 10,000 and 50,000 rows (a few minutes on 2 cores)
    python bench/live_and_earlier.py --rows 2000

Three runs of `python -m evalframe` per size, each in a subprocess scored by token_f1 (no MLflow, no
judge, so the figures are evalframe's own work):
  string   target=python, the function returns the answer as a string;
  mapping  target=python, it returns {output, contexts (3), context_ids (3), tool_calls (1)}
           (target.provides=[contexts,context_ids]);
  rerun    dataset=run dataset.path=<the mapping run's directory>: its results.jsonl read back, a
           line at a time, twice.
It prints wall time and the child's peak resident memory (wait4's ru_maxrss). Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

APP = """
def plain(question):
    return "The answer to " + question


def rag(question):
    n = int(question.split()[-1])
    ids = [f"doc-{(n + k) % 997}" for k in range(3)]
    return {
        "output": "The answer to " + question,
        "contexts": [f"Document {i} says something about question {n}." for i in ids],
        "context_ids": ids,
        "tool_calls": [{"name": "search", "arguments": {"query": question, "k": 3}}],
    }
"""


def dataset(path: Path, rows: int) -> None:
    with path.open("w", encoding="utf-8") as f:
        for n in range(rows):
            record = {
                "id": f"q{n}",
                "input": f"What is the fact number {n}",
                "ground_truth": f"The answer to what is the fact number {n}",
                "reference_context_ids": [f"doc-{n % 997}"],
            }
            f.write(json.dumps(record) + "\n")


def measure(work: Path, name: str, args: list[str]) -> tuple[float, float, int]:
    """One run in `work`/name; (seconds, peak RSS in MiB, exit code)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)])}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "evalframe", *args, "tracking=none", f"hydra.run.dir={work / name}"]
    started = time.perf_counter()
    with (work / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - started, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 50_000])
    rows_list = parser.parse_args().rows
    scorers = "scorer=token_f1"  # the same for the three: the difference is the handing over and reading back
    print(f"{'rows':>8} {'run':>8} {'wall s':>8} {'rows/s':>7} {'peak RSS MiB':>13} exit")
    for rows in rows_list:
        with tempfile.TemporaryDirectory(prefix="evalframe-live-") as tmp:
            work = Path(tmp)
            (work / "app.py").write_text(APP)
            dataset(work / "data.jsonl", rows)
            data = ["dataset=jsonl", f"dataset.path={work / 'data.jsonl'}"]
            runs = {
                "string": [*data, "target=python", "target.fn=app:plain", scorers],
                "mapping": [
                    *data,
                    "target=python",
                    "target.fn=app:rag",
                    "target.provides=[contexts,context_ids]",
                    scorers,
                ],
                "rerun": ["dataset=run", f"dataset.path={work / 'mapping'}", scorers],
            }
            for name, args in runs.items():
                seconds, peak, code = measure(work, name, args)
                if code != 0:
                    print((work / f"{name}.log").read_text()[-3000:], file=sys.stderr)
                print(
                    f"{rows:>8} {name:>8} {seconds:>8.1f} {rows / seconds:>7.0f} {peak:>13.0f} {code:>4}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
