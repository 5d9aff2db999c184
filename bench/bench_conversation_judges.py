"""The six conversation judges on the bundled chat sample, judged by an oracle: requests per
conversation and the mean score under each formula, beside the sample's intended figures.

    python bench/bench_conversation_judges.py

In process: the oracle (tests/conversation_oracle.py) answers through the scripted model's LiteLLM
door, as the tests' judge does, each request from its conversation's `intended` verdicts (the intended
turns fail, the others pass; completeness the intended share; goal 1 or 0). One run of the six judges
(a fresh judge cache) counts the requests; three more runs, with compat=deepeval, compat=mlflow and
output.aggregate=all, re-score the cached replies (their requests are printed: 0). Means are over the
items with an intended figure for that judge (the sample leaves a judge out where it is arguable);
`intended mean` is what the verdicts give averaged per turn, `intended all` the share of items with no
failing turn (what mlflow and aggregate=all score). conversation_guidelines has no intended verdicts:
its requests are measured, its scores not shown.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from evalframe.cli import main  # noqa: E402
from evalframe.config.compose import compose, resolve  # noqa: E402
from evalframe.data.rows import Row, load_rows  # noqa: E402
from tests import scripted  # noqa: E402
from tests.conversation_oracle import JUDGES, PER_TURN, Oracle  # noqa: E402

FORMULAS = {  # name -> overrides of every judge that takes them (goal_accuracy is a choice: none)
    "default": {},
    "deepeval": {"compat": "deepeval"},
    "mlflow": {"compat": "mlflow"},
    "aggregate=all": {"output.aggregate": "all"},
}


def run(extra: list[str], work: Path) -> dict[str, dict[str, float | None]]:
    """One run of the six judges on the sample: each item's score per judge."""
    args = [
        "dataset=chat_sample",
        f"scorer=[{','.join(JUDGES)}]",
        "model=gpt",
        *scripted.overrides(),
        "tracking=none",
        f"hydra.run.dir={work}",
        *extra,
    ]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(args)
    assert code in (0, 1), err.getvalue()[-2000:]
    items = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    return {i["id"]: {k: s["score"] for k, s in i["scores"].items()} for i in items}


def intended(row: Row, judge: str) -> tuple[float, float] | None:
    """(mean, all) the item's intended verdicts give for a judge; None where it has none."""
    value = row.extra["intended"].get(judge)
    if value is None:
        return None
    if judge in PER_TURN:
        assert row.messages is not None
        mean = 1 - len(value) / len(row.messages.assistant_turns)
        return mean, float(not value)
    return float(value), float(value == 1)


def figure(values: list[float | None]) -> str:
    scored = [v for v in values if v is not None]
    if len(scored) < len(values):
        return f"{len(values) - len(scored)} unscored"
    return f"{statistics.fmean(scored):.3f}"


def table(rows: list[Row], oracle: Oracle, scores: dict[str, Any], sent: dict[str, int]) -> list[str]:
    head = ["judge", "requests/conv mean (min-max)", *FORMULAS, "intended mean", "intended all", "items"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for judge in JUDGES:
        asked = oracle.requests(judge)
        cells = [judge, f"{statistics.fmean(asked):.2f} ({min(asked)}-{max(asked)})"]
        judged = [r for r in rows if intended(r, judge) is not None]
        for name, overrides in FORMULAS.items():
            applies = judge != "goal_accuracy" or not overrides
            shown = judge != "conversation_guidelines" and applies
            cells.append(figure([scores[name][r.id][judge] for r in judged]) if shown else "—")
        targets = [intended(r, judge) for r in judged]
        cells += [f"{statistics.fmean(t[0] for t in targets if t):.3f}" if targets else "—"]
        cells += [f"{statistics.fmean(t[1] for t in targets if t):.3f}" if targets else "—", str(len(judged))]
        lines.append("| " + " | ".join(cells) + " |")
    again = ", ".join(f"{name} {n}" for name, n in sent.items() if name != "default")
    lines.append(f"\njudge requests: {sent['default']} in the first run; re-scored from its replies: {again}")
    return lines


def main_() -> None:
    rows = load_rows(resolve(compose(["dataset=chat_sample"]))["dataset"])
    oracle = Oracle.of(rows)
    model = scripted.ScriptedModel(responder=oracle)
    scripted.install(model)
    folder = Path(tempfile.mkdtemp(prefix="bench-conversation-judges-"))
    os.environ["EVALFRAME_CACHE_DIR"] = str(folder / "cache")
    scores, sent = {}, {}
    for name, overrides in FORMULAS.items():
        before = model.count()
        extra = [
            f"scorers.{judge}.{key}={value}"
            for judge in JUDGES
            if judge != "goal_accuracy"
            for key, value in overrides.items()
        ]
        scores[name] = run(extra, folder / name.replace("=", "-"))
        sent[name] = model.count() - before
    print(f"dataset=chat_sample: {len(rows)} conversations, judged by an oracle of their intended verdicts\n")
    print("\n".join(table(rows, oracle, scores, sent)))


if __name__ == "__main__":
    main_()
