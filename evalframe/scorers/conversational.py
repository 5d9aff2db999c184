"""The judge forms of conversations (a row's `messages`, data/conversations.py), used by
evalframe.scorers.judge.Judge (knowledge_retention, role_adherence, turn_relevancy,
conversation_completeness and conversation_guidelines are YAML files of these forms):

- turns:      a verdict per assistant turn. unit=conversation: ONE call whose reply schema, built per
              item, has one required key per numbered assistant turn shown (`turn_4: {reason, verdict}`),
              so a schema-constrained judge gives every turn, and a reply that misses one is asked again,
              then unscored: never a smaller denominator. unit=turn / window: one call per assistant
              turn, its prompt holding that turn and the turns before it (window: at most `window`
              messages before it, Conversation.until).
- intentions: step `intentions` lists what the user came for; step `verdicts` gives one verdict per
              intention (keyed by position), as the claims form does for claims.
- rules:      one verdict per rule of the judge's `rules`, keyed by position, in one call.

A verdict passes when it has its table's best weight. The verdicts aggregate as `mean` (Σ weight ÷
verdicts) or `all` (1 when every verdict passes, else 0); `compat: deepeval` is passed ÷ verdicts (1
without verdicts), `compat: mlflow` the yes/no of its session judges (every verdict passes). What the
judge sees is cut oldest turn first to `max_turns` / `max_tokens`, the cut turns kept in
details["truncated_turns"] (per turn: those cut from any turn's prompt, beyond what its window leaves
out). Everything after the replies is pure: aggregate, compat, empty, the
weights and scale re-score stored replies without a call.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import create_model

from evalframe.data.conversations import Conversation, Turn, truncated
from evalframe.errors import ConfigError
from evalframe.models.llm import LLM
from evalframe.models.steps import StepResult
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import Reply, choice, enum_of, in_order, weights_of
from evalframe.scorers.grounded import Rules, good_verdicts, named_verdicts, quoted, verdicts_reply

UNITS = ("conversation", "turn", "window")
AGGREGATES = ("mean", "all")
COMPATS = ("deepeval", "mlflow")
# What each peer gives a conversation with nothing to judge (no assistant turn, no intention, no rule):
# DeepEval's conversational metrics score 1 without verdicts; MLflow's session judges give no yes/no.
NOTHING = {"deepeval": 1.0, "mlflow": math.nan}
_KEY = re.compile(r"turn_\d+|\d+")  # a verdict's key: an assistant turn's, or a position

Render = Callable[..., Any]  # (step, **variables) -> that step's messages


@dataclass(frozen=True)
class Scope:
    """What of a conversation a judge sees, and in how many calls (the Judge's conversation options)."""

    unit: str = "conversation"
    window: int | None = None  # unit=window: at most this many messages before the judged turn
    max_turns: int | None = None  # the oldest turns cut first beyond these (a system message is kept)
    max_tokens: int | None = None
    rules: tuple[str, ...] = ()  # the rules form's rules, in order

    @classmethod
    def of(cls, unit: Any, window: Any, max_turns: Any, max_tokens: Any, rules: Any, key: str) -> Scope:
        choice(unit, UNITS, f"{key}.unit")
        for name, value in (("window", window), ("max_turns", max_turns), ("max_tokens", max_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(
                    f"{key}.{name}={value!r}: set it to a whole number of at least 1, or null for no limit "
                    "(a judged turn needs the messages it answers)"
                )
        if unit == "window" and window is None:
            raise ConfigError(f"{key}.unit=window needs {key}.window=K: at most K messages before each turn")
        if not isinstance(rules, list | tuple) or not all(isinstance(r, str) for r in rules):
            raise ConfigError(f"{key}.rules must be a list of texts, e.g. ['Never promise a refund']")
        return cls(unit, window, max_turns, max_tokens, tuple(r for r in rules if r.strip()))

    def view(self, conversation: Conversation) -> tuple[Conversation, tuple[int, ...]]:
        """The conversation as the judge sees it, and the numbers of the turns cut from it."""
        return truncated(conversation, self.max_turns, self.max_tokens)

    def before(self, conversation: Conversation, turn: Turn) -> tuple[Conversation, tuple[int, ...]]:
        """What a per-turn call sees: the turn and those before it (unit=window: at most `window`)."""
        return self.view(conversation.until(turn, self.window if self.unit == "window" else None))


def verdicts_score(
    verdicts: Sequence[str], weights: Mapping[str, float], aggregate: str, rules: Rules
) -> float:
    """Pure. mean: Σ weight ÷ verdicts; all: 1 when every verdict passes (has the table's best weight),
    else 0; deepeval: passed ÷ verdicts; mlflow: all. Times the scale."""
    if not verdicts:
        raise ValueError("no verdicts: an empty case is decided by Rules.decided")
    best = max(weights.values())
    passed = [weights[v] == best for v in verdicts]
    if rules.compat == "deepeval":
        value = sum(passed) / len(passed)
    elif rules.compat == "mlflow" or aggregate == "all":
        value = float(all(passed))
    else:
        value = sum(weights[v] for v in verdicts) / len(verdicts)
    return value * rules.scale


def _how(aggregate: str, rules: Rules) -> str:
    return f"as {rules.compat} scores it" if rules.compat else aggregate


def _entry(names: tuple[str, ...]) -> type[Reply]:
    return create_model("TurnVerdict", __base__=Reply, reason=(str, ...), verdict=(enum_of(list(names)), ...))


turn_reply = functools.cache(_entry)  # one turn's verdict (unit=turn / window), one class per table


@functools.cache
def turns_reply(names: tuple[str, ...], numbers: tuple[int, ...]) -> type[Reply]:
    """One required {reason, verdict} per assistant turn shown, keyed turn_N by its number: the count
    is in the schema's required keys (and additionalProperties: false), as per_position's is."""
    fields: dict[str, Any] = {f"turn_{n}": (turn_reply(names), ...) for n in numbers}
    return create_model("TurnVerdicts", __base__=Reply, **fields)


class IntentionList(Reply):
    intentions: list[str]


def miscount(raw: str | None, wanted: int, what: str = "assistant turns") -> str:
    """'3 verdicts for 4 assistant turns; ' when an invalid reply judged another number of turns (keys
    turn_N), intentions or rules (positions under "verdicts"); empty when the count is not what is wrong."""
    text = (raw or "").strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    try:
        reply = json.loads(text)
    except ValueError:
        return ""
    if isinstance(reply, dict) and isinstance(reply.get("verdicts"), dict):
        reply = reply["verdicts"]
    found = sum(bool(_KEY.fullmatch(str(k))) for k in reply) if isinstance(reply, dict) else 0
    return f"{found} verdicts for {wanted} {what}; " if found != wanted else ""


def _nothing(
    what: str, rules: Rules, cut: Sequence[int], steps: list[StepResult] | None = None
) -> ScoreResult:
    decided = rules.decided(what, NOTHING)
    decided.steps, decided.details = steps or [], {"truncated_turns": list(cut)}
    return decided


def _cut_note(cut: Sequence[int]) -> list[str]:
    return (
        [f"Turns {', '.join(map(str, cut))} were cut from the prompt (max_turns / max_tokens)."]
        if cut
        else []
    )


@dataclass(frozen=True)
class Turns:
    verdicts: dict[str, float]
    aggregate: str = "mean"

    steps = ("judge",)
    needs = ("messages",)
    compats = COMPATS

    def variables(self, step: str) -> dict[str, Any]:
        return {}

    def reason(self, numbers: list[int], verdicts: list[str], value: float, rules: Rules) -> str:
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in self.verdicts if v in verdicts)
        noun = "assistant turns" if len(verdicts) > 1 else "assistant turn"
        head = f"Score {value:.2f} ({_how(self.aggregate, rules)}): {len(verdicts)} {noun}, {counts}."
        labels = [f"turn {n}" for n in numbers]
        good = good_verdicts(self.verdicts, "higher")
        return " ".join([head, *named_verdicts(labels, verdicts, self.verdicts, good)])

    async def run(
        self, scope: Scope, render: Render, llm: LLM, conversation: Conversation, rules: Rules
    ) -> ScoreResult:
        if scope.unit == "conversation":
            return await self._whole(scope, render, llm, conversation, rules)
        turns = conversation.assistant_turns
        if not turns:
            return _nothing("the conversation has no assistant turn to judge", rules, ())
        views = [scope.before(conversation, t) for t in turns]
        asks = [
            llm.structured(
                f"turn_{t.number}",
                render("judge", conversation=seen, turns=[t.number], turn=t.number),
                turn_reply(tuple(self.verdicts)),
            )
            for t, (seen, _) in zip(turns, views, strict=True)
        ]
        steps = list(await asyncio.gather(*asks))
        failed = next((s for s in steps if not s.ok or s.reply is None), None)
        if failed is not None:  # one turn unjudged leaves the item unscored, never a smaller denominator
            return ScoreResult.unscored(f"{failed.step}: {failed.error}", steps)
        cut = sorted({n for _, c in views for n in c})
        return self._scored(
            [(t.number, s.reply or {}) for t, s in zip(turns, steps, strict=True)], steps, cut, rules
        )

    async def _whole(
        self, scope: Scope, render: Render, llm: LLM, conversation: Conversation, rules: Rules
    ) -> ScoreResult:
        seen, cut = scope.view(conversation)
        numbers = [t.number for t in seen.assistant_turns]
        if not numbers:
            return _nothing("the conversation has no assistant turn to judge", rules, cut)
        messages = render("judge", conversation=seen, turns=numbers, turn=None)
        step = await llm.structured("judge", messages, turns_reply(tuple(self.verdicts), tuple(numbers)))
        if not step.ok or step.reply is None:
            return ScoreResult.unscored(f"judge: {miscount(step.raw, len(numbers))}{step.error}", [step])
        return self._scored([(n, step.reply[f"turn_{n}"]) for n in numbers], [step], list(cut), rules)

    def _scored(
        self,
        judged: list[tuple[int, Mapping[str, Any]]],
        steps: list[StepResult],
        cut: list[int],
        rules: Rules,
    ) -> ScoreResult:
        names = [e["verdict"] for _, e in judged]
        value = verdicts_score(names, self.verdicts, self.aggregate, rules)
        turns = [
            {"turn": n, "verdict": e["verdict"], "score": self.verdicts[e["verdict"]], "reason": e["reason"]}
            for n, e in judged
        ]
        reason = " ".join([self.reason([n for n, _ in judged], names, value, rules), *_cut_note(cut)])
        return ScoreResult(value, reason, steps, {"turns": turns, "truncated_turns": cut})


@dataclass(frozen=True)
class Checklist:
    """A verdict per item of a list: the user's intentions (extracted in a first step) or the judge's
    rules (from config), all judged in one call keyed by position."""

    kind: str  # intentions | rules
    verdicts: dict[str, float]
    aggregate: str = "mean"

    needs = ("messages",)
    compats = COMPATS

    @property
    def steps(self) -> tuple[str, ...]:
        return ("intentions", "verdicts") if self.kind == "intentions" else ("judge",)

    def variables(self, step: str) -> dict[str, Any]:
        """A step's variables beyond the row's, as validation renders them."""
        return {} if step == "intentions" else {"statements": [self.kind.removesuffix("s")]}

    def reason(self, items: list[str], verdicts: list[str], value: float, rules: Rules) -> str:
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in self.verdicts if v in verdicts)
        noun = self.kind if len(items) > 1 else self.kind.removesuffix("s")
        head = f"Score {value:.2f} ({_how(self.aggregate, rules)}): {len(items)} {noun}, {counts}."
        labels = [quoted(i) for i in items]
        good = good_verdicts(self.verdicts, "higher")
        return " ".join([head, *named_verdicts(labels, verdicts, self.verdicts, good)])

    async def run(
        self, scope: Scope, render: Render, llm: LLM, conversation: Conversation, rules: Rules
    ) -> ScoreResult:
        seen, cut = scope.view(conversation)
        steps: list[StepResult] = []
        if self.kind == "rules":
            items, step = list(scope.rules), "judge"
            if not items:
                return _nothing("no rules to check (set rules: [...])", rules, cut)
        else:
            split = await llm.structured("intentions", render("intentions", conversation=seen), IntentionList)
            steps, step = [split], "verdicts"
            if not split.ok or split.reply is None:
                return ScoreResult.unscored(f"intentions: {split.error}", steps)
            items = [s for s in split.reply["intentions"] if s.strip()]  # a blank one asks for nothing
            if not items:
                return _nothing("the user states no intention", rules, cut, steps)
        messages = render(step, conversation=seen, statements=items)
        judged = await llm.structured(step, messages, verdicts_reply(tuple(self.verdicts), len(items)))
        steps.append(judged)
        if not judged.ok or judged.reply is None:
            miss = miscount(judged.raw, len(items), self.kind)
            return ScoreResult.unscored(f"{step}: {miss}{judged.error}", steps)
        entries = in_order(judged.reply["verdicts"])
        names = [e["verdict"] for e in entries]
        value = verdicts_score(names, self.verdicts, self.aggregate, rules)
        reason = " ".join([self.reason(items, names, value, rules), *_cut_note(cut)])
        return ScoreResult(
            value, reason, steps, {"statements": items, "verdicts": entries, "truncated_turns": list(cut)}
        )


Conversational = Turns | Checklist
KEYS = {kind: {"verdicts", "aggregate"} for kind in ("turns", "intentions", "rules")}


def parse(kind: str, spec: Mapping[str, Any], key: str) -> Conversational:
    """A conversation form from its config mapping (type and unknown keys checked by the caller)."""
    weights = weights_of(spec.get("verdicts"), f"{key}.verdicts")
    aggregate = spec.get("aggregate", "mean")
    if aggregate not in AGGREGATES:
        raise ConfigError(
            f"{key}.aggregate={aggregate!r}: use mean (Σ weight ÷ verdicts) or all (1 only when every "
            "verdict has the table's best weight)"
        )
    return Turns(weights, aggregate) if kind == "turns" else Checklist(kind, weights, aggregate)
