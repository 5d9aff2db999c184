"""Conversations through a live target: what a replay and a simulated user cost in calls and time.

    python bench/bench_conversations.py                      # 100 conversations of 5 user turns
    python bench/bench_conversations.py --items 200 --turns 8 --latency 0.05

In process: an async python bot that sleeps `latency` per answer, and the scripted model (through
LiteLLM, as in the tests) playing the simulated user with the same latency per request; exact_match
judges (no judge call), tracking=none. Prints, per mode, the target and user-model calls per
conversation and the wall time beside the floor the latency sets at that concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evalframe.cli import main  # noqa: E402
from tests import scripted  # noqa: E402
from tests.testserver import FakeRequest  # noqa: E402

LATENCY = [0.05]
CALLS = [0]


async def bot(question: str, messages: list[dict[str, Any]] | None = None) -> str:
    CALLS[0] += 1
    await asyncio.sleep(LATENCY[0])
    return f"answer {sum(m['role'] == 'user' for m in messages or [])}"


def user(request: FakeRequest) -> dict[str, Any]:
    prompt = request.messages[0]["content"]
    sent, want = prompt.count("] user: "), int(re.search(r"(\d+) things", prompt).group(1))  # type: ignore[union-attr]
    return {"message": f"thing {sent + 1}", "done": sent >= want}


def run(args: list[str], work: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(
            [*args, "tracking=none", "scorer=exact_match", "max_unscored_rate=1", f"hydra.run.dir={work}"]
        )
    elapsed = time.perf_counter() - started
    assert code in (0, 4), err.getvalue()[-2000:]
    items = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    return elapsed, {"items": items}


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    options = parser.parse_args(argv)
    LATENCY[0] = options.latency
    model = scripted.ScriptedModel(responder=user, latency=options.latency)
    scripted.install(model)
    n, k, c = options.items, options.turns, options.concurrency
    folder = Path(tempfile.mkdtemp(prefix="bench-conversations-"))
    os.environ["EVALFRAME_CACHE_DIR"] = str(folder / "cache")
    chats = folder / "chats.jsonl"
    with chats.open("w") as f:
        for i in range(n):
            turns = [
                m
                for t in range(k)
                for m in ({"role": "user", "content": f"q{t}"}, {"role": "assistant", "content": "old"})
            ]
            f.write(
                json.dumps(
                    {
                        "id": str(i),
                        "messages": turns,
                        "ground_truth": f"answer {k}",
                        "scenario": f"Ask for {k} things (customer {i}).",
                    }
                )
                + "\n"
            )
    common = [
        "dataset=jsonl",
        f"dataset.path={chats}",
        "target=python",
        f"target.fn={__name__}:bot",
        f"concurrency={c}",
    ]
    floor = n * k * options.latency / c
    with (folder / "plain.jsonl").open("w") as f:  # the same number of calls, one per row
        f.writelines(
            json.dumps({"id": str(i), "input": "q", "ground_truth": "answer 0"}) + "\n" for i in range(n * k)
        )
    plain = ["dataset=jsonl", f"dataset.path={folder / 'plain.jsonl'}", *common[2:]]
    run(plain, folder / "warm-up")  # imports and first compositions, paid once by every command
    elapsed, _ = run(plain, folder / "plain")
    print(f"plain:    {n * k} single-turn rows: {elapsed:.2f} s (floor at concurrency {c}: {floor:.2f} s)")
    CALLS[0] = 0
    elapsed, _ = run(common, folder / "replay")
    print(
        f"replay:   {n} conversations x {k} user turns: {CALLS[0] / n:.1f} target calls each, "
        f"{elapsed:.2f} s (floor at concurrency {c}: {floor:.2f} s)"
    )
    CALLS[0] = 0
    spec = f"{{name: {scripted.NAME}, api_key_env: null, api_base: null, timeout: 10}}"
    sim = [f"target.simulate.user_model={spec}", f"target.simulate.max_turns={k + 1}"]
    elapsed, found = run([*common, *sim, "cache.mode=off"], folder / "simulate")
    stopped = {i["record"].get("stopped") for i in found["items"]}
    print(
        f"simulate: {n} scenarios of {k} things: {CALLS[0] / n:.1f} target calls and "
        f"{model.count('UserTurn') / n:.1f} user-model requests each (stopped: {sorted(stopped)}), "
        f"{elapsed:.2f} s (floor: {2 * floor:.2f} s)"
    )
    CALLS[0], before = 0, model.count()
    elapsed, _ = run(
        ["dataset=run", f"dataset.path={folder / 'simulate'}", "target=dataset"], folder / "again"
    )
    print(
        f"dataset=run on the stored conversations: {CALLS[0]} target calls, "
        f"{model.count() - before} user-model requests, {elapsed:.2f} s"
    )


if __name__ == "__main__":
    main_()
