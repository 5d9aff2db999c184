"""Targets over conversations: a live target (llm, python, http) given a row with `messages` replays the
recorded user turns and regenerates every assistant turn; with `target.simulate` a simulated user
(targets.simulated) writes the user turns from the row's `scenario` instead.

Each user turn is answered with the conversation so far: the system message, the user turns before it
and the target's OWN earlier answers (never the recorded ones), so the assistant is judged on what it
would have said. The recorded assistant and tool turns are what is regenerated, so they are not sent.
How each target receives the conversation so far is its own (`answers`: the row's `messages`).

The new conversation is the item's: it is handed over in the step's reply (data.handed: `messages`, as
records, with `stopped` for a simulation), which results.jsonl keeps, so `evalframe rescore` and
`dataset=run` judge it again with no target and no user-model call. Its last assistant turn is the
item's output. A turn that fails (the target, the user model) fails the whole item, with the turn named:
a conversation cut short is never judged as if it were complete.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from evalframe.data import handed as handover, rows as data
from evalframe.data.conversations import Conversation, Turn
from evalframe.data.rows import Row
from evalframe.errors import DataError
from evalframe.models.context import Context
from evalframe.models.steps import StepResult
from evalframe.targets.base import Target
from evalframe.targets.simulated import Simulation, simulation_of


class Conversing(Target):
    """A live target that answers conversations too. `answers(rows, ctx)` is its one-answer-per-row
    call; a row given to it with `messages` holds the conversation so far, ending in the user turn to
    answer (its `input` is that turn's text)."""

    simulation: Simulation | None = None

    def simulate(self, spec: Mapping[str, Any] | None) -> None:
        """Set up `target.simulate`; a simulation provides every item's conversation, which the rows
        then need not have (a conversation judge's need is met by each reply instead)."""
        self.simulation = simulation_of(spec)
        if self.simulation is not None:
            self.provides = self.provides | {"messages"}

    @abstractmethod
    async def answers(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        """One (output, step) per row, in order; advances the progress bar once per row."""

    def talks(self, row: Row) -> bool:
        """Whether the row is a conversation this target holds (replayed or simulated)."""
        return self.simulation is not None or row.messages is not None

    def validate_conversations(self, rows: list[Row], source: str) -> None:
        """Before any call: every row of a simulation has its scenario, and the user model its key."""
        if self.simulation is None:
            return
        key = "target.simulate.user_model"
        self.simulation.user_model.check_credentials(key, pick=f"{key}=")  # a preset's name, no group
        data.require(rows, source, "scenario", "target.simulate needs (what the simulated user is after)")

    def identity(self) -> str:
        return self.simulation.identity() if self.simulation else ""

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        chats = [i for i, row in enumerate(rows) if self.talks(row)]
        plain = [i for i in range(len(rows)) if i not in set(chats)]
        produced: dict[int, tuple[str, StepResult | None]] = {}
        if plain:
            produced.update(zip(plain, await self.answers([rows[i] for i in plain], ctx), strict=True))
        talked = await asyncio.gather(*(self._conversation(rows[i], ctx) for i in chats))
        produced.update(zip(chats, talked, strict=True))
        return [produced[i] for i in range(len(rows))]

    async def _conversation(self, row: Row, ctx: Context) -> tuple[str, StepResult]:
        quiet = copy.copy(ctx)  # the same door, limiter and totals; the bar moves once per conversation
        quiet.advance = lambda: None
        talk = Talk(self, row, quiet)
        try:
            if self.simulation is not None:
                await talk.simulate(self.simulation)
            else:
                await talk.replay()
        except _TurnFailed as failed:
            talk.step.error = str(failed)
        ctx.advance()
        return talk.result()


class _TurnFailed(Exception):
    """A turn of a conversation failed: the item has no conversation to judge."""


class Talk:
    """One conversation as it is made: the turns so far and every step that made them."""

    def __init__(self, target: Conversing, row: Row, ctx: Context):
        self.target, self.row, self.ctx = target, row, ctx
        self.turns: list[Turn] = []
        self.last: StepResult | None = None  # the target's last answer: its handed fields are the item's
        self.step = StepResult("target", messages=[], attempts=0)
        self.stopped: str | None = None
        self.cached = True  # every step served from the cache: the conversation cost nothing

    def add(self, role: str, content: str, reply: Mapping[str, Any] | None = None) -> None:
        found = handover.fields(reply, f"{self.target.label}, item {self.row.id}") if reply else {}
        calls = tuple(found.get("tool_calls") or ())
        contexts = tuple(found["contexts"]) if found.get("contexts") is not None else None
        self.turns.append(Turn(len(self.turns) + 1, role, content, calls, contexts))

    def count(self, step: StepResult) -> None:
        """A step's attempts, latency and usage into the conversation's (a user model's too)."""
        self.step.attempts += step.attempts
        self.step.latency += step.latency
        self.step.usage = self.step.usage + step.usage
        self.cached = self.cached and step.cached

    async def answer(self, user_turn: int) -> None:
        """The target's answer to the conversation so far, as the next assistant turn."""
        so_far = Conversation(tuple(self.turns))
        asked = dataclasses.replace(self.row, input=self.turns[-1].content, messages=so_far, output=None)
        [(output, step)] = await self.target.answers([asked], self.ctx)
        if step is None:
            step = StepResult("target", messages=[], raw=output)
        self.count(step)
        if step.error is not None:
            raise _TurnFailed(f"{self.target.label} failed on user turn {user_turn}: {step.error}")
        try:
            self.add("assistant", output, step.reply)
        except DataError as e:
            raise _TurnFailed(str(e)) from None
        self.last = step

    async def replay(self) -> None:
        """The recorded system and user turns, each user turn answered by the target."""
        assert self.row.messages is not None
        number = 0
        for turn in self.row.messages:
            if turn.role == "system":
                self.add("system", turn.content)
            elif turn.role == "user":
                number += 1
                self.add("user", turn.content)
                await self.answer(number)

    async def simulate(self, simulation: Simulation) -> None:
        """The simulated user's messages, each answered, until it is done or max_turns were sent."""
        recorded = self.row.messages.first("system") if self.row.messages else None
        if recorded is not None:  # the chatbot's own framing, where the dataset has one
            self.add("system", recorded.content)
        for sent in range(simulation.max_turns):
            message, step = await simulation.next_message(
                self.row, Conversation(tuple(self.turns)), sent, self.ctx
            )
            if step is not None:
                self.count(step)
                if not step.ok:
                    model = simulation.user_model.name
                    raise _TurnFailed(
                        f"the simulated user ({model}) failed before user turn {sent + 1}: {step.error}"
                    )
            if message is None:
                self.stopped = "done"
                return
            self.add("user", message)
            await self.answer(sent + 1)
        self.stopped = "max_turns"

    def result(self) -> tuple[str, StepResult]:
        """The item's output (the last assistant turn) and its step: the conversation in its reply."""
        step = self.step
        if step.error is not None or self.last is None:
            step.error = step.error or f"{self.target.label}: item {self.row.id} has no user turn to answer"
            return "", step
        made = Conversation(tuple(self.turns))
        output = made.last("assistant").content  # type: ignore[union-attr]  # self.last answered one
        reply = self.last.reply or {}
        handed = {**handover.as_json(handover.fields(reply, self.target.label)), **handover.trace_of(reply)}
        step.reply = {**handed, "output": output, "messages": made.as_records()}
        if self.stopped is not None:
            step.reply["stopped"] = self.stopped
        step.messages, step.raw = self.last.messages, self.last.raw
        step.cached = self.cached
        return output, step
