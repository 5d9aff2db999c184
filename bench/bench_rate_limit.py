"""Rate limits: a judge limited to N requests per second (tests/testserver.py's rate-limit mode, in its
own process), and what a run against it costs: 429s, requests sent before their Retry-After, unscored
items and the wall time against the bound set by the limit itself.

    python bench/bench_rate_limit.py           # all three: (a) concurrency 32, (b) model.rpm, (c) sweep
    python bench/bench_rate_limit.py --skip sweep --rows 100

(a) 200 rows, answer_similarity, concurrency 32 against 40 requests/s: target 0 unscored, <= 10% of
    requests answered 429, none sent before its Retry-After, wall <= 1.25 x (answered / 40 + overhead),
    where overhead is the time before the first request and after the last one.
(b) the same with model.rpm=2400 (40/s): target <= 1% answered 429.
(c) a 4-job joblib sweep needing new judge calls (one temperature per job) with model.rpm set: the
    most requests the server saw in any second, against the budget's 1 s share.
Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

from bench import compose, judge_args, judge_server, server_stats, synthetic_dataset


def limited_server(per_second: int, latency: float) -> AbstractContextManager[str]:
    """The fake judge limited to `per_second` requests a second (then 429 with Retry-After)."""
    return judge_server(latency, extra=("--rate-limit", f"{per_second}/1"))


def busiest_second(arrivals: list[float], seconds: float = 1.0) -> int:
    """The most requests that arrived within any one second (or `seconds`: a sliding window)."""
    times = sorted(arrivals)
    return max((bisect.bisect_left(times, t + seconds) - i for i, t in enumerate(times)), default=0)


def bench_run(label: str, base: str, work: Path, rows: int, per_second: int, *extra: str) -> None:
    from evalframe.models import loader
    from evalframe.run import pipeline

    loader.lib()  # importing litellm is not the run
    data = synthetic_dataset(work / f"{label}.jsonl", rows)
    config = compose(judge_args(base, data, 32, *extra))
    before = server_stats(base)
    started = time.monotonic()  # CLOCK_MONOTONIC: the server's clock too, on one machine
    with contextlib.redirect_stdout(io.StringIO()):
        result, _ = pipeline.evaluate(config, work / label)
    ended = time.monotonic()
    after = server_stats(base)
    arrivals = after["arrivals"][len(before["arrivals"]) :]
    answered = after["requests"] - before["requests"]
    limited = after["rate_limited"] - before["rate_limited"]
    early = after["early"] - before["early"]
    sent = answered + limited
    unscored = result.summaries["answer_similarity"].unscored
    overhead = (arrivals[0] - started) + (ended - arrivals[-1]) if arrivals else 0.0
    bound = answered / per_second + overhead
    wall = ended - started
    print(
        f"({label}) {rows} rows, concurrency 32, {' '.join(extra) or 'no budget'}, server {per_second}/s: "
        f"{unscored} unscored; {limited} of {sent} requests answered 429 "
        f"({100 * limited / max(sent, 1):.1f}%); "
        f"{early} sent before their Retry-After; busiest second {busiest_second(arrivals)} requests; "
        f"wall {wall:.1f} s vs bound {bound:.1f} s ({answered} answered / {per_second} + "
        f"{overhead:.1f} s overhead) = {wall / bound:.2f} (target <= 1.25); "
        f"in the summary: {getattr(result.stats, 'rate_limited', 'n/a')} rate limited, "
        f"{getattr(result.stats, 'rate_wait', math.nan):.1f} s waiting"
    )


def bench_sweep(base: str, work: Path, rows: int, rpm: int, jobs: int = 4) -> None:
    data = synthetic_dataset(work / "sweep.jsonl", rows)
    temperatures = ",".join(f"0.{i}" for i in range(jobs))  # in the cache key: every job asks anew
    args = [
        "-m",
        *judge_args(base, data, 8, f"model.rpm={rpm}"),
        f"model.temperature={temperatures}",
        "hydra/launcher=joblib",
        f"hydra.launcher.n_jobs={jobs}",
    ]
    (work / "sweep").mkdir()
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    before = server_stats(base)
    started = time.monotonic()
    command = [sys.executable, "-m", "evalframe", *args]
    subprocess.run(command, cwd=work / "sweep", env=env, check=True, capture_output=True)
    wall = time.monotonic() - started
    after = server_stats(base)
    arrivals = after["arrivals"][len(before["arrivals"]) :]
    span = arrivals[-1] - arrivals[0]
    per_second = rpm / 60
    print(
        f"(c) {jobs}-job joblib sweep, {rows} rows each, model.rpm={rpm} ({per_second:g}/s for all jobs): "
        f"{len(arrivals)} requests in {span:.1f} s = {len(arrivals) / span:.1f}/s on average; busiest second "
        f"{busiest_second(arrivals)} requests = {busiest_second(arrivals) / per_second:.2f} x the budget "
        f"(target <= 1), busiest 10 s {busiest_second(arrivals, 10) / (10 * per_second):.2f} x; "
        f"{after['rate_limited'] - before['rate_limited']} answered 429; wall {wall:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--per-second", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sweep-rows", type=int, default=40)
    parser.add_argument("--skip", nargs="*", default=[], choices=["limit", "rpm", "sweep"])
    args = parser.parse_args()
    print(f"rate-limit benchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp, limited_server(args.per_second, args.latency) as base:
        work = Path(tmp)
        os.environ["EVALFRAME_CACHE_DIR"] = str(work / "cache")
        if "limit" not in args.skip:
            bench_run("a", base, work, args.rows, args.per_second)
        if "rpm" not in args.skip:
            bench_run("b", base, work, args.rows, args.per_second, f"model.rpm={args.per_second * 60}")
        if "sweep" not in args.skip:
            # A budget below the server's limit: the server then never refuses, and what it saw is
            # what the jobs together sent.
            bench_sweep(base, work, args.sweep_rows, rpm=args.per_second * 60 // 2)


if __name__ == "__main__":
    main()
