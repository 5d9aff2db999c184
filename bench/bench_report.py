"""What people see, timed: building report.html for a large run, and logging MLflow traces per item.

    python bench/bench_report.py                 # 10,000 items, 2 scorers; 200 traces on SQLite
    python bench/bench_report.py --items 2000 --traces 50

Prints figures, not pass/fail (the tests assert counts and behaviour, never seconds).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evalframe.report import html as html_report  # noqa: E402
from evalframe.results.run_result import RunResult  # noqa: E402
from evalframe.results.scores import ItemResult, ScoreResult  # noqa: E402

SCORERS = ("answer_similarity", "semantic_similarity")
TEXT = "the capital of france is paris water boils at one hundred degrees celsius sea level"
WORDS = TEXT.split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def synthetic_run(n: int, seed: int = 0) -> RunResult:
    """n items with question/answer/reference texts of realistic length and one unscored in 50."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        scores = {}
        for name in SCORERS:
            if rng.random() < 0.02:
                scores[name] = ScoreResult.unscored("judge reply invalid after 3 attempts")
            else:
                score = round(rng.random(), 2)
                scores[name] = ScoreResult(score=score, reason=f"Score {score}: " + sentence(rng, 25))
        items.append(
            ItemResult(
                id=f"item-{i}",
                input=sentence(rng, 12) + "?",
                ground_truth=sentence(rng, 20),
                output=sentence(rng, 30),
                scores=scores,
            )
        )
    return RunResult(items=items, scorers=list(SCORERS))


def bench_report(n: int) -> None:
    result = synthetic_run(n)
    with tempfile.TemporaryDirectory() as tmp:
        html_report.run_report(synthetic_run(10), "warm-up")  # matplotlib's import and font cache
        for cap in (html_report.MAX_TABLE_ITEMS, n):
            start = time.perf_counter()
            written = html_report.write_run_report(result, Path(tmp), "bench", max_items=cap)
            seconds = time.perf_counter() - start
            size = (Path(tmp) / html_report.REPORT).stat().st_size
            print(
                f"report.html for {n} items, {len(SCORERS)} scorers, table capped at {cap}: "
                f"{seconds:.2f} s, {size / 1e6:.1f} MB, {len(written) - 1} PNGs"
            )


def bench_traces(n: int) -> None:
    import mlflow

    from evalframe.tracking import traces

    result = synthetic_run(n, seed=1)
    config = {"scorers": {name: {"model": {"name": "openai/gpt-4o-mini"}} for name in SCORERS}}
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
        mlflow.set_experiment("bench")
        with mlflow.start_run():
            traces.log_traces(synthetic_run(3, seed=2), config, None)  # warm-up: store, exporter
            start = time.perf_counter()
            traces.log_traces(result, config, None)
            seconds = time.perf_counter() - start
    per_item = seconds / n * 1000
    print(
        f"MLflow traces on SQLite: {n} items ({len(SCORERS)} feedbacks + 1 expectation each) in "
        f"{seconds:.1f} s = {per_item:.0f} ms per item; "
        f"tracking.max_traces={traces.MAX_TRACES} adds about {per_item * traces.MAX_TRACES / 1000:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000, help="items in the report (default 10000)")
    parser.add_argument("--traces", type=int, default=200, help="items traced to SQLite (default 200)")
    args = parser.parse_args()
    bench_report(args.items)
    if args.traces > 0:
        bench_traces(args.traces)


if __name__ == "__main__":
    main()
