"""Judge calls per item and unscored items, per judge scorer, on the bundled sample against the local
test server as a constrained decoder (every reply a random instance of the schema it was sent).

    python bench/constrained_judges.py                      # this checkout
    python bench/constrained_judges.py --checkout /tmp/main # another checkout (e.g. before a change)

The servers always come from this checkout (tests/testserver.py --constrained, one per scorer); the
evaluations run from --checkout, one after another in one process through `evalframe.cli.main` (the
command's own function), each with a fresh judge cache.
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
from typing import Any

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


# The evaluations, one after another in one process from the checkout: `evalframe.cli.main(argv)` is the
# command a user runs, without paying the imports six times. A checkout from before the CLI was a
# function runs `python -m evalframe` per case instead.
RUNNER = """
import json, os, subprocess, sys
try:
    from evalframe.cli import main
except ImportError:
    main = None
codes = []
for case in json.loads(sys.argv[1]):
    os.chdir(case["cwd"])
    os.environ["EVALFRAME_CACHE_DIR"] = case["cache"]
    if main is None:
        codes.append(subprocess.run([sys.executable, "-m", "evalframe", *case["args"]]).returncode)
    else:
        codes.append(main(case["args"]))
with open(sys.argv[2], "w") as out:
    json.dump(codes, out)
"""


def judge(seed: int) -> tuple[subprocess.Popen[str], str]:
    """A constrained-decoder judge server of its own (seeded: the same replies for every checkout)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.testserver", "--constrained", "--seed", str(seed)],
        cwd=HERE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().split()[4]


def measure(checkout: Path, seed: int, work: Path) -> dict[str, dict[str, float]]:
    """Every case against a judge server of its own, with a fresh judge cache: {case: figures}."""
    servers = {name: judge(seed) for name in CASES}
    try:
        cases: list[dict[str, Any]] = []
        for name, overrides in CASES.items():
            folder = work / str(len(cases))
            folder.mkdir()
            run = [
                f"model.api_base={servers[name][1]}/v1",
                "tracking=none",
                f"hydra.run.dir={folder / 'run'}",
            ]
            cases.append(
                {"args": [*overrides, "model=gpt", *run], "cwd": str(folder), "cache": str(folder / "cache")}
            )
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        codes_file = work / "codes.json"
        runner = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(cases), str(codes_file)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if not codes_file.exists():
            raise SystemExit(f"the evaluations stopped (exit {runner.returncode}):\n{runner.stderr[-3000:]}")
        codes = json.loads(codes_file.read_text())
        stats = {}
        for name, (_, base) in servers.items():
            with urllib.request.urlopen(f"{base}/_stats") as response:
                stats[name] = json.load(response)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait()
    figures = {}
    for name, case, code in zip(CASES, cases, codes, strict=True):
        lines = (Path(case["cwd"]) / "run" / "results.jsonl").read_text().splitlines()
        items = [json.loads(line) for line in lines]
        unscored = sum(r["score"] is None for item in items for r in item["scores"].values())
        figures[name] = {
            "items": len(items),
            "calls": stats[name]["requests"],
            "retries": stats[name]["followups"],
            "unscored": unscored,
            "exit": code,
        }
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=HERE, help="the evalframe checkout to run")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    print(f"checkout {args.checkout.resolve()}, seed {args.seed}")
    columns = ("items", 5), ("calls", 6), ("calls/item", 10), ("retries", 7), ("unscored", 8), ("exit", 4)
    print(f"{'scorer':26} " + " ".join(f"{name:>{width}}" for name, width in columns))
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure(args.checkout.resolve(), args.seed, Path(tmp))
    for name, m in figures.items():
        per_item = m["calls"] / m["items"] if m["items"] else float("nan")
        print(
            f"{name:26} {m['items']:>5} {m['calls']:>6} {per_item:>10.2f} {m['retries']:>7} "
            f"{m['unscored']:>8} {m['exit']:>4}"
        )


if __name__ == "__main__":
    main()
