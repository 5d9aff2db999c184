"""RAGAS beside evalframe on the same fake judge: the reference figures of bench.py's (g), (h) and (k).

    python -m venv /tmp/ragas && /tmp/ragas/bin/pip install ragas==0.4.3 "langchain<1" \
        "langchain-core<1" "langchain-community<0.4" "langchain-openai<1"
    python bench/bench.py --only start process cpu --ragas /tmp/ragas/bin/python

RAGAS is not a dependency: it runs in the interpreter given (a throwaway venv), as a child process
against its own copy of the judge server bench.py starts for evalframe (same latency, same machine).
The metric is FactualCorrectness (F1), RAGAS's nearest to answer_similarity: both break the answer
and the reference into claims and check each side against the other, four model calls per row. Its
legacy prompts carry their JSON schema in the prompt text, not in response_format, so this judge reads
the schema there and answers a random valid instance of it (the test server's constrained decoder).
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from tests.testserver import FakeRequest, random_instance

RNG = random.Random(7)
LOCK = threading.Lock()


def judge(request: FakeRequest) -> str:
    """The test server's responder for RAGAS: a random instance of the schema its prompt states."""
    text = request.messages[-1]["content"]
    start = text.index("{", text.index("JSON Schema:"))
    schema, _ = json.JSONDecoder().raw_decode(text, start)
    with LOCK:
        return json.dumps(random_instance(schema, schema, RNG))


# The child, run by RAGAS's interpreter: argv = base URL, dataset, max_workers, figures file. It notes
# when `import ragas` ends, the process CPU spent inside evaluate() (RAGAS's own event loop) and the
# scores, then exits.
CHILD = """
import json, sys, time
from ragas import EvaluationDataset, RunConfig, evaluate
imported = time.time()
from langchain_openai import ChatOpenAI
from ragas.llms import LangchainLLMWrapper
from ragas.metrics import FactualCorrectness

base, data, workers, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(line) for line in open(data)]
dataset = EvaluationDataset.from_list(
    [{"user_input": r["input"], "response": r["output"], "reference": r["ground_truth"]} for r in rows]
)
llm = LangchainLLMWrapper(ChatOpenAI(model="gpt-4o-mini", base_url=base, api_key="sk-bench", max_retries=0))
started = time.process_time()
result = evaluate(
    dataset, metrics=[FactualCorrectness()], llm=llm, run_config=RunConfig(max_workers=workers),
    show_progress=False,
)
loop = time.process_time() - started
scores = [s for s in result.to_pandas()["factual_correctness(mode=f1)"] if s == s]
with open(out, "w") as f:
    json.dump({"imported": imported, "loop": loop, "scored": len(scores), "rows": len(rows)}, f)
"""


def run(python: str, base: str, data: Path, in_flight: int, work: Path) -> dict[str, Any]:
    """One RAGAS evaluation in a child process with `in_flight` requests at the judge at most: its
    wall seconds, CPU seconds (user+sys, getrusage) and what it wrote (import end, CPU inside
    evaluate(), rows scored). FactualCorrectness asks two of a row's calls at once (the answer's and
    the reference's side), so RAGAS's max_workers is half of that (the server reports the peak)."""
    out = work / f"ragas-{in_flight}-{time.monotonic_ns()}.json"
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "RAGAS_DO_NOT_TRACK": "true"}
    env.pop("PYTHONPATH", None)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    subprocess.run(
        [python, "-c", CHILD, f"{base}/v1", str(data), str(in_flight // 2), str(out)],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
    )
    seconds = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    return {**json.loads(out.read_text()), "started": started, "seconds": seconds, "cpu": cpu}


def figures(
    python: str, server: Any, import_seconds: Any, work: Path, data: Path, latency: float, repeat: int
) -> None:
    """Print RAGAS's (g) first request after process start beside `import ragas` alone, (h) whole
    process / limit at 8 and 32 in flight, and (k) client CPU per judge call, `repeat` runs each.
    `server(latency)` is bench.py's judge_server with this module's judge; `import_seconds` is
    bench.py's, which times (g)'s `import litellm` the same way."""
    firsts, imports, after_import = [], [], []
    ratios: dict[int, list[float]] = {8: [], 32: []}
    per_call: list[tuple[float, float]] = []
    for i in range(repeat):
        for in_flight in (8, 32):
            imports.append(import_seconds("ragas", {**os.environ, "RAGAS_DO_NOT_TRACK": "true"}, python))
            with server(latency) as base:
                r = run(python, base, data, in_flight, work)
                with urlopen(f"{base}/_stats") as response:
                    stats = json.load(response)
            calls, peak = int(stats["requests"]), int(stats["peak_in_flight"])
            limit = calls * latency / in_flight
            ratios[in_flight].append(r["seconds"] / limit)
            firsts.append(stats["first"] - r["started"])
            after_import.append(stats["first"] - r["imported"])
            if in_flight == 32:
                per_call.append((r["cpu"] / calls * 1000, r["loop"] / calls * 1000))
            print(
                f"(h) RAGAS {r['rows']} rows, {in_flight} in flight, {latency * 1000:.0f} ms [run {i + 1}]: "
                f"whole process {r['seconds']:.2f} s for {calls} calls, limit {limit:.2f} s, "
                f"ratio {r['seconds'] / limit:.3f}; at most {peak} requests at the judge at once; "
                f"{r['scored']} rows scored; "
                f"client CPU {r['cpu'] / calls * 1000:.2f} ms per call, "
                f"{r['loop'] / calls * 1000:.2f} ms inside evaluate()",
                flush=True,
            )
    print(
        f"(g) RAGAS first model request after process start: median {statistics.median(firsts):.2f} s; "
        f"`import ragas` alone: median {statistics.median(imports):.2f} s; first request after the run's "
        f"own `import ragas` ended: median {statistics.median(after_import):+.2f} s"
    )
    for in_flight, values in ratios.items():
        median = statistics.median(values)
        print(f"(h) RAGAS whole process / limit, {in_flight} in flight: median {median:.3f}")
    print(
        f"(k) RAGAS client CPU per judge call: median {statistics.median(w for w, _ in per_call):.2f} ms "
        f"whole process, {statistics.median(lo for _, lo in per_call):.2f} ms inside evaluate(), "
        f"of {repeat} runs"
    )
