"""Judge calls per item and unscored items, per judge scorer, on the bundled sample against the local
test server as a constrained decoder (every reply a random instance of the schema it was sent).

    python bench/constrained_judges.py                      # this checkout
    python bench/constrained_judges.py --checkout /tmp/main # another checkout (e.g. before a change)

The server always comes from this checkout (tests/testserver.py --constrained); `python -m evalframe`
runs from --checkout, as a user runs it, with a fresh judge cache per scorer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CASES = {  # name -> overrides
    "answer_similarity": ["scorer=answer_similarity"],
    "answer_relevancy": ["scorer=answer_relevancy"],
    "ground_truth_similarity": ["scorer=ground_truth_similarity"],
    "factuality (choice)": ["scorer=factuality"],
    "judge (number)": [
        "scorer=factuality",
        "~scorers.factuality.output",
        "+scorers.factuality.output={type:number,min:1,max:5}",
    ],
    "judge (verdicts)": [
        "scorer=factuality",
        "~scorers.factuality.output",
        "+scorers.factuality.output={type:verdicts,verdicts:{yes:1.0,no:0.0,unsure:0.5}}",
    ],
}


def measure(checkout: Path, overrides: list[str], seed: int, work: Path) -> dict[str, float]:
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.testserver", "--constrained", "--seed", str(seed)],
        cwd=HERE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = server.stdout.readline().split()[4]
        env = {**os.environ, "PYTHONPATH": str(checkout), "EVALFRAME_CACHE_DIR": str(work / "cache")}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalframe",
                *overrides,
                "model=gpt",
                f"model.api_base={base}/v1",
                "tracking=none",
                f"hydra.run.dir={work / 'run'}",
            ],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        with urllib.request.urlopen(f"{base}/_stats") as response:
            stats = json.load(response)
    finally:
        server.terminate()
        server.wait()
    items = [json.loads(line) for line in (work / "run" / "results.jsonl").read_text().splitlines()]
    unscored = sum(r["score"] is None for item in items for r in item["scores"].values())
    return {
        "items": len(items),
        "calls": stats["requests"],
        "retries": stats["followups"],
        "unscored": unscored,
        "exit": run.returncode,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=HERE, help="the evalframe checkout to run")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    print(f"checkout {args.checkout.resolve()}, seed {args.seed}")
    columns = ("items", 5), ("calls", 6), ("calls/item", 10), ("retries", 7), ("unscored", 8), ("exit", 4)
    print(f"{'scorer':26} " + " ".join(f"{name:>{width}}" for name, width in columns))
    for name, overrides in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            m = measure(args.checkout.resolve(), overrides, args.seed, Path(tmp))
        per_item = m["calls"] / m["items"] if m["items"] else float("nan")
        print(
            f"{name:26} {m['items']:>5} {m['calls']:>6} {per_item:>10.2f} {m['retries']:>7} "
            f"{m['unscored']:>8} {m['exit']:>4}"
        )


if __name__ == "__main__":
    main()
