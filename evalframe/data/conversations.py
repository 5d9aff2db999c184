"""Conversations: a chat as one item, read from any of the shapes peers write it in.

A row's `messages` column is a list of messages, each recognised on its own (a file may mix them):
- OpenAI chat: {role: system|user|assistant|tool, content, tool_calls?} (content may be null beside
  tool calls, or a list of {type: text, text} parts);
- DeepEval turns: {role: user|assistant, content, retrieval_context?, tools_called?: [{name,
  input_parameters}]};
- RAGAS messages: {type: system|human|ai|tool, content, tool_calls?: [{name, args}]}.
Each becomes the same Turn, so the same conversation in any shape is the same item: the prompts a
judge renders from it are identical, and the judge cache answers the second shape.

Turns are numbered from 1 in the order given (a system message too), and a turn keeps its number when
older turns are cut from a prompt: a judge's verdict on `turn_4` means the same turn in every prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.data.values import ToolCall, as_text, tool_call
from evalframe.errors import DataError

ROLES = ("system", "user", "assistant", "tool")
_RAGAS_TYPES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class Turn:
    number: int  # 1-based position in the conversation, kept when older turns are cut from a prompt
    role: str  # one of ROLES
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    contexts: tuple[str, ...] | None = None  # what a RAG assistant retrieved for this turn

    def as_dict(self) -> dict[str, Any]:
        """The turn as plain data (results.jsonl, prompts): empty fields left out, so every input shape
        gives the same record."""
        record: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            record["tool_calls"] = [call.as_dict() for call in self.tool_calls]
        if self.contexts is not None:
            record["contexts"] = list(self.contexts)
        return record


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]

    def __iter__(self) -> Iterator[Turn]:
        return iter(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    @property
    def assistant_turns(self) -> tuple[Turn, ...]:
        return tuple(t for t in self.turns if t.role == "assistant")

    @property
    def user_turns(self) -> tuple[Turn, ...]:
        return tuple(t for t in self.turns if t.role == "user")

    def first(self, role: str) -> Turn | None:
        return next((t for t in self.turns if t.role == role), None)

    def last(self, role: str) -> Turn | None:
        return next((t for t in reversed(self.turns) if t.role == role), None)

    def until(self, turn: Turn, window: int | None = None) -> Conversation:
        """The conversation up to and including `turn`, with at most `window` messages before it (None:
        all of them); a system message is kept whatever the window, as it frames every turn."""
        before = [t for t in self.turns if t.number < turn.number]
        system = [t for t in before if t.role == "system"]
        others = [t for t in before if t.role != "system"]
        if window is not None:
            # max(0, ...): a window wider than what came before keeps all of it (a negative start would cut)
            others = others[max(0, len(others) - window) :] if window else []
        return Conversation((*system, *others, turn))

    def as_records(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.turns]


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, null (an assistant turn that only calls tools), or
    OpenAI's list of parts, whose text parts are joined. A part of another type (an image, audio, a
    file) stands as its type, `[image]`, `[input_audio]`: the judges read text, and the conversation
    is still judged on what was said around it."""
    if content is None:
        return ""
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            elif isinstance(kind, str) and kind.strip() and kind != "text":
                parts.append("[image]" if "image" in kind else f"[{kind}]")
            else:
                raise DataError(
                    f"{where}: a content part must be text, {{type: text, text: ...}} or a typed part "
                    "({type: image_url, ...})"
                )
        return "\n".join(parts)
    return as_text(content) or ""


def _call(value: Any, field: str, where: str) -> ToolCall:
    """A tool call in any of the three shapes: OpenAI's, DeepEval's ToolCall (input_parameters) or
    RAGAS' (args)."""
    if isinstance(value, Mapping) and "function" not in value and "arguments" not in value:
        for key in ("input_parameters", "args"):
            if key in value:
                value = {"name": value.get("name"), "arguments": value[key]}
                break
    return tool_call(value, field, where)


def _role(message: Mapping[str, Any], where: str) -> str:
    if "role" not in message and isinstance(message.get("type"), str):  # RAGAS
        role = _RAGAS_TYPES.get(message["type"])
        if role is None:
            raise DataError(
                f"{where}: type {message['type']!r} is not a message type; use one of {sorted(_RAGAS_TYPES)}"
            )
        return role
    role = message.get("role")
    if role == "developer":  # OpenAI's newer name for the system message
        return "system"
    if role not in ROLES:
        raise DataError(
            f"{where}: role {role!r} is not a role; use one of {', '.join(ROLES)} "
            "(or RAGAS' type: human, ai, tool)"
        )
    return str(role)


def _turn(number: int, message: Any, field: str, where: str) -> Turn:
    """Message `number` (1-based) of a conversation; `field` names it in errors: 'messages'[2]."""
    if not isinstance(message, Mapping):
        raise DataError(f"{where}: {field} must be an object with a role and content")
    role = _role(message, f"{where}: {field}")
    calls = message.get("tool_calls") or message.get("tools_called") or []
    if not isinstance(calls, list):
        raise DataError(f"{where}: {field}.tool_calls must be a list")
    contexts = message.get("contexts", message.get("retrieval_context"))
    if contexts is not None and not (
        isinstance(contexts, list) and all(isinstance(c, str) for c in contexts)
    ):
        raise DataError(f"{where}: {field}.contexts (retrieval_context) must be a list of texts")
    return Turn(
        number=number,
        role=role,
        content=_text(message.get("content"), f"{where}: {field}"),
        tool_calls=tuple(_call(c, f"{field}.tool_calls[{i}]", where) for i, c in enumerate(calls)),
        contexts=tuple(contexts) if contexts is not None else None,
    )


def conversation_of(value: Any, column: str, where: str) -> Conversation:
    """A `messages` column's value as a Conversation, each message recognised by its own keys; errors
    name the row (`where`), the column and the message's position."""
    if not isinstance(value, list):
        raise DataError(f"{where}: {column!r} must be a list of messages, got {type(value).__name__}")
    turns = tuple(_turn(i, m, f"{column!r}[{i - 1}]", where) for i, m in enumerate(value, start=1))
    if not any(t.role == "user" for t in turns):
        raise DataError(f"{where}: {column!r} has no user message; a conversation starts with one")
    return Conversation(turns)


def transcript(conversation: Conversation) -> str:
    """The conversation as numbered text, what a judge reads: one line per turn, `[N] role: content`,
    then each tool call the turn made on its own line."""
    lines = []
    for turn in conversation:
        lines.append(f"[{turn.number}] {turn.role}: {turn.content}".rstrip())
        for call in turn.tool_calls:
            arguments = json.dumps(dict(call.arguments), ensure_ascii=False, sort_keys=True)
            lines.append(f"    -> calls {call.name}({arguments})")
    return "\n".join(lines)


def tokens(text: str) -> int:
    """A model-independent estimate of a text's tokens (4 characters each, rounded up): a budget for
    cutting a transcript, not a bill. The judge's own tokenizer is behind LiteLLM, out of this layer."""
    return -(-len(text) // 4)


def truncated(
    conversation: Conversation, max_turns: int | None = None, max_tokens: int | None = None
) -> tuple[Conversation, tuple[int, ...]]:
    """The conversation with its oldest turns cut until at most `max_turns` turns and about
    `max_tokens` tokens of transcript are left (None: no limit), and the numbers of the turns cut. A
    system message is kept, and so is the last turn, whatever the limits: a judge needs both."""
    system = [t for t in conversation if t.role == "system"]
    others = [t for t in conversation if t.role != "system"]
    cut: list[int] = []

    def over() -> bool:
        kept = Conversation((*system, *others))
        too_many = max_turns is not None and len(others) > max_turns
        return too_many or (max_tokens is not None and tokens(transcript(kept)) > max_tokens)

    while len(others) > 1 and over():
        cut.append(others.pop(0).number)
    return Conversation((*system, *others)), tuple(cut)
