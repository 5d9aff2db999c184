"""An oracle for the conversation judges on the bundled chat sample: a responder (for tests/scripted.py
or the test server) that answers each judge request from its conversation's `intended` verdicts.

It reads only what a real model reads: the fenced conversation in the prompt (matched to its sample
item by its numbered lines, so a window of a conversation finds it too) and the reply schema (the
verdict names, the turn_N keys, the positions). Per judge: a per-turn judge fails the intended turns
and passes the others; conversation_completeness lists as many intentions as the intended share needs
(0.67 -> 3, 2 of them satisfied); goal_accuracy picks achieved for 1, not_achieved for 0. Where the
sample leaves a judge out of `intended` (arguable there) and for conversation_guidelines (no intended
verdicts), it passes everything: figures beside the intended ones are taken over intended items only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from evalframe.data.conversations import transcript
from evalframe.data.rows import Row
from tests.fake_judge import fenced
from tests.testserver import FakeRequest

# A verdict table's passing name -> the judge whose intended verdicts decide it.
JUDGE_OF = {
    "retained": "knowledge_retention",
    "in_role": "role_adherence",
    "relevant": "turn_relevancy",
    "satisfied": "conversation_completeness",
    "achieved": "goal_accuracy",
    "pass": "conversation_guidelines",
}
PER_TURN = ("knowledge_retention", "role_adherence", "turn_relevancy")
# The shipped conversation judges (conf/scorer/), in the README's order.
JUDGES = (
    "knowledge_retention",
    "role_adherence",
    "conversation_completeness",
    "turn_relevancy",
    "goal_accuracy",
    "conversation_guidelines",
)
_LINE = re.compile(r"^\[(\d+)\] (\w+):", re.M)


def _enums(schema: Any) -> Iterator[list[str]]:
    """Every enum of a JSON schema, at any depth ($defs included), in the order they appear."""
    if isinstance(schema, dict):
        if isinstance(schema.get("enum"), list):
            yield [str(v) for v in schema["enum"]]
        for value in schema.values():
            yield from _enums(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _enums(value)


def intentions_for(share: float) -> tuple[int, int]:
    """(intentions, satisfied) for an intended share: the smallest count that writes it (0.67 -> 3, 2)."""
    close = Fraction(share).limit_denominator(6)
    return (close.denominator, close.numerator) if close else (1, 0)


@dataclass
class Chat:
    id: str
    lines: frozenset[str]
    intended: dict[str, Any]


@dataclass
class Oracle:
    chats: list[Chat]
    asked: Counter[tuple[str, str]] = field(default_factory=Counter)  # (judge, item id) -> requests

    @classmethod
    def of(cls, rows: Iterable[Row]) -> Oracle:
        chats = []
        for row in rows:
            assert row.messages is not None, f"{row.id}: not a conversation"
            text = transcript(row.messages)
            chats.append(Chat(row.id, frozenset(text.splitlines()), dict(row.extra.get("intended") or {})))
        return cls(chats)

    def chat(self, shown: str) -> Chat:
        """The sample item whose conversation holds every line the judge was shown."""
        lines = set(shown.splitlines())
        [found] = [c for c in self.chats if lines <= c.lines]
        return found

    def __call__(self, request: FakeRequest) -> dict[str, Any]:
        schema = request.schema or {}
        properties = schema.get("properties", {})
        chat = self.chat(fenced(request)["CONVERSATION"])
        if "intentions" in properties:  # conversation_completeness, its first step
            self.asked["conversation_completeness", chat.id] += 1
            n, _ = intentions_for(chat.intended.get("conversation_completeness", 1.0))
            return {"intentions": [f"The user wants thing {k + 1}." for k in range(n)]}
        names = next(_enums(schema))
        good, bad = names[0], names[-1]
        judge = JUDGE_OF[good]
        self.asked[judge, chat.id] += 1
        intended = chat.intended.get(judge)
        if "choice" in properties:  # goal_accuracy
            return {"reason": f"intended {intended}", "choice": bad if intended == 0 else good}
        if "verdicts" in properties:  # intentions' verdicts, or rules: keyed by position
            return {"verdicts": self._positions(judge, chat, schema, good, bad)}
        failing = set(intended or [])
        keys = schema.get("required", [])
        if keys == ["reason", "verdict"]:  # one turn: the last assistant turn shown
            shown = _LINE.findall(fenced(request)["CONVERSATION"])
            [*_, turn] = [int(n) for n, role in shown if role == "assistant"]
            return {"reason": f"turn {turn}", "verdict": bad if turn in failing else good}
        return {
            key: {"reason": key, "verdict": bad if int(key.removeprefix("turn_")) in failing else good}
            for key in keys
        }

    @staticmethod
    def _positions(
        judge: str, chat: Chat, schema: dict[str, Any], good: str, bad: str
    ) -> dict[str, dict[str, str]]:
        positions = schema["$defs"]["ByPosition"]["required"]
        passed = len(positions)
        if judge == "conversation_completeness":  # the intentions it listed come back, one per position
            n, passed = intentions_for(chat.intended.get(judge, 1.0))
            assert n == len(positions), (chat.id, n, positions)
        verdict = {p: good if int(p) < passed else bad for p in positions}
        return {p: {"reason": f"position {p}", "verdict": v} for p, v in verdict.items()}

    def requests(self, judge: str) -> list[int]:
        """Requests per conversation of the sample, for one judge (0 for an item it never asked about)."""
        return [self.asked[judge, c.id] for c in self.chats]
