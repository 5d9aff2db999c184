"""Judge calls of panels and repeats on the bundled sample (28 rows), measured in one run.

    PYTHONPATH=. .venv/bin/python bench/panel_calls.py

answer_similarity through the scripted judge (tests/scripted.py, in process, through LiteLLM): one judge,
a panel of two, and repeats=3, each with an empty cache; then the next job of a penalty sweep
(penalties.missing=0.5) on the same cache. Prints calls per item, the ratio to one judge, and the
sweep job's calls (0 expected: weights enter no prompt).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalframe.run import pipeline
from tests import scripted
from tests.conftest import compose
from tests.scorers.test_panel import as_judges

BASE = ["scorer=answer_similarity", "tracking=none", "model.name=scripted/judge-a", "model.api_key_env=null"]
PANEL = "scorers.answer_similarity.models=[{name: scripted/judge-a, label: a}, {name: scripted/judge-b}]"
CASES = {"one judge": BASE, "panel of two": [*BASE, PANEL], "repeats=3": [*BASE, "repeats=3"]}


def main() -> None:
    model = scripted.ScriptedModel(responder=as_judges)
    scripted.install(model)
    out = Path(tempfile.mkdtemp())
    rows, single = [], 0
    for name, args in CASES.items():
        os.environ["EVALFRAME_CACHE_DIR"] = tempfile.mkdtemp()  # every case pays for its own calls
        model.reset()
        result, _ = pipeline.evaluate(compose(args), out / f"{len(rows)}a")
        first = model.count()
        pipeline.evaluate(compose([*args, "penalties.missing=0.5"]), out / f"{len(rows)}b")
        single = single or first
        rows.append((name, first, first / result.count, first / single, model.count() - first))
    print(f"{'':14} {'calls':>6} {'per item':>9} {'x one judge':>12} {'next sweep job':>15}")
    for name, calls, per_item, ratio, sweep in rows:
        print(f"{name:14} {calls:6d} {per_item:9.2f} {ratio:12.2f} {sweep:15d}")


if __name__ == "__main__":
    main()
