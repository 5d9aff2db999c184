"""A deterministic judge for the fake LLM server: reads the fenced texts out of our prompts and
answers each step's schema the way a careful (if literal-minded) model would.

It only sees what a real model sees (the HTTP request), so the whole path — rendering, structured
output, parsing, validation, scoring — is exercised for real.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.testserver import FakeRequest, echo_schema_responder

FENCE = re.compile(r"<([A-Z_]+)-([0-9a-f]{8})>\n(.*?)\n</\1-\2>", re.DOTALL)
WORD = re.compile(r"[\w°]+")


def fenced(request: FakeRequest) -> dict[str, str]:
    """The fenced blocks of the first user message (later ones are our correction requests)."""
    user = next(m["content"] for m in request.messages if m["role"] == "user")
    return {label: body for label, _, body in FENCE.findall(user)}


def units(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?;])\s+", text.strip())
    return [p.strip().rstrip(".;") for p in parts if p.strip().rstrip(".;")]


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return len(wa & wb) / len(wa | wb) if wa | wb else 0.0


def _contradicts(truth: str, output: str) -> bool:
    """Same statement with one different number or name: 'ended in 1945' vs 'ended in 1918'."""
    wt, wo = words(truth), words(output)
    only_t, only_o = wt - wo, wo - wt
    return len(wt & wo) >= 3 and len(only_t) == 1 and len(only_o) == 1


def analyze(truth_units: list[str], output_units: list[str]) -> dict[str, Any]:
    """The analyze step's reply: a match per ground-truth unit keyed by its position, units named by
    position."""
    matches, contradictions, used = {}, [], set()
    for position, truth in enumerate(truth_units):
        best = max(range(len(output_units)), key=lambda o: overlap(truth, output_units[o]))
        similarity = overlap(truth, output_units[best])
        if _contradicts(truth, output_units[best]):
            contradictions.append(
                {"output_index": best, "ground_truth_index": position, "explanation": "differs"}
            )
            kind = "missing"
        elif words(truth) == words(output_units[best]):
            kind = "exact"
        elif similarity >= 0.5 or words(truth) <= words(output_units[best]):
            kind = "semantic"
        elif similarity >= 0.2:
            kind = "partial"
        else:
            kind = "missing"
        if kind != "missing" or _contradicts(truth, output_units[best]):
            used.add(best)
        matches[str(position)] = {
            "match_type": kind,
            "output_index": None if kind == "missing" else best,
            "explanation": f"word overlap {similarity:.2f}",
        }
    extras = [
        i
        for i, o in enumerate(output_units)
        if i not in used and max(overlap(o, t) for t in truth_units) < 0.2
    ]
    return {"matches": matches, "contradictions": contradictions, "extra_info": extras}


def step_of(request: FakeRequest) -> str | None:
    """Which step a request is, from the schema's fields: not every protocol carries the schema name."""
    fields = set((request.schema or {}).get("properties", {}))
    for step, marker in (("SemanticUnits", "units"), ("Analysis", "matches"), ("Reason", "reason")):
        if marker in fields:
            return step
    return None


def judge(request: FakeRequest) -> str | dict[str, Any]:
    blocks = fenced(request) if request.messages else {}
    step = step_of(request)
    if step == "SemanticUnits":
        return {"units": units(blocks["TEXT"])}
    if step == "Analysis":
        return analyze(json.loads(blocks["GROUND_TRUTH_UNITS"]), json.loads(blocks["ANSWER_UNITS"]))
    if step == "Reason":
        return {"reason": "The judge explains the score in prose."}
    if request.schema is None and request.protocol != "embeddings":  # the system under test
        question = next(m["content"] for m in request.messages if m["role"] == "user")
        return f"An answer to: {question.splitlines()[-1]}"
    return echo_schema_responder(request)
