"""evalframe benchmark: prints the figures the performance targets are stated in, measured in one run.

    python bench/bench.py            # everything (about fifteen minutes on 2 cores)
    python bench/bench.py --items 100 --skip embeddings
    python bench/bench.py --only start process batch --before /tmp/old-checkout   # side by side
    python bench/bench.py --only cpu --before /tmp/old-checkout   # client CPU per judge call, 3 runs each
    python bench/bench.py --only start process cpu --ragas /tmp/ragas/bin/python   # beside RAGAS

A fake OpenAI-compatible judge runs in its own process (so it does not share our GIL) with a fixed
latency per request. Figures, not pass/fail: the tests assert call counts, never seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
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
def judge_server(
    latency: float,
    batch_delay: float = 0.0,
    extra: Sequence[str] = (),
    responder: str | None = "tests.fake_judge:judge",
) -> Iterator[str]:
    """The fake judge (tests/fake_judge.py; `responder=None`: the server's own, e.g. `--constrained`
    among `extra`) in a subprocess, with the test server's `extra` options (e.g. --rate-limit 40/1);
    yields its base URL."""
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
            *(("--responder", responder) if responder else ()),
            "--batch-delay",
            str(batch_delay),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # a client closing a keep-alive connection is not news
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "fake LLM server at ..." once it listens
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def server_stats(base: str) -> dict:
    with urllib.request.urlopen(f"{base}/_stats") as response:
        return dict(json.load(response))


def requests_served(base: str) -> int:
    return int(server_stats(base)["requests"])


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
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def evaluate(overrides: list[str], out: Path) -> float:
    """One in-process run (console output silenced); returns wall seconds."""
    import contextlib
    import io

    from evalframe.models import loader
    from evalframe.run import pipeline

    loader.lib()  # importing litellm (~4 s) is start-up, not the run: (e) measures start-up

    config = compose(overrides)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        pipeline.evaluate(config, out)
    return time.perf_counter() - started


def judge_args(base: str, data: Path, concurrency: int, *extra: str) -> list[str]:
    """The command line of an answer-similarity run of `data` against the fake judge at `base`,
    uncached, with `concurrency` requests in flight."""
    return [
        "scorer=answer_similarity",
        "model=gpt",
        f"model.api_base={base}/v1",
        "tracking=none",
        "cache.mode=off",
        "dataset=jsonl",
        f"dataset.path={data}",
        f"concurrency={concurrency}",
        *extra,
    ]


def bench_throughput(base: str, work: Path, items: int, latency: float, concurrency: int) -> None:
    data = synthetic_dataset(work / "a.jsonl", items)
    before = requests_served(base)
    seconds = evaluate(
        judge_args(base, data, concurrency),
        work / "a",
    )
    calls = requests_served(base) - before
    limit = calls * latency / concurrency
    print(
        f"(a) {items}-item answer_similarity, {latency * 1000:.0f} ms latency, concurrency {concurrency}: "
        f"{seconds:.2f} s for {calls} calls; limit {limit:.2f} s; "
        f"ratio {seconds / limit:.3f} (target <= 1.15)"
    )


def cli_run(code: Path, args: list[str], cwd: Path, env: dict[str, str]) -> float:
    """`python -m evalframe ARGS` with the checkout `code`; returns the wall seconds of the process."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "evalframe", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(code)},
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def import_seconds(module: str, env: dict[str, str], python: str = sys.executable) -> float:
    """Seconds from starting `python -c "import MODULE"` to the import's end (the interpreter's exit
    not counted)."""
    started = time.time()
    done = subprocess.run(
        [python, "-c", f"import time, {module}; print(repr(time.time()))"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.split()[-1]) - started


def bench_start(codes: dict[str, Path], work: Path, repeat: int = 3) -> None:
    """(g) Time from process start to the first model request (the server notes its arrival), beside
    the import of litellm alone timed the same way in the same run (alternating with the runs)."""
    for name, code in codes.items():
        times, imports = [], []
        for i in range(repeat):
            # with the price map bundled, as evalframe's loader has it
            imports.append(import_seconds("litellm", {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}))
            with judge_server(0.2) as base:
                cwd = work / f"start-{name}-{i}"
                cwd.mkdir()
                env = {**os.environ, "EVALFRAME_CACHE_DIR": str(cwd / "cache")}
                started = time.time()
                args = ["scorer=answer_similarity", "model=gpt", f"model.api_base={base}/v1"]
                cli_run(code, args, cwd, env)
                times.append(server_stats(base)["first"] - started)
        first, alone = statistics.median(times), statistics.median(imports)
        # Each run beside the import timed just before it: the machine's load shifts both alike.
        over = statistics.median(t - i for t, i in zip(times, imports, strict=True))
        print(
            f"(g) first model request after process start [{name}]: median {first:.2f} s of {repeat} "
            f"({', '.join(f'{t:.2f}' for t in times)}); `import litellm` alone: median {alone:.2f} s "
            f"({', '.join(f'{t:.2f}' for t in imports)}); "
            f"first request - import, run by run: median {over:+.2f} s (target <= +0.30)"
        )


def bench_process(codes: dict[str, Path], work: Path, items: int, latency: float) -> None:
    """(h) Whole process (start-up, run, report) / limit at 8 and 32 in flight, fresh cache, and the time
    from the last item journaled to the process's exit (aggregates, console, report.html and plots)."""
    data = synthetic_dataset(work / "process.jsonl", items)
    with judge_server(latency) as base:
        for concurrency in (8, 32):
            for name, code in codes.items():
                cwd = work / f"process-{name}-{concurrency}"
                cwd.mkdir()
                before = requests_served(base)
                seconds = cli_run(code, judge_args(base, data, concurrency), cwd, dict(os.environ))
                ended = time.time()
                calls = requests_served(base) - before
                limit = calls * latency / concurrency
                [journal] = cwd.glob("outputs/*/*/results.jsonl")
                tail = ended - journal.stat().st_mtime
                print(
                    f"(h) {items} items, {concurrency} in flight, {latency * 1000:.0f} ms [{name}]: "
                    f"whole process {seconds:.2f} s for {calls} calls, limit {limit:.2f} s, "
                    f"ratio {seconds / limit:.3f} "
                    f"(target <= {1.05 if concurrency == 8 else 1.10}); last item to exit {tail:.2f} s "
                    "(report target <= 0.2)"
                )


# The child of (k): `python -m evalframe ARGS` with the process CPU spent while the run's event loop runs
# (time.process_time() around uvloop.run / asyncio.run, which only flow.run_async calls) written to the
# file named by BENCH_LOOP_CPU at exit. Patching the event loop's entry leaves evalframe's imports as
# they are.
CPU_CHILD = """
import asyncio, atexit, os, runpy, time
spent = []
def timed(real):
    def run(*args, **kwargs):
        started = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.process_time() - started)
    return run
try:
    import uvloop
    uvloop.run = timed(uvloop.run)
except ImportError:
    pass
asyncio.run = timed(asyncio.run)
def write():  # at exit: evalframe's entry() runs the atexit handlers, then os._exit
    with open(os.environ["BENCH_LOOP_CPU"], "w") as f:
        f.write(repr(sum(spent)))
atexit.register(write)
runpy.run_module("evalframe", run_name="__main__", alter_sys=True)
"""


def bench_cpu(codes: dict[str, Path], work: Path, items: int, latency: float, repeat: int = 3) -> None:
    """(k) Client CPU per judge call: the process's user+sys CPU seconds (getrusage of the child) and the
    CPU inside the evaluation loop, each divided by the calls the judge served; the 500-row, 32-in-flight
    run of (h), each checkout `repeat` times, alternating. The target is RAGAS's on the same judge
    (--ragas; 6.47 ms per call, 5.06 ms inside its loop, RAGAS 0.4.3, measured 2026-11-27)."""
    data = synthetic_dataset(work / "cpu.jsonl", items)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in codes}
    with judge_server(latency) as base:
        for i in range(repeat):
            for name, code in codes.items():
                cwd = work / f"cpu-{name}-{i}"
                cwd.mkdir()
                loop_file = cwd / "loop-cpu"
                env = {**os.environ, "PYTHONPATH": str(code), "BENCH_LOOP_CPU": str(loop_file)}
                before, used = requests_served(base), resource.getrusage(resource.RUSAGE_CHILDREN)
                subprocess.run(
                    [sys.executable, "-c", CPU_CHILD, *judge_args(base, data, 32)],
                    cwd=cwd,
                    env=env,
                    check=True,
                    capture_output=True,
                )
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                calls = requests_served(base) - before
                whole = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
                loop = float(loop_file.read_text())
                figures[name].append((whole / calls * 1000, loop / calls * 1000))
                print(
                    f"(k) client CPU per judge call [{name}, run {i + 1}]: {whole / calls * 1000:.2f} ms "
                    f"whole process, {loop / calls * 1000:.2f} ms inside the evaluation loop "
                    f"({whole:.2f} s, {loop:.2f} s for {calls} calls)"
                )
    medians = {
        name: (statistics.median(w for w, _ in runs), statistics.median(lo for _, lo in runs))
        for name, runs in figures.items()
    }
    for name, (whole_ms, loop_ms) in medians.items():
        print(
            f"(k) client CPU per judge call [{name}]: median {whole_ms:.2f} ms whole process, "
            f"{loop_ms:.2f} ms inside the loop, of {repeat} runs (target: RAGAS's, --ragas)"
        )
    if "before" in medians:
        (this_whole, this_loop), (whole, loop) = medians["this"], medians["before"]
        print(
            f"(k) this / before: {this_whole / whole:.3f} whole process, "
            f"{this_loop / loop:.3f} inside the loop"
        )


def bench_batch(work: Path, items: int) -> None:
    """(i) model.batch=true: requests sent as normal calls vs in batches, cost with and without batching,
    through OpenAI's Batch API and Anthropic's Message Batches."""
    from evalframe.models import loader
    from evalframe.run import pipeline

    loader.lib()
    data = synthetic_dataset(work / "batch.jsonl", items)
    with judge_server(0.0, batch_delay=1.0) as base:
        # Behind an api_base a model's cost is unknown unless its config prices it: the list prices of
        # gpt-4o-mini and claude-sonnet-4-5 per token, input and output.
        prices = {"gpt": (1.5e-7, 6e-7), "claude": (3e-6, 1.5e-5)}
        for option, api_base in (("gpt", f"{base}/v1"), ("claude", base)):
            common = [
                "scorer=answer_similarity",
                f"model={option}",
                f"model.api_base={api_base}",
                f"model.input_cost_per_token={prices[option][0]}",
                f"model.output_cost_per_token={prices[option][1]}",
                "tracking=none",
                "cache.mode=off",
                "dataset=jsonl",
                f"dataset.path={data}",
            ]
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                stats = server_stats(base)
                normal = pipeline.evaluate(compose(common), work / option / "normal")[0]
                between = server_stats(base)
                normal_calls = between["requests"] - stats["requests"]
                started = time.perf_counter()
                config = compose([*common, "model.batch=true", "model.batch_poll=0.5"])
                batched = pipeline.evaluate(config, work / option / "b")[0]
                seconds = time.perf_counter() - started
            after = server_stats(base)
            sent = after["requests"] - between["requests"]
            in_batches = after["batched"] - between["batched"]
            created = after["batch_api"].get("create", 0) - between["batch_api"].get("create", 0)
            s = batched.stats
            same = [i.scores["answer_similarity"].score for i in normal.items] == [
                i.scores["answer_similarity"].score for i in batched.items
            ]
            print(
                f"(i) batch mode, model={option}, {items} items: normal run {normal_calls} requests as "
                f"normal calls; batched run {sent - in_batches} as normal calls, {in_batches} in {created} "
                f"batches ({seconds:.1f} s with a 1 s batch delay); cost ${batched.usage.cost:.4f} at the "
                f"batch price vs ${batched.usage.cost - s.batch_cost + s.unbatched_cost:.4f} without "
                f"(normal run: ${normal.usage.cost:.4f}); same scores as normal calls: {same}"
            )


def bench_embedding_runs(codes: dict[str, Path], work: Path, rows: int = 2000) -> None:
    """(j) A recorded-output semantic_similarity run (local MiniLM) of `rows` distinct pairs through the
    whole pipeline, per checkout: pairs/s after start-up, and the largest score difference between them."""
    sys.path.insert(0, str(ROOT / "bench"))
    from memory import dataset

    data = work / "embed.jsonl"
    dataset(data, rows)
    scores: dict[str, dict[str, float]] = {}
    for name, code in codes.items():
        cwd = work / f"embed-{name}"
        cwd.mkdir()
        args = ["scorer=semantic_similarity", "tracking=none", "cache.mode=off", "dataset=jsonl"]
        small = work / f"embed-{name}-2.jsonl"
        small.write_text("".join(data.read_text().splitlines(keepends=True)[:2]))
        start_up = cli_run(code, [*args, f"dataset.path={small}"], cwd, dict(os.environ))  # load, 2 pairs
        seconds = cli_run(code, [*args, f"dataset.path={data}"], cwd, dict(os.environ))
        [journal] = sorted(cwd.glob("outputs/*/*/results.jsonl"), key=lambda p: p.stat().st_mtime)[-1:]
        items = [json.loads(line) for line in journal.read_text().splitlines()]
        scores[name] = {i["id"]: i["scores"]["semantic_similarity"]["score"] for i in items}
        print(
            f"(j) semantic_similarity run, {rows} pairs [{name}]: {rows / (seconds - start_up):.0f} pairs/s "
            f"after start-up ({seconds:.1f} s whole, {start_up:.1f} s for a 2-pair run)"
        )
    if len(scores) == 2:
        a, b = scores.values()
        largest = max(abs(a[k] - b[k]) for k in a)
        print(f"(j) largest score difference between the two: {largest:.2e} (<= 1e-6)")


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
    from evalframe.models.steps import StepResult, Usage
    from evalframe.report import console as report
    from evalframe.results.run_result import RunResult
    from evalframe.results.scores import ItemResult, ScoreResult
    from evalframe.tracking import log as tracking

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
    from evalframe.results.journal import Journal

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
    with report.notes() as notes:
        tracking.log_run(
            result,
            config,
            uri=uri,
            experiment="bench",
            run_name="bench",
            tags={},
            results_file=saved,
            notes=notes,
        )
    print(
        f"(d) logging {n:,} item results to MLflow (SQLite, traces off): "
        f"{time.perf_counter() - started:.2f} s (target <= 2); "
        f"writing them to results.jsonl first: {on_disk:.2f} s"
    )


def bench_help(codes: dict[str, Path], work: Path, repeat: int = 5) -> None:
    for name, code in codes.items():
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "evalframe", "--help"],
                cwd=work,  # `-m` puts the working directory first on the path: not a checkout
                env={**os.environ, "PYTHONPATH": str(code)},
                check=True,
                capture_output=True,
            )
            times.append(time.perf_counter() - started)
        print(
            f"(e) python -m evalframe --help [{name}]: median {statistics.median(times):.2f} s of {repeat} "
            f"(min {min(times):.2f}) (target <= 0.7)"
        )


def bench_embeddings(pairs: int = 1000) -> None:
    from evalframe.data.rows import Row
    from evalframe.models.context import Context
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
    parts = ["start", "process", "batch", "throughput", "cache", "sweep", "logging", "help"]
    parts += ["embeddings", "embedrun", "cpu"]
    parser.add_argument("--skip", nargs="*", default=[], choices=parts)
    parser.add_argument("--only", nargs="*", default=parts, choices=parts)
    parser.add_argument("--batch-items", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each checkout in (k)")
    parser.add_argument(
        "--before", type=Path, help="another checkout (the branch point) to time side by side in (g), (h)"
    )
    parser.add_argument(
        "--ragas",
        metavar="PYTHON",
        help="an interpreter with RAGAS installed: its (g), (h) and (k) on the same judge, after ours "
        "(bench/ragas_reference.py says how to make one)",
    )
    args = parser.parse_args()
    run = set(args.only) - set(args.skip)
    codes = {"this": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    print(f"evalframe benchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        os.environ["EVALFRAME_CACHE_DIR"] = str(work / "default-cache")
        if "start" in run:
            bench_start(codes, work)
        if "process" in run:
            bench_process(codes, work, args.items, args.latency)
        if "batch" in run:
            bench_batch(work, args.batch_items)
        if "cpu" in run:
            bench_cpu(codes, work, args.items, args.latency, args.repeat)
        with judge_server(args.latency) as base:
            if "throughput" in run:
                bench_throughput(base, work, args.items, args.latency, args.concurrency)
            if "cache" in run:
                bench_cache(base, work, args.items)
            if "sweep" in run:
                bench_sweep(base, work)
        if "logging" in run:
            bench_logging(work)
        if "help" in run:
            bench_help(codes, work)
        if "embeddings" in run:
            bench_embeddings()
        if "embedrun" in run:
            bench_embedding_runs(codes, work)
        if args.ragas:
            import ragas_reference

            ragas_reference.figures(
                args.ragas,
                lambda latency: judge_server(latency, responder="bench.ragas_reference:judge"),
                import_seconds,
                work,
                synthetic_dataset(work / "ragas.jsonl", args.items),
                args.latency,
                args.repeat,
            )


if __name__ == "__main__":
    main()
