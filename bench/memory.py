"""Memory and time of large recorded-output runs with semantic_similarity (local MiniLM embeddings).

    python bench/memory.py                          # 10,000 and 100,000 rows (~15 min on 2 cores)
    python bench/memory.py --rows 10000 --code /tmp/old-checkout   # the same with another checkout

Generates an N-row JSONL dataset of distinct, varied question/answer texts (word lists combined, so
almost no two texts are the same and the embedding cache inside a run cannot shortcut), runs
`python -m evalframe dataset=jsonl dataset.path=... scorer=semantic_similarity` in a subprocess with
MLflow on a fresh SQLite file, and prints its wall time and peak resident memory (the child's own
ru_maxrss, from wait4). Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUBJECTS = [
    "the river delta",
    "the old lighthouse",
    "a migrating stork",
    "the city council",
    "the night train",
    "a glacier",
    "the village baker",
    "an orbiting telescope",
    "the harbour crane",
    "a desert fox",
    "the chess club",
    "a copper mine",
    "the school choir",
    "a coral reef",
    "the museum curator",
    "an oak forest",
    "the weather balloon",
    "a tea plantation",
    "the fire brigade",
    "a mountain pass",
    "the print shop",
    "a wind farm",
    "the ferry captain",
    "an apple orchard",
]
VERBS = [
    "was rebuilt in",
    "flooded during",
    "was first mapped in",
    "expanded rapidly after",
    "closed briefly in",
    "was photographed in",
    "doubled its output in",
    "was renamed in",
    "lost its funding in",
    "reopened in",
    "was surveyed in",
    "moved north in",
]
SEASONS = ("spring", "summer", "autumn", "winter", "the dry season", "the monsoon", "a heatwave", "a storm")
YEARS = range(1850, 2025)
REASONS = [
    "because of heavy rain",
    "after a public vote",
    "despite strong protests",
    "thanks to a private donor",
    "following a long drought",
    "under a new director",
    "as part of a regional plan",
    "to attract more visitors",
    "after an engineering survey",
    "when the old road was closed",
]


def fact(rng: random.Random) -> tuple[str, str]:
    """A question and its answer about one invented fact."""
    subject, verb = rng.choice(SUBJECTS), rng.choice(VERBS)
    when = f"{rng.choice(SEASONS)} {rng.choice(YEARS)}"
    answer = f"{subject.capitalize()} {verb} {when}, {rng.choice(REASONS)}."
    return f"What happened to {subject}, and when?", answer


def perturb(answer: str, rng: random.Random) -> str:
    """A recorded output: the answer, a paraphrase, a wrong year, a cut-short or an off-topic one."""
    kind = rng.random()
    if kind < 0.3:
        return answer
    if kind < 0.5:
        return f"As far as I know, {answer[0].lower()}{answer[1:]}"
    if kind < 0.7:
        return re.sub(r"\b\d{4}\b", str(rng.choice(YEARS)), answer)  # a wrong year
    if kind < 0.85:
        return answer.split(",")[0] + "."
    return fact(rng)[1]


def dataset(path: Path, rows: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            question, answer = fact(rng)
            record = {
                "id": f"q{i}",
                "input": question,
                "ground_truth": answer,
                "output": perturb(answer, rng),
            }
            f.write(json.dumps(record) + "\n")


def measure(code: Path, data: Path, work: Path, extra: list[str]) -> tuple[float, float, int]:
    """Run one evaluation; returns (seconds, peak RSS in MiB, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [
        *(sys.executable, "-m", "evalframe", "dataset=jsonl", f"dataset.path={data}"),
        *("scorer=semantic_similarity", "tracking=mlflow", f"tracking.uri=sqlite:///{work / 'mlflow.db'}"),
        *("cache.mode=off", f"hydra.run.dir={work / 'run'}", *extra),
    ]
    started = time.perf_counter()
    log = (work / "log.txt").open("w")
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest of all children
    seconds = time.perf_counter() - started
    log.close()
    return seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="the evalframe checkout to run (default: this one)"
    )
    parser.add_argument("extra", nargs="*", help="more overrides, e.g. window=500")
    args = parser.parse_args()
    print(f"{'rows':>8} {'wall s':>8} {'rows/s':>7} {'peak RSS MiB':>13} exit   code: {args.code}")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(prefix="evalframe-memory-") as tmp:
            work = Path(tmp)
            data = work / "data.jsonl"
            dataset(data, rows)
            seconds, peak, code = measure(args.code.resolve(), data, work, args.extra)
            if code != 0:
                print((work / "log.txt").read_text()[-3000:], file=sys.stderr)
            print(f"{rows:>8} {seconds:>8.1f} {rows / seconds:>7.0f} {peak:>13.0f} {code:>4}", flush=True)


if __name__ == "__main__":
    main()
