"""A row's values, checked one cell at a time: text, human scores, the list columns (contexts, ids,
tool calls) whether written as lists or as JSON text, and every string valid Unicode, every number
finite. Each error names the field and where it is."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.errors import DataError

# Columns of retrieval-augmented and tool-using applications: lists, each optional, mapped like the
# others (dataset.columns.contexts=...). A scorer that needs one names it in `needs`.
LISTS = (
    "contexts",
    "context_ids",
    "reference_context_ids",
    "tool_calls",
    "expected_tool_calls",
    "available_tools",
)
# Those a live target may hand over beside its output, from what the application did (data.handed).
HANDED = ("contexts", "context_ids", "tool_calls")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


def as_text(value: Any) -> str | None:
    """Dataset values as text. Non-string values (numbers, lists, objects) become JSON text, as the
    reference system serialises non-string ground truth."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def human_score(
    record: Mapping[str, Any], column: str | None, where: str, labels: Mapping[str, float] | None = None
) -> float | None:
    """The person's score in `column`; `labels` turns a categorical answer into its number (a
    question's choices scored as the scorer's judge's are: run.sources.label_values)."""
    if column is None:
        return None
    value = record.get(column)
    if labels and isinstance(value, str) and value in labels:
        value = labels[value]
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        score = math.nan
    if not math.isfinite(score):  # "nan" and "inf" are floats to Python, never a person's score
        raise DataError(
            f"{where}: the human score ({column!r}) is {value!r}, not a finite number; fix it or drop the row"
        )
    return score


def json_list(value: Any, column: str, where: str) -> list[Any]:
    """A list column's value: a list, or a JSON list written as text (a CSV cell)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:  # an empty CSV cell: nothing retrieved, no call made (each scorer's `empty` rule)
            return []
        if not text.startswith("["):
            raise DataError(
                f"{where}: {column!r} must be a list (a JSON list in a CSV cell), got text {_short(value)}"
            )
        value = _loads(text, f"{where}: {column!r} is not a valid JSON list", repr(column), where)
    if not isinstance(value, list):
        raise DataError(f"{where}: {column!r} must be a list, got {type(value).__name__}")
    return value


def _loads(text: str, problem: str, field: str, where: str) -> Any:
    """JSON text's value, checked as a record's values are (`field` names it), or a DataError saying
    `problem` and where the text breaks."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{problem} ({e.msg} at column {e.colno})") from None
    check_values(value, field, where)
    return value


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every key and value that is no mapping or list, at any depth, with its path: 'tool_calls'[0].name."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield f"a key of {path}", key
            yield from _leaves(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def check_values(value: Any, field: str, where: str) -> None:
    """Text and numbers are checked once, at the door: every string is valid Unicode, every number
    finite. A lone surrogate (JSON's "\\ud800") reads and validates fine but cannot be written as
    UTF-8, so results.jsonl would stop the run half-way through with a traceback. NaN equals nothing,
    not even itself (a tool call holding it scores 0), and neither it nor Infinity (JSON's NaN,
    Infinity, 1e999) is standard JSON for results.jsonl."""
    for path, leaf in _leaves(value, field):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            raise DataError(f"{where}: {path} is {leaf}, not a finite number; fix it or drop the row")
    problem = invalid_text(value, field)
    if problem:
        raise DataError(f"{where}: {problem}; fix the text or drop the row")


def invalid_text(value: Any, field: str) -> str | None:
    """What makes a text (or any JSON data, `field` naming it) unfit to be written as UTF-8, the first
    lone surrogate and where, or None. The same door for what comes from outside while a run goes on
    (a target's answer, a model's reply: a cut emoji), which fails that item instead of the run."""
    for path, leaf in _leaves(value, field):
        if isinstance(leaf, str):
            try:
                leaf.encode("utf-8")
            except UnicodeEncodeError as e:
                return (
                    f"{path} is not valid Unicode text (a lone surrogate, {leaf[e.start]!r}, "
                    f"at character {e.start})"
                )
    return None


def printable(text: str) -> str:
    """`text` with any lone surrogate written as its escape (\\ud83d): kept for debugging, writable."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _texts(value: list[Any], column: str, where: str) -> list[str]:
    """Chunks or ids as text: strings as they are, numbers and objects as JSON text."""
    out = []
    for i, v in enumerate(value):
        if v is None:
            raise DataError(f"{where}: {column!r}[{i}] is null; drop it or give its text")
        out.append(as_text(v) or "")
    return out


def tool_call(value: Any, column: str, where: str) -> ToolCall:
    """One tool call, as {name, arguments} or in OpenAI's shape ({type: function, function: {name,
    arguments}}, arguments being JSON text); arguments may be an object or JSON text."""
    spec = value.get("function", value) if isinstance(value, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise DataError(
            f"{where}: {column!r} holds {_short(json.dumps(value, default=str))}, not a tool call; "
            'write each call as {"name": "...", "arguments": {...}}'
        )
    arguments = spec.get("arguments")
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        problem = f"{where}: {column!r}: the arguments of {spec['name']} are not valid JSON"
        arguments = _loads(arguments, problem, f"{column!r}: {spec['name']}'s arguments", where)
    if not isinstance(arguments, Mapping):
        raise DataError(f"{where}: {column!r}: the arguments of {spec['name']} must be an object")
    return ToolCall(spec["name"], dict(arguments))


def _tool_name(value: Any, column: str, where: str) -> str:
    """An offered tool: its name, or its definition (OpenAI's {type: function, function: {name}})."""
    if isinstance(value, str) and value:
        return value
    return tool_call({**value, "arguments": {}} if isinstance(value, Mapping) else value, column, where).name


def lists_of(record: Mapping[str, Any], columns: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """The LISTS columns of one record as Row fields, checked; a column the record lacks is None."""
    found: dict[str, Any] = {}
    for name in LISTS:
        column = columns.get(name, name)
        if column is None or record.get(column) is None:
            continue
        value = json_list(record[column], column, where)
        if name in ("tool_calls", "expected_tool_calls"):
            found[name] = [tool_call(v, column, where) for v in value]
        elif name == "available_tools":
            found[name] = [_tool_name(v, column, where) for v in value]
        else:
            found[name] = _texts(value, column, where)
    return found
