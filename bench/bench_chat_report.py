"""What people see of conversations, timed: report.html with every conversation as a chat and each
assistant turn's verdicts beside it, the MLflow table (items_table) and the results.jsonl lines.

    python bench/bench_chat_report.py                    # 2,000 conversations of 10 messages, 2 judges
    python bench/bench_chat_report.py --items 500 --messages 20

Prints figures, not pass/fail (the tests assert behaviour, never seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evalframe.report import html as html_report  # noqa: E402
from evalframe.results.results_file import to_jsonable  # noqa: E402
from evalframe.results.run_result import RunResult  # noqa: E402
from evalframe.results.scores import ItemResult, ScoreResult  # noqa: E402
from evalframe.results.table import items_table  # noqa: E402

SCORERS = ("knowledge_retention", "turn_relevancy")
WORDS = "the user asked to book a vegetarian dinner in paris for two people on friday evening".split()  # noqa: SIM905


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def conversation(rng: random.Random, messages: int) -> list[dict[str, Any]]:
    chat = [{"role": "system", "content": sentence(rng, 30)}]
    for k in range(messages - 1):
        chat.append({"role": "user" if k % 2 == 0 else "assistant", "content": sentence(rng, 25)})
    return chat


def judged(rng: random.Random, chat: list[dict[str, Any]]) -> ScoreResult:
    turns = []
    for number, message in enumerate(chat, start=1):
        if message["role"] == "assistant":
            good = rng.random() < 0.8
            turns.append(
                {
                    "turn": number,
                    "verdict": "yes" if good else "no",
                    "score": float(good),
                    "reason": sentence(rng, 20),
                }
            )
    score = sum(t["score"] for t in turns) / len(turns)
    return ScoreResult(score=score, reason=f"{score:.2f} of the turns", details={"turns": turns})


def synthetic_run(n: int, messages: int, seed: int = 0) -> RunResult:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        chat = conversation(rng, messages)
        scores = {name: judged(rng, chat) for name in SCORERS}
        first, last = chat[1]["content"], chat[-1]["content"]
        items.append(
            ItemResult(
                f"chat-{i}", first, None, last, scores=scores, record={"messages": chat}, conversation=chat
            )
        )
    return RunResult(items=items, scorers=list(SCORERS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args()
    result = synthetic_run(args.items, args.messages)
    html_report.run_report(synthetic_run(5, 4), "warm-up")  # matplotlib's import and font cache
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        html_report.write_run_report(result, Path(tmp), "bench")
        seconds = time.perf_counter() - start
        size = (Path(tmp) / html_report.REPORT).stat().st_size
    print(
        f"report.html for {args.items} conversations of {args.messages} messages, {len(SCORERS)} per-turn "
        f"judges: {seconds:.2f} s, {size / 1e6:.1f} MB"
    )
    start = time.perf_counter()
    table = items_table(result)
    print(f"items_table: {time.perf_counter() - start:.2f} s, {len(table)} columns")
    line = json.dumps(to_jsonable(result.items[0]), ensure_ascii=False)
    chat = len(json.dumps(result.items[0].conversation))
    print(f"results.jsonl: {len(line)} bytes per item ({chat} of them the conversation)")


if __name__ == "__main__":
    main()
