"""A generic LLM judge described entirely by config: one prompt file and an output form.

    _target_: evalframe.scorers.judge.Judge
    prompt: factuality/judge.j2         # a path; relative paths not found in the cwd are bundled ones
    output: {type: choice, choices: {same: 1.0, disagree: 0.0}}

Output forms (the reply schema is built from them, so the model is constrained by the enum/range):
- choice:   pick one name of `choices` -> that name's score
- number:   a number in [min, max]     -> (n - min) / (max - min)
- verdicts: statements of the output, each with a verdict of `verdicts` -> mean of their weights

Template variables: input, output, ground_truth (None when absent) and row (all dataset columns).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema, create_model

from evalframe.context import Context
from evalframe.data import Row
from evalframe.errors import ConfigError
from evalframe.llm import ModelSettings
from evalframe.panel import Panel
from evalframe.paths import PROMPTS_DIR
from evalframe.prompts import PromptFile
from evalframe.results import Message, ScoreResult
from evalframe.scorers import JudgeScorer, Reply, round_half_up


def _enum(names: list[str]) -> Any:
    """Literal["a", "b", ...] built at run time, written as a JSON-schema enum (also for a single
    name, which pydantic would write as `const`)."""
    return Annotated[Literal.__getitem__(tuple(names)), WithJsonSchema({"type": "string", "enum": names})]


def _weights(table: Any, key: str) -> dict[str, float]:
    """A {name: weight} table from YAML, every weight a number in [0, 1]."""
    if not isinstance(table, Mapping) or not table:
        raise ConfigError(
            f"{key} must be a non-empty mapping of name: score, e.g. {{same: 1.0, different: 0.0}}"
        )
    weights = {}
    for name, weight in table.items():
        # YAML 1.1 reads the bare keys yes/no as booleans; a verdict table means the words.
        label = ("yes" if name else "no") if isinstance(name, bool) else str(name)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
            raise ConfigError(f"{key}.{label}={weight!r}: a score must be a number between 0 and 1")
        weights[label] = float(weight)
    return weights


@dataclass(frozen=True)
class Choice:
    choices: dict[str, float]

    def reply_model(self) -> type[BaseModel]:
        # The reason comes first so the model argues before it commits to a choice.
        return create_model(
            "ChoiceJudgement", __base__=Reply, reason=(str, ...), choice=(_enum(list(self.choices)), ...)
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
            verdict=(_enum(list(self.verdicts)), ...),
        )
        many: Any = list[statement]  # type: ignore[valid-type]  # a class built at run time
        return create_model("VerdictsJudgement", __base__=Reply, statements=(many, ...), reason=(str, ...))

    def score(self, reply: Mapping[str, Any]) -> tuple[float, str]:
        found = [s["verdict"] for s in reply["statements"]]
        if not found:
            return 0.0, "no statements"
        counts = ", ".join(f"{found.count(v)} {v}" for v in self.verdicts if v in found)
        return sum(self.verdicts[v] for v in found) / len(found), counts


Form = Choice | Number | Verdicts
_KEYS = {"choice": {"choices"}, "number": {"min", "max"}, "verdicts": {"verdicts"}}


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
    if kind == "choice":
        return Choice(_weights(spec.get("choices"), f"{key}.choices"))
    if kind == "verdicts":
        return Verdicts(_weights(spec.get("verdicts"), f"{key}.verdicts"))
    low, high = spec.get("min"), spec.get("max")
    for name, value in (("min", low), ("max", high)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}.{name}={value!r}: set it to a number")
    assert isinstance(low, int | float) and isinstance(high, int | float)  # for mypy; checked above
    if low >= high:
        raise ConfigError(f"{key}.min={low} must be less than {key}.max={high}")
    return Number(float(low), float(high))


def score(form: Form, reply: Mapping[str, Any], scale: float = 1.0) -> float:
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
        prompt: str,
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
    ):
        if empty_output not in ("zero", "judge"):
            raise ConfigError(
                f"empty_output={empty_output!r} is not an option; use empty_output=zero (score 0, no call) "
                "or empty_output=judge (the judge sees empty outputs too)"
            )
        self.empty_output = empty_output
        self.panel = Panel.of(model, models, aggregate, tolerance, repeats, "scorers.<judge>")
        self.prompt = PromptFile(_prompt_path(prompt), "")
        self.system = PromptFile(_prompt_path(system), "") if system else None
        self.output = output
        self.require_ground_truth = require_ground_truth
        self.scale = scale

    @functools.cached_property
    def form(self) -> Form:
        # Parsed on first use, not in __init__: only then does the scorer know its name for errors.
        return parse_output(self.output, f"scorers.{self.name or 'judge'}.output")

    @functools.cached_property
    def reply_model(self) -> type[BaseModel]:
        return self.form.reply_model()  # one class per judge: its response format is built once

    def render(self, row: Row, output: str) -> list[Message]:
        variables = {
            "input": row.input,
            "output": output,
            "ground_truth": row.ground_truth,
            "row": dict(row.extra),
        }
        messages = self.prompt.render(**variables)
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system.render(**variables)[0]["content"]})
        return messages

    def validate(self, sample: Row) -> None:
        self.reply_model  # noqa: B018 - the output form's errors, before any call
        self.render(sample, sample.output or "text")  # StrictUndefined catches variable typos

    async def chain(self, row: Row, output: str, ctx: Context, settings: ModelSettings) -> ScoreResult:
        step = await ctx.llm(settings).structured("judge", self.render(row, output), self.reply_model)
        if not step.ok or step.reply is None:
            return ScoreResult.unscored(f"judge: {step.error}", [step])
        _, label = self.form.score(step.reply)
        return ScoreResult(
            score(self.form, step.reply, self.scale), f"{label}: {step.reply['reason']}", [step], step.reply
        )
