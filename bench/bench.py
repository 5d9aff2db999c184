"""evalframe benchmark: prints the figures the performance targets are stated in, measured in one run.

    python bench/bench.py            # everything (about two minutes on 2 cores)
    python bench/bench.py --items 100 --skip embeddings

A fake OpenAI-compatible judge runs in its own process (so it does not share our GIL) with a fixed
latency per request. Figures, not pass/fail: the tests assert call counts, never seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evalframe.paths import CONF_DIR, SAMPLE_DATASET  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def judge_server(latency: float) -> Iterator[str]:
    """The fake judge (tests/fake_judge.py) in a subprocess; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.testserver",
            "--port",
            str(port),
            "--latency",
            str(latency),
            "--responder",
            "tests.fake_judge:judge",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "fake LLM server at ..." once it listens
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def requests_served(base: str) -> int:
    with urllib.request.urlopen(f"{base}/_stats") as response:
        return int(json.load(response)["requests"])


def synthetic_dataset(path: Path, n: int, variant: str = "") -> Path:
    """n rows built from the sample's rows with a non-empty output, each made unique (no sharing)."""
    rows = [json.loads(line) for line in SAMPLE_DATASET.read_text().splitlines()]
    rows = [r for r in rows if isinstance(r["output"], str) and r["output"].strip()]
    with path.open("w") as f:
        for i in range(n):
            r = rows[i % len(rows)]
            truth = r["ground_truth"] if isinstance(r["ground_truth"], str) else json.dumps(r["ground_truth"])
            f.write(
                json.dumps(
                    {
                        "id": str(i),
                        "input": r["input"],
                        "ground_truth": f"{truth} Case {i}.",
                        "output": f"{r['output']} Case {i}.{variant}",
                    }
                )
                + "\n"
            )
    return path


def compose(overrides: list[str]) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def evaluate(overrides: list[str], out: Path) -> float:
    """One in-process run (console output silenced); returns wall seconds."""
    import contextlib
    import io

    from evalframe import llm, pipeline

    llm.lib()  # importing litellm (~4 s) is start-up, not the run: (e) measures start-up

    config = compose(overrides)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        pipeline.evaluate(config, out)
    return time.perf_counter() - started


def bench_throughput(base: str, work: Path, items: int, latency: float, concurrency: int) -> None:
    data = synthetic_dataset(work / "a.jsonl", items)
    before = requests_served(base)
    seconds = evaluate(
        [
            "scorer=answer_similarity",
            "model=gpt",
            f"model.api_base={base}/v1",
            "tracking=none",
            "cache.mode=off",
            "dataset=jsonl",
            f"dataset.path={data}",
            f"concurrency={concurrency}",
        ],
        work / "a",
    )
    calls = requests_served(base) - before
    limit = calls * latency / concurrency
    print(
        f"(a) {items}-item answer_similarity, {latency * 1000:.0f} ms latency, concurrency {concurrency}: "
        f"{seconds:.2f} s for {calls} calls; limit {limit:.2f} s; "
        f"ratio {seconds / limit:.3f} (target <= 1.15)"
    )


def bench_cache(base: str, work: Path, items: int) -> None:
    cache = work / "cache"
    common = [
        "scorer=answer_similarity",
        "model=gpt",
        f"model.api_base={base}/v1",
        "tracking=none",
        "dataset=jsonl",
        f"cache.dir={cache}",
        "concurrency=32",
    ]
    first_data = synthetic_dataset(work / "b1.jsonl", items)
    new_target = synthetic_dataset(work / "b2.jsonl", items, variant=" (new target)")
    before = requests_served(base)
    evaluate([*common, f"dataset.path={first_data}"], work / "b1")
    first = requests_served(base) - before
    evaluate([*common, f"dataset.path={new_target}"], work / "b2")
    rerun = requests_served(base) - before - first
    print(
        f"(b) judge calls per item: first run {first / items:.2f}, re-run with a new target "
        f"{rerun / items:.2f} (target <= 2)"
    )


def bench_sweep(base: str, work: Path) -> None:
    env = {**os.environ, "EVALFRAME_CACHE_DIR": str(work / "sweep-cache")}
    common = ["scorer=answer_similarity", "model=gpt", f"model.api_base={base}/v1", "tracking=none"]

    def cli(args: list[str], cwd: Path) -> tuple[int, float]:
        cwd.mkdir()
        before = requests_served(base)
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "evalframe", *args], cwd=cwd, env=env, check=True, capture_output=True
        )
        return requests_served(base) - before, time.perf_counter() - started

    one_calls, one_time = cli(common, work / "one")
    env["EVALFRAME_CACHE_DIR"] = str(work / "sweep-cache-2")
    sweep_calls, sweep_time = cli(
        ["-m", *common, "penalties.missing=0.05,0.15,0.3", "penalties.contradiction=0.5,1.0,1.5"],
        work / "sweep",
    )
    print(
        f"(c) 9-point penalty sweep over the sample: {sweep_calls} judge calls vs {one_calls} for one run "
        f"= {sweep_calls / one_calls:.2f} (target 1.0); wall {sweep_time:.1f} s vs {one_time:.1f} s "
        f"= {sweep_time / one_time:.2f}x"
    )


def bench_logging(work: Path, n: int = 10_000) -> None:
    from evalframe import tracking
    from evalframe.results import ItemResult, RunResult, ScoreResult, StepResult, Usage

    step = StepResult(
        step="analyze",
        messages=[{"role": "user", "content": "prompt " * 50}],
        reply={"units": ["a", "b"]},
        raw='{"units": ["a", "b"]}',
        usage=Usage(100, 20, 0.0001),
    )
    items = [
        ItemResult(
            id=str(i),
            input=f"question {i}",
            ground_truth=f"truth {i}",
            output=f"output {i}",
            scores={"answer_similarity": ScoreResult(0.5, f"reason {i}", [step], {"n": i})},
        )
        for i in range(n)
    ]
    result = RunResult(items=items, scorers=["answer_similarity"])
    import mlflow

    uri = f"sqlite:///{work / 'log.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("bench")  # creating the database (~2 s of migrations) is not logging
    from evalframe.journal import Journal

    started = time.perf_counter()
    journal = Journal(work / "logged")
    journal.start({}, n)
    for item in items:
        journal.append(item)
    journal.finish()
    saved, on_disk = journal.path, time.perf_counter() - started
    started = time.perf_counter()
    # The table, artifacts and report; the per-item traces (200 by default, 45-70 ms each on SQLite)
    # are timed apart by bench/bench_report.py.
    config = compose(["tracking.traces=false"])
    tracking.log_run(
        result, config, uri=uri, experiment="bench", run_name="bench", tags={}, results_file=saved
    )
    print(
        f"(d) logging {n:,} item results to MLflow (SQLite, traces off): "
        f"{time.perf_counter() - started:.2f} s (target <= 2); "
        f"writing them to results.jsonl first: {on_disk:.2f} s"
    )


def bench_help(repeat: int = 5) -> None:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "evalframe", "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    print(
        f"(e) python -m evalframe --help: median {statistics.median(times):.2f} s of {repeat} "
        f"(min {min(times):.2f}) (target <= 1.5)"
    )


def bench_embeddings(pairs: int = 1000) -> None:
    from evalframe.context import Context
    from evalframe.data import Row
    from evalframe.scorers.semantic_similarity import SemanticSimilarity

    rows = [json.loads(line) for line in SAMPLE_DATASET.read_text().splitlines()]
    items = [
        (
            Row(
                id=str(i), input="", ground_truth=f"{rows[i % len(rows)]['input']} ({i})", output=None, line=i
            ),
            f"{rows[i % len(rows)]['output']} ({i})",
        )
        for i in range(pairs)
    ]
    scorer = SemanticSimilarity()
    started = time.perf_counter()
    asyncio.run(scorer.score(items[:2], Context(limiter=asyncio.Semaphore(8))))
    load = time.perf_counter() - started
    started = time.perf_counter()
    asyncio.run(scorer.score(items, Context(limiter=asyncio.Semaphore(8))))
    seconds = time.perf_counter() - started
    print(
        f"(f) local all-MiniLM-L6-v2: {pairs / seconds:.0f} pairs/s for {pairs} pairs "
        f"({2 * pairs / seconds:.0f} texts/s; model load {load:.1f} s, not counted) (target >= 400)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["throughput", "cache", "sweep", "logging", "help", "embeddings"],
    )
    args = parser.parse_args()
    print(f"evalframe benchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["EVALFRAME_CACHE_DIR"] = str(work / "default-cache")
        with judge_server(args.latency) as base:
            if "throughput" not in args.skip:
                bench_throughput(base, work, args.items, args.latency, args.concurrency)
            if "cache" not in args.skip:
                bench_cache(base, work, args.items)
            if "sweep" not in args.skip:
                bench_sweep(base, work)
        if "logging" not in args.skip:
            bench_logging(work)
        if "help" not in args.skip:
            bench_help()
        if "embeddings" not in args.skip:
            bench_embeddings()


if __name__ == "__main__":
    main()
