"""A generic LLM judge described entirely by config: one prompt file and an output form.

    _target_: evalframe.scorers.judge.Judge
    prompt: factuality/judge.j2         # a path; relative paths not found in the cwd are bundled ones
    output: {type: choice, choices: {same: 1.0, disagree: 0.0}}

Output forms (the reply schema is built from them, so the model is constrained by the enum/range):
- choice:   pick one name of `choices` -> that name's score
- number:   a number in [min, max]     -> (n - min) / (max - min)
- verdicts: statements of the output, each with a verdict of `verdicts` -> mean of their weights
- claims, ranking: judged against the row's contexts in steps, one prompt file each
  (`prompt: {claims: ..., verdicts: ...}`, `prompt: {relevance: ...}`): evalframe.scorers.grounded
- turns, intentions, rules: judged on the row's conversation (`messages`): evalframe.scorers.conversational,
  with the options unit (conversation | turn | window), window, max_turns, max_tokens and rules

Optional `examples: {file, retrieve, embedding}`: labelled examples retrieved per item, the `retrieve`
nearest by embedding, as the template variable `examples` (evalframe.scorers.retrieval; `evalframe align
align.retrieve=K` writes it).

Template variables: input, output, ground_truth (None when absent), contexts (the retrieved chunks, a
list; None when the dataset has none), row (all dataset columns), statements in a verdicts step; and
for a conversation row (`messages`): conversation (the Conversation as the judge sees it, cut to
max_turns / max_tokens), expected_outcome, chatbot_role, scenario (None when absent), turns (the
numbers of the assistant turns to judge), turn (unit=turn / window: the judged turn's number, else
None) and rules; the function transcript(conversation) writes it as numbered lines.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, create_model

from evalframe.data.rows import CONVERSATION, Row
from evalframe.data.values import LISTS
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message
from evalframe.paths import PROMPTS_DIR
from evalframe.results.scores import ScoreResult
from evalframe.scorers import conversational
from evalframe.scorers.base import COMPATS, JudgeScorer, Reply, enum_of, round_half_up, weights_of
from evalframe.scorers.conversational import Checklist, Conversational, Scope, Turns
from evalframe.scorers.grounded import KEYS, Claims, Grounded, Ranking, Rules, parse
from evalframe.scorers.panel import Panel
from evalframe.scorers.prompts import PromptFile
from evalframe.scorers.retrieval import Retrieval


@dataclass(frozen=True)
class Choice:
    choices: dict[str, float]

    def reply_model(self) -> type[BaseModel]:
        # The reason comes first so the model argues before it commits to a choice.
        return create_model(
            "ChoiceJudgement", __base__=Reply, reason=(str, ...), choice=(enum_of(list(self.choices)), ...)
        )

    def score(self, reply: Mapping[str, Any]) -> tuple[float, str]:
        return self.choices[reply["choice"]], str(reply["choice"])


@dataclass(frozen=True)
class Number:
    min: float
    max: float

    def reply_model(self) -> type[BaseModel]:
        # ge/le reach the JSON schema as minimum/maximum, and pydantic rejects an out-of-range reply.
        rating = (float, Field(ge=self.min, le=self.max))
        return create_model("NumberJudgement", __base__=Reply, reason=(str, ...), rating=rating)

    def score(self, reply: Mapping[str, Any]) -> tuple[float, str]:
        n = float(reply["rating"])
        return (n - self.min) / (self.max - self.min), f"{n:g}"


@dataclass(frozen=True)
class Verdicts:
    verdicts: dict[str, float]

    def reply_model(self) -> type[BaseModel]:
        statement = create_model(
            "Statement",
            __base__=Reply,
            statement=(str, ...),
            reason=(str, ...),
            verdict=(enum_of(list(self.verdicts)), ...),
        )
        many: Any = list[statement]  # type: ignore[valid-type]  # a class built at run time
        return create_model("VerdictsJudgement", __base__=Reply, statements=(many, ...), reason=(str, ...))

    def score(self, reply: Mapping[str, Any]) -> tuple[float, str]:
        found = [s["verdict"] for s in reply["statements"]]
        if not found:
            return 0.0, "no statements"
        counts = ", ".join(f"{found.count(v)} {v}" for v in self.verdicts if v in found)
        return sum(self.verdicts[v] for v in found) / len(found), counts


Form = Choice | Number | Verdicts | Grounded | Conversational
PER_ITEM = (Claims, Ranking, Turns, Checklist)  # forms whose reply schemas are built per item, in steps
_KEYS = {
    "choice": {"choices"},
    "number": {"min", "max"},
    "verdicts": {"verdicts"},
    **KEYS,
    **conversational.KEYS,
}


def parse_output(spec: Any, key: str) -> Form:
    """The output form a config mapping describes; every mistake names the config key to fix."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{key} must be a mapping with a type: one of {sorted(_KEYS)}")
    kind = spec.get("type")
    if kind not in _KEYS:
        raise ConfigError(f"{key}.type={kind!r} is not an output form; use one of {sorted(_KEYS)}")
    unknown = sorted(set(spec) - _KEYS[kind] - {"type"})
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {unknown} for type {kind}; it takes {sorted(_KEYS[kind])}")
    if kind in KEYS:
        return parse(kind, spec, key)
    if kind in conversational.KEYS:
        return conversational.parse(kind, spec, key)
    if kind == "choice":
        return Choice(weights_of(spec.get("choices"), f"{key}.choices"))
    if kind == "verdicts":
        return Verdicts(weights_of(spec.get("verdicts"), f"{key}.verdicts"))
    low, high = spec.get("min"), spec.get("max")
    for name, value in (("min", low), ("max", high)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}.{name}={value!r}: set it to a number")
    assert isinstance(low, int | float) and isinstance(high, int | float)  # for mypy; checked above
    if low >= high:
        raise ConfigError(f"{key}.min={low} must be less than {key}.max={high}")
    return Number(float(low), float(high))


def score(form: Choice | Number | Verdicts, reply: Mapping[str, Any], scale: float = 1.0) -> float:
    """Pure: the same reply re-scores under another table or scale without a model call."""
    value, _ = form.score(reply)
    return round_half_up(min(max(value, 0.0), 1.0) * scale)


def _prompt_path(path: str) -> Path:
    """A path as given, else relative to the bundled prompts/ (e.g. factuality/judge.j2)."""
    given = Path(path).expanduser()
    return given if given.is_absolute() or given.exists() else PROMPTS_DIR / given


class Judge(JudgeScorer):
    def __init__(
        self,
        prompt: str | Mapping[str, str],
        output: Mapping[str, Any],
        model: Mapping[str, Any],
        system: str | None = None,
        require_ground_truth: bool = True,
        scale: float = 1.0,
        empty_output: str = "zero",
        models: list[Any] | None = None,
        aggregate: str = "mean",
        tolerance: float = 0.2,
        repeats: int = 1,
        needs: list[str] | None = None,
        empty: Any = "unscored",
        compat: str | None = None,
        better: str = "higher",
        unit: str = "conversation",
        window: int | None = None,
        max_turns: int | None = None,
        max_tokens: int | None = None,
        rules: list[str] | None = None,
        examples: Mapping[str, Any] | None = None,
    ):
        if empty_output not in ("zero", "judge"):
            raise ConfigError(
                f"empty_output={empty_output!r} is not an option; use empty_output=zero (score 0, no call) "
                "or empty_output=judge (the judge sees empty outputs too)"
            )
        unknown = sorted(set(needs or ()) - set(LISTS) - set(CONVERSATION))
        if unknown:
            raise ConfigError(
                f"needs={unknown}: a judge can need the list columns {', '.join(LISTS)} or the "
                f"conversation columns {', '.join(CONVERSATION)}"
            )
        if aggregate == "all":  # the "aggregate: all" of turns, said where it belongs
            raise ConfigError(
                "aggregate=all: `aggregate` combines a panel's judges; every turn, intention or rule "
                "passing is the output form's: output.aggregate=all"
            )
        self.empty_output = empty_output
        self.panel = Panel.of(model, models, aggregate, tolerance, repeats, "scorers.<judge>")
        self.prompts = (
            {step: PromptFile(_prompt_path(path), "") for step, path in prompt.items()}
            if isinstance(prompt, Mapping)
            else {"judge": PromptFile(_prompt_path(prompt), "")}
        )
        self.system = PromptFile(_prompt_path(system), "") if system else None
        self.output = output
        self.require_ground_truth = require_ground_truth
        self.scale = scale
        self.needs = tuple(needs or ())
        self.better = better
        self._rules = (empty, compat)
        self._scope = (unit, window, max_turns, max_tokens, rules or [])
        self._examples = examples  # retrieved per item (scorers.retrieval): what `align.retrieve` writes

    @property
    def key(self) -> str:
        return f"scorers.{self.name or 'judge'}"

    @functools.cached_property
    def form(self) -> Form:
        # Parsed on first use, not in __init__: only then does the scorer know its name for errors.
        form = parse_output(self.output, f"{self.key}.output")
        steps = getattr(form, "steps", ("judge",))
        if set(self.prompts) != set(steps):
            given = sorted(self.prompts)
            want = (
                "one prompt file"
                if steps == ("judge",)
                else "prompt: {" + ", ".join(f"{s}: FILE" for s in steps) + "}"
            )
            raise ConfigError(
                f"{self.key}.prompt: output type {self.output.get('type')} takes {want}; got {given}"
            )
        return form

    @functools.cached_property
    def rules(self) -> Rules:
        empty, compat = self._rules
        form = self.form
        compats = form.compats if isinstance(form, Turns | Checklist) else COMPATS
        rules = Rules.of(empty, compat, self.scale, self.better, self.key, compats)
        if isinstance(form, Claims | Ranking):
            form.check(rules, self.key)
        elif compat is not None and not isinstance(form, Turns | Checklist):
            raise ConfigError(
                f"{self.key}.compat applies to the claims, ranking, turns, intentions and rules output "
                "forms only"
            )
        return rules

    @functools.cached_property
    def scope(self) -> Scope:
        """What of a conversation the judge sees (checked before any call: window=0 stops the run)."""
        scope = Scope.of(*self._scope, self.key)
        if scope.unit != "conversation" and not isinstance(self.form, Turns):
            raise ConfigError(
                f"{self.key}.unit={scope.unit}: one call per assistant turn needs output type turns; "
                "use unit=conversation"
            )
        return scope

    @functools.cached_property
    def retrieval(self) -> Retrieval | None:
        if self._examples is None:
            return None
        if isinstance(self.form, PER_ITEM):
            raise ConfigError(
                f"{self.key}.examples: retrieved examples go with output type choice, number or verdicts"
            )
        return Retrieval.of(self._examples, f"{self.key}.examples")

    def identity(self) -> str:
        found = super().identity()
        return found if self.retrieval is None else f"{found}\nexamples\n{self.retrieval.text()}"

    def required(self) -> tuple[str, ...]:
        extra = self.form.needs if isinstance(self.form, PER_ITEM) else ()
        return tuple(dict.fromkeys((*super().required(), *extra)))

    @functools.cached_property
    def reply_model(self) -> type[BaseModel]:
        assert not isinstance(self.form, PER_ITEM)  # their schemas are per item
        return self.form.reply_model()  # one class per judge: its response format is built once

    def render(self, row: Row, output: str, step: str = "judge", **extra: Any) -> list[Message]:
        variables = {
            "input": row.input,
            "output": output,
            "ground_truth": row.ground_truth,
            "contexts": row.contexts,
            "row": dict(row.extra),
            **({"examples": []} if self._examples is not None else {}),  # the item's: given in `extra`
            **(self._conversation(row) if row.messages is not None else {}),
            **extra,
        }
        messages = self.prompts[step].render(**variables)
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system.render(**variables)[0]["content"]})
        return messages

    def _conversation(self, row: Row) -> dict[str, Any]:
        """A conversation row's variables (a row without `messages` has none of them)."""
        assert row.messages is not None
        return {
            "conversation": self.scope.view(row.messages)[0],
            "expected_outcome": row.expected_outcome,
            "chatbot_role": row.chatbot_role,
            "scenario": row.scenario,
            "turns": [t.number for t in row.messages.assistant_turns],
            "turn": None,
            "rules": list(self.scope.rules),
        }

    def validate(self, sample: Row) -> None:
        # The output form's and rules' errors, then every step rendered once (StrictUndefined catches
        # variable typos), before any call.
        self.rules  # noqa: B018
        self.scope  # noqa: B018
        self.retrieval  # noqa: B018
        if not isinstance(self.form, PER_ITEM):
            self.reply_model  # noqa: B018
        for step in self.prompts:
            extra = self.form.variables(step) if isinstance(self.form, PER_ITEM) else {}
            self.render(sample, sample.output or "text", step, **extra)
            last = sample.messages.last("assistant") if sample.messages is not None else None
            if isinstance(self.form, Turns) and last is not None:  # a per-turn prompt's branch too
                self.render(sample, sample.output or "text", step, turns=[last.number], turn=last.number)

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        form, llm = self.form, ctx.llm(settings)
        if isinstance(form, Claims | Ranking):
            text = output if getattr(form, "of", "output") == "output" else row.ground_truth
            render = functools.partial(self.render, row, output)
            return await form.run(render, llm, text, row.contexts or [], self.rules)
        if isinstance(form, Turns | Checklist):
            assert row.messages is not None  # its needs (messages) are checked before any call
            render = functools.partial(self.render, row, output)
            return await form.run(self.scope, render, llm, row.messages, self.rules)
        extra: dict[str, Any] = {}
        if self.retrieval is not None:
            shown = await self.retrieval.nearest(row, output, ctx)
            if isinstance(shown, str):
                return ScoreResult.unscored(shown)
            extra["examples"] = shown
        step = await llm.structured("judge", self.render(row, output, **extra), self.reply_model)
        if not step.ok or step.reply is None:
            return ScoreResult.unscored(f"judge: {step.error}", [step])
        _, label = form.score(step.reply)
        details = step.reply
        if row.messages is not None:  # a choice over a conversation (goal_accuracy): what was cut from it
            details = {**details, "truncated_turns": list(self.scope.view(row.messages)[1])}
        return ScoreResult(
            score(form, step.reply, self.scale), f"{label}: {step.reply['reason']}", [step], details
        )
