"""Throughput of the local embedding model: evalframe's numpy encoder beside sentence-transformers.

    python bench/local_embeddings.py                 # 2,000 texts, best of 3 rounds
    python bench/local_embeddings.py --texts 500 --rounds 5

The texts are the bundled samples' questions, answers, ground truths and retrieved passages (9 to 130
tokens), each made distinct, and every tenth one a run of passages past the 256-token window: the mix
a semantic_similarity or retrieval run embeds. Each round encodes them all with each encoder in turn
(so both see the same load on a shared machine); the best round of each counts. sentence-transformers
(and torch) are no dependency of evalframe: its figures are printed only where it is importable (a venv
made before the numpy encoder, or `pip install sentence-transformers` into a throwaway one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalframe.models import bert, local_embeddings  # noqa: E402
from evalframe.paths import RESOURCES_DIR  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
Encode = Callable[[list[str]], np.ndarray]


def texts(count: int) -> list[str]:
    rows = [
        json.loads(line)
        for name in ("sample.jsonl", "rag_sample.jsonl")
        for line in (RESOURCES_DIR / name).read_text().splitlines()
    ]
    pieces = [
        str(text)
        for row in rows
        for text in [row.get("input"), row.get("output"), row.get("ground_truth"), *row.get("contexts", [])]
        if isinstance(text, str) and text.strip()
    ]
    long = " ".join(pieces)
    return [
        f"{long[(i * 97) % 2000 :]} ({i})" if i % 10 == 9 else f"{pieces[i % len(pieces)]} ({i})"
        for i in range(count)
    ]


def sentence_transformers() -> Encode | None:
    """sentence-transformers' encode, as evalframe called it before the numpy encoder; None if absent."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model = SentenceTransformer(str(local_embeddings.check(MODEL)), device="cpu")
    return lambda batch: model.encode(
        batch, batch_size=64, normalize_embeddings=True, show_progress_bar=False
    )


def rates(encoders: dict[str, Encode], batch: list[str], rounds: int) -> dict[str, tuple[float, float]]:
    """Each encoder's best texts/s over `rounds` (the encoders take turns within a round) and the CPU
    seconds (all threads) of that round: on a shared machine the CPU says more than the clock."""
    found = dict.fromkeys(encoders, (0.0, 0.0))
    for _ in range(rounds):
        for name, encode in encoders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            encode(batch)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            found[name] = max(found[name], (len(batch) / wall, cpu))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batch = texts(args.texts)
    started = time.perf_counter()
    model = local_embeddings._model(MODEL)
    load = time.perf_counter() - started
    tokens = sum(len(e.ids) for e in model.windowed.encode_batch(batch))
    print(
        f"{len(batch)} texts, {tokens} tokens after the {model.window}-token window; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    encoders: dict[str, Encode] = {"numpy encoder": lambda b: bert.encode(model, b)}
    theirs = sentence_transformers()
    if theirs is not None:
        encoders["sentence-transformers"] = theirs
    found = rates(encoders, batch, args.rounds)
    for name, (rate, cpu) in found.items():
        print(f"{name + ':':23} {rate:6.0f} texts/s, {cpu:5.1f} s of CPU for the {len(batch)} texts")
    print(f"(numpy encoder's model load {load:.2f} s, not counted)")
    if theirs is None:
        print("sentence-transformers: not importable here (it is no dependency of evalframe)")
        return
    ours, theirs_rate = found["numpy encoder"][0], found["sentence-transformers"][0]
    worst = float(1 - (bert.encode(model, batch) * theirs(batch)).sum(axis=1).min())
    print(f"numpy / sentence-transformers: {ours / theirs_rate:.2f}x texts/s; largest 1 - cosine {worst:.1e}")


if __name__ == "__main__":
    main()
