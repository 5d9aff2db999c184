"""The judge forms of texts checked against retrieved contexts, used by evalframe.scorers.judge.Judge
(faithfulness, hallucination, context_recall, context_precision are YAML files of these forms):

- claims:  step `claims` lists the statements of `of` (output | ground_truth), one call; step
           `verdicts` gives one verdict per statement against the contexts, ONE call whose reply has
           exactly one entry per statement (keyed by position) -> Σ weight(verdict) ÷ statements
- ranking: step `relevance` gives one verdict per retrieved chunk, ONE call keyed by position, judged
           against `reference` (ground_truth | output) -> average precision over the ranked chunks

An empty case (no contexts, no statements) is decided without the verdict call by the judge's
`empty` rule; `compat` swaps in RAGAS', DeepEval's or Mastra's formula and empty cases. Both act on
stored verdicts only, never on a prompt, so changing them re-scores from cached replies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import create_model

from evalframe.errors import ConfigError
from evalframe.models.llm import LLM
from evalframe.models.steps import Message
from evalframe.results.scores import ScoreResult
from evalframe.scorers.base import (
    COMPATS,
    Reply,
    empty_rule,
    enum_of,
    in_order,
    per_position,
    round_half_up,
    weights_of,
)

# What each peer gives where evalframe's `empty` rule applies (None: the case is not theirs to decide).
# No claims in the output: RAGAS NaN (unscored), DeepEval 1, Mastra 0. No retrieved chunk in context
# precision: RAGAS 0 (its 1e-10 denominator), DeepEval 0 (no verdicts), Mastra refuses the input.
NO_CLAIMS = {"ragas": math.nan, "deepeval": 1.0, "mastra": 0.0}
NO_CHUNKS = {"ragas": 0.0, "deepeval": 0.0, "mastra": math.nan}
_RAGAS_EPSILON = 1e-10  # RAGAS divides by (relevant chunks + 1e-10)
_SNIPPET = 60  # characters of a chunk a reason quotes

Render = Callable[..., list[Message]]  # (step, **extra variables) -> that step's messages


@dataclass(frozen=True)
class Rules:
    """How a claims or ranking verdict list becomes a score (all re-scorable: no prompt changes)."""

    empty: float = math.nan  # the `empty` rule's score; NaN: unscored (not applicable)
    compat: str | None = None  # ragas | deepeval | mastra (conversation forms: deepeval | mlflow)
    scale: float = 1.0
    better: str = "higher"  # which way is good: the reason names the verdicts that are not

    @classmethod
    def of(
        cls, empty: Any, compat: Any, scale: float, better: str, key: str, compats: tuple[str, ...] = COMPATS
    ) -> Rules:
        rule = empty_rule(empty, key)
        if compat is not None and compat not in compats:
            raise ConfigError(
                f"{key}.compat={compat!r} is not an option; use one of {', '.join(compats)} or null"
            )
        if better not in ("higher", "lower"):
            raise ConfigError(f"{key}.better={better!r}: use higher or lower (which scores are good)")
        return cls(rule, compat, scale, better)

    def decided(self, what: str, compat_value: Mapping[str, float] | None = None) -> ScoreResult:
        """The score of an empty case, decided without a verdict call."""
        if self.compat and compat_value is not None:
            value, how = compat_value[self.compat], f"as {self.compat} scores it"
        else:
            value = self.empty
            how = f"empty: {'unscored' if math.isnan(value) else f'{value:g}'}"
        if math.isnan(value):
            return ScoreResult.empty(f"{what} ({how})")
        return ScoreResult(value * self.scale, f"{what}: score {value * self.scale:g} ({how}).")


class Statements(Reply):
    statements: list[str]


@functools.cache
def verdicts_reply(names: tuple[str, ...], n: int) -> type[Reply]:
    """Exactly one {reason, verdict} per position 0..n-1 (the count is in the schema's required keys);
    one class per verdict table and size, so the same judges send the same schema (and share cache)."""
    entry = create_model("Verdict", __base__=Reply, reason=(str, ...), verdict=(enum_of(list(names)), ...))
    return create_model("Verdicts", __base__=Reply, verdicts=(per_position("ByPosition", entry, n), ...))


def average_precision(relevance: Sequence[float]) -> float:
    """Σ_k precision@k × rel_k ÷ Σ_k rel_k over the chunks in rank order (precision@k: the relevance
    found in the first k chunks ÷ k); 0 when no chunk is relevant. [1,0,1] -> 0.833, [0,1] -> 0.5."""
    relevant = sum(relevance)
    if relevant == 0:
        return 0.0
    found = total = 0.0
    for k, rel in enumerate(relevance, start=1):
        found += rel
        total += found / k * rel
    return total / relevant


def _peer(weights: Mapping[str, float], unsure: str | None = None) -> Callable[[str], bool]:
    """The peers' binary verdict: "yes" is a verdict of the table's top weight (the unsure one
    aside, when the table names one)."""
    top = max(w for v, w in weights.items() if v != unsure)
    return lambda v: v != unsure and weights[v] == top


def claims_score(
    verdicts: Sequence[str], weights: Mapping[str, float], unsure: str | None, rules: Rules
) -> float:
    """Pure. evalframe: Σ weight ÷ statements. ragas and mastra: supported ÷ statements (Mastra rounds
    to 2 places); deepeval: (supported + unsure) ÷ statements, its "idk" counting as faithful."""
    if not verdicts:
        raise ValueError("no verdicts: an empty case is decided by Rules.decided")
    if rules.compat is None:
        value = sum(weights[v] for v in verdicts) / len(verdicts)
    else:
        yes = _peer(weights, unsure)
        value = sum(yes(v) or (rules.compat == "deepeval" and v == unsure) for v in verdicts) / len(verdicts)
    value *= rules.scale
    return round_half_up(value) if rules.compat == "mastra" else value


def ranking_score(verdicts: Sequence[str], weights: Mapping[str, float], rules: Rules) -> float:
    """Pure. evalframe, deepeval: average precision with rel_k = the verdict's weight (deepeval: its
    yes/no); ragas: the same sum over (relevant chunks + 1e-10); mastra: rounded to 2 places."""
    if not verdicts:
        raise ValueError("no verdicts: an empty case is decided by Rules.decided")
    if rules.compat is None:
        return average_precision([weights[v] for v in verdicts]) * rules.scale
    yes = _peer(weights)
    relevance = [1.0 if yes(v) else 0.0 for v in verdicts]
    if rules.compat == "ragas":
        value = average_precision(relevance) * sum(relevance) / (sum(relevance) + _RAGAS_EPSILON)
    else:
        value = average_precision(relevance)
    value *= rules.scale
    return round_half_up(value) if rules.compat == "mastra" else value


def _label(verdict: str) -> str:
    return verdict.replace("_", " ").capitalize()


def good_verdicts(weights: Mapping[str, float], better: str) -> set[str]:
    """The verdicts a reason need not name: the table's best weight, whichever way is better."""
    best = (max if better == "higher" else min)(weights.values())
    return {v for v, w in weights.items() if w == best}


def named_verdicts(
    labels: Sequence[str], verdicts: Sequence[str], table: Mapping[str, float], good: set[str]
) -> list[str]:
    """A sentence per verdict of `table` that is not a good one, naming the items (by `labels`) given it."""
    parts = []
    for name in table:
        picked = [label for label, v in zip(labels, verdicts, strict=True) if v == name]
        if picked and name not in good:
            parts.append(f"{_label(name)}: {'; '.join(picked)}.")
    return parts


def quoted(text: str) -> str:
    text = " ".join(text.split())
    return f"“{text[:_SNIPPET]}…”" if len(text) > _SNIPPET else f"“{text}”"


@dataclass(frozen=True)
class Claims:
    of: str  # whose statements are judged: output | ground_truth
    verdicts: dict[str, float]
    unsure: str | None = None  # the "the contexts do not say" verdict, which DeepEval counts as faithful

    steps = ("claims", "verdicts")

    @property
    def needs(self) -> tuple[str, ...]:
        return ("contexts", "ground_truth") if self.of == "ground_truth" else ("contexts",)

    @property
    def noun(self) -> str:
        return "claims" if self.of == "output" else "statements"

    def reply_models(self, n: int = 1) -> list[type[Reply]]:
        return [Statements, verdicts_reply(tuple(self.verdicts), n)]

    def variables(self, step: str) -> dict[str, Any]:
        """A step's variables beyond the row's, as validation renders them."""
        return {"statements": ["statement"]} if step == "verdicts" else {}

    def check(self, rules: Rules, key: str) -> None:
        if rules.compat and (self.of != "output" or rules.better != "higher"):
            raise ConfigError(
                f"{key}.compat={rules.compat}: compat reproduces the peers' faithfulness (claims of the "
                "output, higher is better) and context precision; remove it here"
            )

    def reason(self, statements: list[str], verdicts: list[str], value: float, rules: Rules) -> str:
        """Derived from the same verdicts as the score: the count of each, and the statements of
        every verdict that is not the best one, quoted."""
        good = good_verdicts(self.verdicts, rules.better)
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in self.verdicts if v in verdicts)
        noun = self.noun if len(verdicts) > 1 else self.noun.removesuffix("s")
        head = f"Score {value:.2f}: {len(verdicts)} {noun} of the {self.of.replace('_', ' ')}, {counts}."
        labels = [quoted(s) for s in statements]
        return " ".join([head, *named_verdicts(labels, verdicts, self.verdicts, good)])

    async def run(
        self, render: Render, llm: LLM, text: str | None, contexts: list[str], rules: Rules
    ) -> ScoreResult:
        whose = self.of.replace("_", " ")
        if not contexts:
            return rules.decided("no contexts retrieved")
        nothing = f"the {whose} makes no {self.noun}"
        peers = NO_CLAIMS if self.of == "output" else None  # the peers decide no claims of an output only
        if text is None or not text.strip():
            return rules.decided(nothing, peers)
        split = await llm.structured("claims", render("claims"), Statements)
        if not split.ok or split.reply is None:
            return ScoreResult.unscored(f"claims: {split.error}", [split])
        statements = [s for s in split.reply["statements"] if s.strip()]  # a blank one claims nothing
        if not statements:
            decided = rules.decided(nothing, peers)
            decided.steps = [split]
            return decided
        n = len(statements)
        judged = await llm.structured(
            "verdicts", render("verdicts", statements=statements), verdicts_reply(tuple(self.verdicts), n)
        )
        steps = [split, judged]
        if not judged.ok or judged.reply is None:
            return ScoreResult.unscored(f"verdicts: {judged.error}", steps)
        entries = in_order(judged.reply["verdicts"])
        names = [e["verdict"] for e in entries]
        value = claims_score(names, self.verdicts, self.unsure, rules)
        details = {"statements": statements, "verdicts": entries}
        return ScoreResult(value, self.reason(statements, names, value, rules), steps, details)


@dataclass(frozen=True)
class Ranking:
    reference: str  # what a chunk must help produce: ground_truth | output
    verdicts: dict[str, float]

    steps = ("relevance",)

    @property
    def needs(self) -> tuple[str, ...]:
        return ("contexts", "ground_truth") if self.reference == "ground_truth" else ("contexts",)

    def reply_models(self, n: int = 1) -> list[type[Reply]]:
        return [verdicts_reply(tuple(self.verdicts), n)]

    def variables(self, step: str) -> dict[str, Any]:
        return {"reference": self.reference}

    def check(self, rules: Rules, key: str) -> None:
        if rules.compat and rules.better != "higher":
            raise ConfigError(
                f"{key}.compat={rules.compat}: the peers' context precision is higher-is-better"
            )

    def reason(self, contexts: list[str], verdicts: list[str], value: float, rules: Rules) -> str:
        good = good_verdicts(self.verdicts, rules.better)
        kept = [f"#{i}" for i, v in enumerate(verdicts) if v in good]
        head = f"Score {value:.2f}: {len(kept)} of {len(verdicts)} chunks {'/'.join(sorted(good))}"
        head += f" ({', '.join(kept)})." if kept else "."
        labels = [f"#{i} {quoted(c)}" for i, c in enumerate(contexts)]
        return " ".join([head, *named_verdicts(labels, verdicts, self.verdicts, good)])

    async def run(
        self, render: Render, llm: LLM, text: str | None, contexts: list[str], rules: Rules
    ) -> ScoreResult:
        if not contexts:
            return rules.decided("no contexts retrieved", NO_CHUNKS)
        n = len(contexts)
        messages = render("relevance", **self.variables("relevance"))
        judged = await llm.structured("relevance", messages, verdicts_reply(tuple(self.verdicts), n))
        if not judged.ok or judged.reply is None:
            return ScoreResult.unscored(f"relevance: {judged.error}", [judged])
        entries = in_order(judged.reply["verdicts"])
        names = [e["verdict"] for e in entries]
        value = ranking_score(names, self.verdicts, rules)
        return ScoreResult(value, self.reason(contexts, names, value, rules), [judged], {"verdicts": entries})


Grounded = Claims | Ranking
KEYS = {"claims": {"of", "verdicts", "unsure"}, "ranking": {"reference", "verdicts"}}


def parse(kind: str, spec: Mapping[str, Any], key: str) -> Grounded:
    """A claims or ranking form from its config mapping (type and unknown keys checked by the caller)."""
    weights = weights_of(spec.get("verdicts"), f"{key}.verdicts")
    if kind == "claims":
        of = spec.get("of", "output")
        if of not in ("output", "ground_truth"):
            raise ConfigError(f"{key}.of={of!r}: whose statements to judge, output or ground_truth")
        unsure = spec.get("unsure")
        if unsure is not None and unsure not in weights:
            raise ConfigError(f"{key}.unsure={unsure!r} is not one of the verdicts {sorted(weights)}")
        return Claims(of, weights, unsure)
    reference = spec.get("reference", "ground_truth")
    if reference not in ("ground_truth", "output"):
        raise ConfigError(
            f"{key}.reference={reference!r}: what chunks are judged against, ground_truth or output"
        )
    return Ranking(reference, weights)
