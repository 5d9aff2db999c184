"""A simulated user (`target.simulate`): a model that plays the user of a chatbot, one message at a time,
from the item's `scenario` (what the user is after), until it says the scenario is done or `max_turns`
user turns were sent. It is asked through the same model door as the judges (ctx.llm): the run's
limiter, retries, cache, cost and usage count it as they count a judge, and a test's scripted model can
play it. Its reply is structured, {message, done}, so when it stops is read from the reply's shape,
never guessed from its prose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalframe.config import compose
from evalframe.data.conversations import Conversation, transcript
from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.context import Context
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import StepResult
from evalframe.scorers.prompts import PromptFile

KEY = "target.simulate"
_KEYS = ("user_model", "max_turns", "first_message", "prompt")


class UserTurn(BaseModel):
    """The simulated user's reply: its next message, and whether the scenario is over."""

    model_config = ConfigDict(extra="forbid")
    message: str = Field(description="Your next message to the assistant, as the user would write it.")
    done: bool = Field(
        description="true when the scenario is over (you got what you came for, or it cannot be had): "
        "then no message is sent"
    )


@dataclass(frozen=True)
class Simulation:
    """The simulated user's settings, checked when the target is built (before any call)."""

    user_model: ModelSettings
    max_turns: int
    first_message: str | None
    prompt: PromptFile

    def identity(self) -> str:
        """What its conversations depend on beyond the config: its prompt's text."""
        return self.prompt.text()

    def render(self, row: Row, so_far: Conversation, sent: int) -> list[dict[str, str]]:
        return self.prompt.render(
            scenario=row.scenario or "",
            chatbot_role=row.chatbot_role,
            expected_outcome=row.expected_outcome,
            transcript=transcript(so_far),
            conversation=so_far.as_records(),
            turn=sent + 1,
            max_turns=self.max_turns,
            row=dict(row.extra),
        )

    async def next_message(
        self, row: Row, so_far: Conversation, sent: int, ctx: Context
    ) -> tuple[str | None, StepResult | None]:
        """The user's next message (None: the scenario is done) and the user model's step (None for a
        configured first message). The first message is always sent: a conversation has one exchange
        at least, so a `done` before any message is read as not done."""
        if sent == 0 and self.first_message is not None:
            return self.first_message, None
        step = await ctx.llm(self.user_model).structured(
            "simulated_user", self.render(row, so_far, sent), UserTurn
        )
        if not step.ok or step.reply is None:
            return None, step
        if step.reply["done"] and sent > 0:
            return None, step
        return str(step.reply["message"]), step


def simulation_of(spec: Mapping[str, Any] | None) -> Simulation | None:
    """`target.simulate` as settings: None while it has no user_model (the block's default). Every
    value is checked whether or not it is on, so a typo never waits for the day it is switched on."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{KEY} must be a mapping of {', '.join(_KEYS)}, got {spec!r:.60}")
    unknown = sorted(set(map(str, spec)) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{KEY}.{unknown[0]} is not a setting; use {', '.join(_KEYS)}")
    turns = spec.get("max_turns", 5)
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise ConfigError(
            f"{KEY}.max_turns={turns!r}: the most user turns of a simulated conversation, "
            "an integer of 1 or more"
        )
    first = spec.get("first_message")
    if first is not None and (not isinstance(first, str) or not first.strip()):
        raise ConfigError(f"{KEY}.first_message={first!r}: give the user's opening text, or null")
    prompt = PromptFile(spec.get("prompt"), "target/simulated_user.j2")
    chosen = spec.get("user_model")
    if chosen is None:
        return None
    return Simulation(_model(chosen), turns, first, prompt)


def _model(chosen: Any) -> ModelSettings:
    """A model preset's name (gpt, claude...) or a mapping of a model's settings, as a judge's."""
    key = f"{KEY}.user_model"
    if isinstance(chosen, str):
        settings = ModelSettings.from_config(compose.preset(chosen, key), key)
    elif isinstance(chosen, Mapping):
        settings = ModelSettings.from_config({str(k): v for k, v in chosen.items()}, key)
    else:
        raise ConfigError(f"{key}={chosen!r}: name a model preset (gpt, claude...) or give a mapping")
    if settings.batch:
        raise ConfigError(f"{key}.batch=true: a simulated user answers turn by turn; set batch=false")
    return settings
