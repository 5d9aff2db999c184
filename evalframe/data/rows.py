"""Datasets: read rows from JSONL or CSV through a column mapping, and validate them all up front.

Every row is checked before the first model call, and an error names the file, the line and the
field, so a typo in row 900 never costs 899 rows of judge calls. Rows are streamed from the file,
never loaded whole, so a dataset's size does not set a run's memory.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalframe.data import formats, labels
from evalframe.data.conversations import Conversation, conversation_of
from evalframe.data.values import (
    HANDED,
    LISTS,
    ToolCall,
    as_text,
    check_values,
    human_score,
    json_list,
    lists_of,
)
from evalframe.errors import ConfigError, DataError
from evalframe.paths import RESOURCES_DIR, SAMPLE_DATASET

FIELDS = ("id", "input", "ground_truth", "output")
# A conversation's columns (data/conversations.py), each optional and mapped like the others
# (dataset.columns.messages=turns): the chat itself, what it should end in, the assistant's role, and
# what a simulated user is after.
CONVERSATION = ("messages", "expected_outcome", "chatbot_role", "scenario")


@dataclass(frozen=True)
class Row:
    id: str
    input: str
    ground_truth: str | None  # None: the dataset has no ground truth for this row
    output: str | None  # the recorded output, if the dataset has one
    line: int  # where the row is in its file, for error messages
    extra: Mapping[str, Any] = field(default_factory=dict)  # every column, for prompt templates
    human: float | None = None  # a person's score of the output (dataset.human_score), for agreement
    # The LISTS columns (None: the dataset has no such column for this row):
    contexts: list[str] | None = None  # the retrieved chunks, in their rank order
    context_ids: list[str] | None = None  # the retrieved chunks' ids, in the same order
    reference_context_ids: list[str] | None = None  # the ids of the chunks that should be retrieved
    tool_calls: list[ToolCall] | None = None  # the calls the application made, in order
    expected_tool_calls: list[ToolCall] | None = None
    available_tools: list[str] | None = None  # the names of the tools it was offered
    # A row read from an MLflow trace (dataset.format=mlflow_traces; a live target's own trace): where
    # its verdicts are written back. None for file rows.
    trace_id: str | None = None
    retriever_span_id: str | None = None  # the RETRIEVER span its contexts came from: per-chunk verdicts
    # A conversation item (CONVERSATION columns; None: the dataset has no such column for this row).
    messages: Conversation | None = None
    expected_outcome: str | None = None
    chatbot_role: str | None = None
    scenario: str | None = None
    # Why the row cannot be judged (a watch tick's trace: kept and left unscored, not stopping the run).
    unjudgeable: str | None = None


def _records(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        # utf-8-sig: a byte-order mark (Excel, Notepad) is dropped, not read into the first column's name.
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise DataError(
            f"cannot open dataset {path}: {e.strerror}; set dataset.path to an existing file"
        ) from None
    with handle:
        try:
            if fmt == "csv":
                reader = csv.DictReader(handle)
                for record in reader:
                    yield reader.line_num, record
                return
            if fmt == "json":  # one JSON array of objects (DeepEval's saved datasets): read whole
                yield from enumerate(_array(handle.read(), path), start=1)
                return
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(
                        f"{path}, line {number}: not valid JSON ({e.msg} at column {e.colno})"
                    ) from None
                except (ValueError, RecursionError) as e:  # an integer of thousands of digits; deep nesting
                    raise DataError(f"{path}, line {number}: {_unreadable(e)}") from None
                if not isinstance(record, dict):
                    raise DataError(
                        f"{path}, line {number}: expected a JSON object, got {type(record).__name__}"
                    )
                yield number, record
        except UnicodeDecodeError as e:
            raise DataError(
                f"{path}: not valid UTF-8 (byte offset {e.start}); re-save the file as UTF-8"
            ) from None


def _array(text: str, path: Path) -> list[Any]:
    """A .json dataset's records: a JSON array, each record numbered from 1 in errors."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path}: {_unreadable(e)}") from None
    if not isinstance(value, list):
        raise DataError(f"{path}: a .json dataset is one JSON array of objects, got {type(value).__name__}")
    return value


def _unreadable(e: ValueError | RecursionError) -> str:
    if isinstance(e, RecursionError):
        return "a value is nested too deeply to read; flatten it"
    return f"a value cannot be read ({e}); store it as a string"


def resolve_path(path: str | None) -> Path:
    """`bundled:NAME` is a dataset shipped with evalframe; null is the bundled sample."""
    if not path:
        return SAMPLE_DATASET
    if path.startswith("bundled:"):
        return RESOURCES_DIR / path.removeprefix("bundled:")
    return Path(path).expanduser()


def column_names(cfg: Mapping[str, Any]) -> dict[str, str | None]:
    """The dataset column each field is read from (dataset.columns; a field's own name by default)."""
    mapped = cfg.get("columns") or {}
    return {name: mapped.get(name, name) for name in (*FIELDS, *LISTS, *CONVERSATION)}


def _rows(
    numbered: Iterable[tuple[int, Any]], cfg: Mapping[str, Any], source: str, unit: str, input_fix: str
) -> Iterator[Row]:
    """Rows from (line or record number, record) pairs through the `dataset` config's column mapping,
    human score and limit, each checked: errors name the source, the `unit` and its number, and the
    field (`input_fix` says how to map the input column). Only the ids are kept, to catch repeats."""
    columns = column_names(cfg)
    human_column = cfg.get("human_score")
    if cfg.get("labels") and human_column:
        raise ConfigError("dataset.labels and dataset.human_score both give a human score: set one of them")
    people = labels.people(str(cfg["labels"])) if cfg.get("labels") else None  # review pull's labels.jsonl
    limit = cfg.get("limit")
    seen: dict[str, int] = {}
    for number, record in numbered:
        if limit is not None and len(seen) >= limit:
            break
        where = f"{source}, {unit} {number}"
        try:
            row = _row(record, number, columns, human_column, where, input_fix)
        except (ValueError, RecursionError) as e:  # in-memory records: a huge integer, deep nesting
            raise DataError(f"{where}: {_unreadable(e)}") from None
        if row.id in seen:
            raise DataError(
                f"{where}: id {row.id!r} repeats the id of {unit} {seen[row.id]}; ids must be unique"
            )
        seen[row.id] = number
        yield row if people is None else dataclasses.replace(row, human=people.get(row.id))


def _row(
    record: Any,
    number: int,
    columns: Mapping[str, str | None],
    human_column: str | None,
    where: str,
    input_fix: str,
) -> Row:
    """One record as a Row through the column mapping; errors name `where`."""
    if not isinstance(record, Mapping):
        raise DataError(f"{where}: expected a dict (one per row), got {type(record).__name__}")
    for column, value in record.items():
        check_values(column, "a column's name", where)
        check_values(value, repr(column), where)
    chat = _conversation(record, columns, where)
    question = ""
    if chat.get("messages") is not None and columns["input"] not in record:
        # A conversation's question is its first user turn (the item's name in reports), its output
        # the last assistant turn: single-turn scorers judge that turn.
        question = chat["messages"].user_turns[0].content
    elif chat.get("scenario") is not None and columns["input"] not in record:
        question = chat["scenario"]  # a simulated user's conversation: none is recorded yet
    elif columns["input"] is not None:  # null: the dataset has no questions (e.g. answer pairs)
        if columns["input"] not in record:
            raise DataError(
                f"{where}: no {columns['input']!r} field for the input; {input_fix} "
                f"(found: {', '.join(map(str, record))})"
            )
        question = as_text(record[columns["input"]]) or ""
        if not question.strip():
            raise DataError(f"{where}: the input ({columns['input']!r}) is empty; every row needs a question")
    row_id = as_text(record.get(columns["id"])) or str(number)
    output = as_text(record.get(columns["output"]))
    if output is None and chat.get("messages") is not None:
        last = chat["messages"].last("assistant")
        output = last.content if last else None
    return Row(
        id=row_id,
        input=question,
        ground_truth=as_text(record.get(columns["ground_truth"])),
        output=output,
        line=number,
        extra=dict(record),
        human=human_score(record, human_column, where),
        **lists_of(record, columns, where),
        **chat,
    )


def _conversation(record: Mapping[str, Any], columns: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """The CONVERSATION columns of one record as Row fields; a column the record lacks is left out."""
    found: dict[str, Any] = {}
    for name in CONVERSATION:
        column = columns.get(name, name)
        if column is None or record.get(column) is None:
            continue
        value = record[column]
        if name == "messages":
            found[name] = conversation_of(json_list(value, column, where), column, where)
        else:
            found[name] = as_text(value)
    return found


def _read(cfg: Mapping[str, Any]) -> Iterator[Row]:
    """The rows of the dataset described by the `dataset` config group, one at a time, each checked:
    the file is never held in memory."""
    path = resolve_path(cfg.get("path"))
    fmt = formats.named(str(cfg.get("format") or "jsonl")).name
    if fmt not in formats.FILES:
        raise DataError(f"dataset.format={fmt} is not read from a file; choose dataset={fmt}")
    fix = "set dataset.columns.input to the right column, or null if there are no questions"
    yield from _rows(_records(path, fmt), cfg, str(path), "record" if fmt == "json" else "line", fix)


def window_size(config: Mapping[str, Any]) -> int:
    """The run's `window`: the most rows (and items) in flight at once."""
    return int(config.get("window") or 2000)


def windows(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    """Consecutive lists of at most `size` rows."""
    if size < 1:
        raise ConfigError(f"window={size}: a window must hold at least one row")
    iterator = iter(rows)
    while window := list(itertools.islice(iterator, size)):
        yield window


class Rows:
    """The rows of a run, read as a stream: a dataset file is read once to validate every row
    (before any model call) and once more, window by window, to score them. Memory holds one window,
    not the dataset, so a 100,000-row file costs what a 2,000-row one does."""

    def __init__(self, read: Callable[[], Iterator[Row]], source: str):
        self._read = read
        self._kept: list[Row] | None = None  # the rows, when validate() found they fit in one window
        self.source = source  # named in error messages
        self.count: int | None = None  # known once validate() has read them all
        self.digest = ""  # of every row's content, known once validate() has read them all

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> Rows:
        return cls(lambda: _read(cfg), str(resolve_path(cfg.get("path"))))

    @classmethod
    def of(cls, rows: list[Row], source: str = "rows") -> Rows:
        """Rows already in memory."""
        return cls(lambda: iter(rows), source)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._kept) if self._kept is not None else self._read()

    def __len__(self) -> int:
        if self.count is None:
            raise RuntimeError("Rows.validate() first: the number of rows is known once all are read")
        return self.count

    def windows(self, size: int) -> Iterator[list[Row]]:
        return windows(self, size)

    def part(self, held_out: set[str], holdout: bool) -> Rows:
        """The held-out rows (`holdout`) or the others, as a stream of their own."""
        part = Rows(lambda: (row for row in self if (row.id in held_out) == holdout), self.source)
        part.count = len(held_out) if holdout else len(self) - len(held_out)
        return part

    def validate(self, check: Callable[[list[Row]], None], size: int = 2000) -> Row:
        """Read every row once, passing each window to `check` (which raises DataError); returns the
        first row (scorers check their prompts against it). Fails on an empty dataset. Rows that fit in
        one window are kept, and the run scores those instead of reading the source again: memory holds
        a window in flight anyway, and a second read of a remote source (MLflow traces with their spans)
        costs as much as the first."""
        count, first = 0, None
        digest = hashlib.sha256()
        for number, window in enumerate(self.windows(size)):
            self._kept = window if number == 0 else None
            check(window)
            first = first or window[0]
            count += len(window)
            for row in window:
                digest.update(_content(row, self.source))
        if first is None:
            raise DataError(f"dataset {self.source} has no rows")
        self.count = count
        self.digest = digest.hexdigest()
        return first


def _content(row: Row, source: str) -> bytes:
    """A row's content as bytes, for the dataset's digest (a resumed run checks its rows are the same).
    A file row's is its columns; a trace row's is what is judged, the fields its selectors read, the
    trace's id and a session's conversation, not its record: the record holds the trace's assessments,
    which the run's own verdicts (and anyone's feedback) change while the traces judged stay the same."""
    if row.trace_id is None:
        content: tuple[Any, ...] = (row.extra,)
    else:
        content = (row.trace_id, row.retriever_span_id, *(getattr(row, name) for name in LISTS), row.messages)
    try:  # repr, not JSON: twice as fast, and as stable for the str, number, list and dict a row holds
        return repr((row.id, row.input, row.ground_truth, row.output, row.human, *content)).encode()
    except (ValueError, RecursionError) as e:  # in-memory records: a huge integer, deep nesting
        raise DataError(f"{source}, line {row.line} (id {row.id}): {_unreadable(e)}") from None


def load_rows(cfg: Mapping[str, Any]) -> list[Row]:
    """Read the whole dataset described by the `dataset` config group into memory (small datasets,
    tests); a run streams them through Rows instead."""
    rows = list(_read(cfg))
    if not rows:
        raise DataError(f"dataset {resolve_path(cfg.get('path'))} has no rows")
    return rows


def require(rows: Iterable[Row], path: str, field_name: str, why: str, column: str | None = None) -> None:
    """Fail before any model call if a row lacks a field a scorer or target needs (read from
    `column`, which the error names)."""
    read_from = f" (read from column {column!r})" if column else ""
    live = (
        f"; or have a live target hand it over (target.provides=[{field_name}] for target=python, "
        f"target.{field_name}_path=... for target=http)"
        if field_name in HANDED
        else ""
    )
    for row in rows:
        if getattr(row, field_name) is None:
            raise DataError(
                f"{path}, line {row.line} (id {row.id}): no {field_name}, which {why}{read_from}. "
                f"Fill it in, map the right column with dataset.columns.{field_name}=..., or drop the row"
                + live
            )


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def records_of(data: Any) -> tuple[list[Any], str]:
    """In-memory data as plain records and the name errors use for it: a list of dicts, or a pandas
    DataFrame (through its JSON form, so NaN becomes a missing value and numpy numbers plain ones)."""
    if hasattr(data, "to_json") and hasattr(data, "columns"):  # a DataFrame; pandas is not imported here
        records = json.loads(data.to_json(orient="records", date_format="iso", double_precision=15))
        # An integer column with a gap is float in pandas: 42 would be read as "42.0".
        return [{k: _whole(v) for k, v in record.items()} for record in records], "DataFrame"
    if isinstance(data, Mapping | str | bytes) or not isinstance(data, Iterable):
        raise DataError(
            f"data is a {type(data).__name__}; pass a list of dicts (one per row), a pandas DataFrame, "
            "or the path of a .jsonl or .csv file"
        )
    return list(data), "data"


def rows_from_records(records: Iterable[Any], cfg: Mapping[str, Any], source: str = "data") -> list[Row]:
    """Rows from in-memory records, read and checked as a file's lines are (the `dataset` config's
    column mapping, human score and limit; the same errors), record N standing for line N."""
    fix = "map the right column with columns={'input': ...}"
    rows = list(_rows(enumerate(records, start=1), cfg, source, "record", fix))
    if not rows:
        raise DataError(f"{source} has no rows")
    return rows
