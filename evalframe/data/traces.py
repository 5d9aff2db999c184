"""Rows from MLflow traces: each field of a row read from a trace's record (its spans, assessments,
tags and metadata) by a selector, `dataset.columns.X`. Pure: the records are plain dicts that
evalframe.tracking.trace_records makes from MLflow's traces; the reader there pages through the store
and hands them to `rows`.

A selector is a source and a path (the grammar, also in conf/dataset/mlflow_traces.yaml and the README):

    root.inputs, root.outputs      the root span's inputs or outputs
    span:X[i]                      the i-th span whose type or name is X, in start order (0 the first,
                                   -1 the last); [*]: every one, as a list
    expectation:NAME               the newest valid expectation NAME (any source)
    feedback:NAME                  the newest valid feedback NAME given by a person (HUMAN source)
    tag:KEY, metadata:KEY          a trace tag or metadata value
    trace                          the whole record (trace.session_id, trace.trace_id, ...)

followed by any of .KEY (a key of a mapping), [N] (an item of a list; negative from the end) and [*]
(each item). A span is a mapping too: span:X[i].inputs, .outputs, .name, .attributes.KEY. A NAME or
KEY holding dots is written in backquotes: tag:`mlflow.traceName`. A selector that finds nothing is a
missing field (a scorer that needs it is not applicable to that trace: run.planning.Needs); [*] over
no span is an empty list (no tool called).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.data.rows import FIELDS, Row
from evalframe.data.values import LISTS, as_text, check_values, human_score, lists_of
from evalframe.errors import ConfigError, DataError

EACH = "*"


def _name(group: str) -> str:
    """A name, or a backquoted one holding dots: group `group` or `group`_q."""
    return rf"(?:`(?P<{group}_q>[^`]+)`|(?P<{group}>[^.\[\]`]+))"


_HEAD = re.compile(
    r"root\.(?P<root>inputs|outputs)"
    rf"|span:{_name('span')}\[(?P<index>-?\d+|\*)\]"
    rf"|(?P<kind>expectation|feedback|tag|metadata):{_name('key')}"
    r"|(?P<trace>trace)"
)
# A selector, not a bare feedback name (dataset.human_score=helpfulness, or =trace_quality).
_SELECTOR = re.compile(r"root\.|span:|expectation:|feedback:|tag:|metadata:|trace($|[.\[])")
_STEP = re.compile(rf"\.{_name('step')}|\[(?P<at>-?\d+|\*)\]")
# Where a retrieved document keeps its id: MLflow's Document metadata (doc_uri, as its RAG evaluation
# and expected_retrieved_context name it; id; chunk_id), then the document's own id.
DOC_IDS = ("doc_uri", "id", "chunk_id")


@dataclass(frozen=True)
class Selector:
    text: str  # as written, for errors
    source: str  # root, span, expectation, feedback, tag, metadata or trace
    name: str  # the root's inputs/outputs, the span's type or name, the assessment, tag or key
    index: int | str | None  # the span's position, or EACH
    path: tuple[int | str, ...]  # keys and positions after the source; EACH maps the rest over a list


def parse(text: str, key: str) -> Selector:
    """A selector as written in `key` (dataset.columns.X); a ConfigError says what the grammar takes."""
    head = _HEAD.match(text)
    if head is None:
        raise ConfigError(
            f"{key}={text!r} is not a trace selector; write root.inputs, root.outputs, "
            "span:TYPE[-1].outputs, span:TYPE[*], expectation:NAME, feedback:NAME, tag:KEY or "
            "metadata:KEY, then any .KEY, [N] or [*] (the grammar is in conf/dataset/mlflow_traces.yaml)"
        )
    path: list[int | str] = []
    at = head.end()
    while at < len(text):
        step = _STEP.match(text, at)
        if step is None:
            raise ConfigError(
                f"{key}={text!r}: cannot read {text[at:]!r}; after the source come .KEY, [N] or [*] "
                "(a key holding dots in backquotes: .`a.b`)"
            )
        name = step.group("step") or step.group("step_q")
        path.append(name if name is not None else _position(step.group("at")))
        at = step.end()
    if head.group("root"):
        return Selector(text, "root", head.group("root"), None, tuple(path))
    if head.group("index"):
        span = head.group("span") or head.group("span_q")
        return Selector(text, "span", span, _position(head.group("index")), tuple(path))
    if head.group("kind"):
        return Selector(text, head.group("kind"), head.group("key") or head.group("key_q"), None, tuple(path))
    return Selector(text, "trace", "", None, tuple(path))


def _position(index: str) -> int | str:
    return EACH if index == EACH else int(index)


@dataclass(frozen=True)
class Found:
    """What a selector found in one trace: the value (None: nothing), and the span it came from
    when it came from one span (the RETRIEVER span its contexts came from: write-back's target)."""

    value: Any
    span_id: str | None = None


def select(record: Mapping[str, Any], selector: Selector) -> Found:
    """The value `selector` reads from one trace's record."""
    spans: list[Mapping[str, Any]] = record.get("spans") or []
    if selector.source == "root":
        roots = [s for s in spans if not s.get("parent_id")]
        if not roots:
            return Found(None)
        return Found(_walk(roots[0].get(selector.name), selector.path), roots[0].get("span_id"))
    if selector.source == "span":
        matching = [s for s in spans if selector.name in (s.get("span_type"), s.get("name"))]
        if selector.index == EACH:
            return Found(_walk(matching, (EACH, *selector.path)))
        assert isinstance(selector.index, int)
        if not -len(matching) <= selector.index < len(matching):
            return Found(None)
        span = matching[selector.index]
        return Found(_walk(span, selector.path), span.get("span_id"))
    if selector.source in ("expectation", "feedback"):
        return Found(_walk(_assessment(record, selector.source, selector.name), selector.path))
    if selector.source == "tag":
        return Found(_walk((record.get("tags") or {}).get(selector.name), selector.path))
    if selector.source == "metadata":
        return Found(_walk((record.get("metadata") or {}).get(selector.name), selector.path))
    return Found(_walk(record, selector.path))


def _assessment(record: Mapping[str, Any], kind: str, name: str) -> Any:
    """The newest valid assessment of that kind and name (a feedback: given by a person); assessments
    come oldest first. A feedback that holds an error has no value."""
    found = None
    for a in record.get("assessments") or []:
        if a.get("kind") != kind or a.get("name") != name or not a.get("valid", True):
            continue
        if kind == "feedback" and (a.get("source_type") != "HUMAN" or a.get("error")):
            continue
        found = a.get("value")
    return found


def _walk(value: Any, path: Iterable[int | str]) -> Any:
    steps = list(path)
    for i, step in enumerate(steps):
        if value is None:
            return None
        if step == EACH:
            if not isinstance(value, list | tuple):
                return None
            return [_walk(item, steps[i + 1 :]) for item in value]
        if isinstance(step, int):
            if not isinstance(value, list | tuple) or not -len(value) <= step < len(value):
                return None
            value = value[step]
        elif isinstance(value, Mapping):
            value = value.get(step)
        else:
            return None
    return value


def selectors(cfg: Mapping[str, Any]) -> dict[str, Selector | None]:
    """The selector of each field (dataset.columns; null: not read) and of the human score
    (dataset.human_score: a feedback's name, or a selector). A row's id is always its trace's id."""
    columns = cfg.get("columns") or {}
    if columns.get("id") not in (None, "trace_id"):
        raise ConfigError(
            f"dataset.columns.id={columns['id']!r}: a row read from a trace is identified by its trace id "
            "(write-back and evalframe compare pair items by it); leave dataset.columns.id=trace_id"
        )
    chosen: dict[str, Selector | None] = {}
    for name in (*FIELDS[1:], *LISTS):
        text = columns.get(name)
        chosen[name] = None if text is None else parse(str(text), f"dataset.columns.{name}")
    if cfg.get("labels"):  # review pull's answers are HUMAN feedback on the traces already
        raise ConfigError(
            "dataset.labels joins a file dataset's rows; a trace dataset's people's labels are on its "
            "traces: read them with dataset.human_score=NAME (the scorer's name: its question's)"
        )
    human = cfg.get("human_score")
    if human is not None:
        human = str(human)
        chosen["human"] = parse(
            human if _SELECTOR.match(human) else f"feedback:`{human}`", "dataset.human_score"
        )
    return chosen


def row(
    record: Mapping[str, Any],
    number: int,
    chosen: Mapping[str, Selector | None],
    source: str,
    labels: Mapping[str, float] | None = None,
) -> Row:
    """One trace's record as a Row through the selectors (`labels`: a categorical human score's
    numbers); errors name the trace."""
    where = f"{source}, trace {record['trace_id']}"
    check_values(record, "the trace", where)  # the record goes to results.jsonl as the row's columns
    found = {name: select(record, s) if s else Found(None) for name, s in chosen.items() if name not in LISTS}
    question = ""
    if chosen["input"] is not None:
        question = _input(found["input"].value, chosen["input"].text, where)
    human = chosen.get("human")
    return Row(
        id=str(record["trace_id"]),
        input=question,
        ground_truth=text(found["ground_truth"].value),
        output=text(found["output"].value),
        line=number,
        extra=dict(record),
        human=None
        if human is None or found["human"].value is None
        else human_score({human.text: found["human"].value}, human.text, where, labels),
        **fields(record, chosen, where),
    )


def fields(record: Mapping[str, Any], chosen: Mapping[str, Selector | None], where: str) -> dict[str, Any]:
    """The list fields a trace's record gives through the selectors (contexts, their ids, tool calls),
    checked as a dataset's list columns are, with the trace's id and the span its contexts came from:
    Row fields. A logged run's items are rows again through it (rescore), their records being traces."""
    found: dict[str, Any] = {"trace_id": str(record["trace_id"]), "retriever_span_id": None}
    for name in LISTS:
        selector = chosen.get(name)
        got = select(record, selector) if selector is not None else Found(None)
        if selector is None or got.value is None:
            continue
        value = _list(name, got.value, selector.text, where)
        found.update(lists_of({selector.text: value}, {name: selector.text}, where))
        if name == "contexts":
            found["retriever_span_id"] = got.span_id
    return found


def rows(
    records: Iterable[Mapping[str, Any]],
    cfg: Mapping[str, Any],
    source: str,
    set_aside: bool = False,
    labels: Mapping[str, float] | None = None,
) -> Iterator[Row]:
    """The rows of the traces, in their order: every field read by its selector (dataset.columns), the
    traces outside the sample (dataset.sample) left out, at most dataset.limit of them. A trace that
    cannot be read as a row is a DataError, or with `set_aside` a row saying why (unjudgeable)."""
    chosen = selectors(cfg)
    sample = cfg.get("sample") or {}
    rate, salt = sample.get("rate"), str(sample.get("salt") or "")
    limit = cfg.get("limit")
    seen: set[str] = set()
    if limit is not None and limit < 1:
        return
    for number, record in enumerate(records, start=1):
        if rate is not None and not sampled(str(record["trace_id"]), float(rate), salt):
            continue
        try:
            made = row(record, number, chosen, source, labels)
        except DataError as e:
            if not set_aside:
                raise
            made = unjudgeable(record, number, str(e))
        if made.id in seen:  # offset pages over a store that changed under them: never judge one twice
            continue
        seen.add(made.id)
        yield made
        if limit is not None and len(seen) >= limit:
            return  # before the next page is asked for


def unjudgeable(record: Mapping[str, Any], number: int, why: str) -> Row:
    """A trace that cannot be read as a row, as one that says why: its record kept when it can be
    written (results.jsonl), else its id alone."""
    try:
        check_values(record, "the trace", "")
    except DataError:
        record = {"trace_id": record["trace_id"]}
    trace_id = str(record["trace_id"])
    return Row(trace_id, "", None, None, number, dict(record), trace_id=trace_id, unjudgeable=why)


def sampled(trace_id: str, rate: float, salt: str) -> bool:
    """Whether a trace is in the sample of `rate`: a hash of salt and trace id, read as a number in
    [0, 1), falls below the rate. So every scorer and run with the same salt sees the same traces, a
    smaller rate keeps a subset of a larger one's, and adding a scorer or a trace changes nothing."""
    digest = hashlib.sha256(f"{salt}:{trace_id}".encode()).digest()
    return int.from_bytes(digest, "big") / 2**256 < rate


def text(value: Any) -> str | None:
    """A span's inputs or outputs as text: a string as it is; an OpenAI-style chat completion's
    message content, or a chat request's last user message; a mapping's one string value
    ({"question": "..."}); anything else as its JSON text, as a dataset's non-string values."""
    if value is None or isinstance(value, str):
        return value
    chat = _chat(value)
    if chat is not None:
        return chat
    if isinstance(value, Mapping) and len(value) == 1 and isinstance(next(iter(value.values())), str):
        return str(next(iter(value.values())))
    return as_text(value)


def _chat(value: Any) -> str | None:
    """The text of a chat completion ({choices: [{message: {content}}]}) or a chat request's last
    user message ({messages: [{role: user, content}]}), when it is text."""
    if not isinstance(value, Mapping):
        return None
    choices = value.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        content = (choices[0].get("message") or {}).get("content")
        return content if isinstance(content, str) else None
    messages = value.get("messages")
    if isinstance(messages, list):
        said = [m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
        return said[-1] if said and isinstance(said[-1], str) else None
    return None


def _input(value: Any, selector: str, where: str) -> str:
    if value is None:
        raise DataError(
            f"{where}: no input at {selector}; set dataset.columns.input to a selector that finds "
            "the question (e.g. root.inputs.question), or null if there are no questions"
        )
    if isinstance(value, Mapping) and len(value) > 1 and _chat(value) is None:
        raise DataError(
            f"{where}: {selector} holds several values ({', '.join(map(str, value))}); choose the "
            f"question with dataset.columns.input={selector}.KEY"
        )
    question = text(value) or ""
    if not question.strip():
        raise DataError(f"{where}: the input ({selector}) is empty; every row needs a question")
    return question


def _list(name: str, value: Any, selector: str, where: str) -> Any:
    """A list field's items as evalframe reads them: retrieved documents as their text or their id,
    spans as tool calls (name, inputs as arguments); anything else as it is, checked by lists_of."""
    if not isinstance(value, list):
        return value
    if name == "contexts":
        return [_document_text(item) for item in value]
    if name in ("context_ids", "reference_context_ids"):
        return [_document_id(item, i, name, selector, where) for i, item in enumerate(value)]
    if name in ("tool_calls", "expected_tool_calls"):
        return [_call(item) for item in value]
    return value


def _document_text(item: Any) -> Any:
    if isinstance(item, Mapping):
        for key in ("page_content", "content", "text"):  # MLflow's Document; expected_retrieved_context
            if isinstance(item.get(key), str):
                return item[key]
    return item


def _document_id(item: Any, i: int, name: str, selector: str, where: str) -> Any:
    if not isinstance(item, Mapping):
        return item
    metadata = item.get("metadata") or {}
    for found in [metadata.get(key) for key in DOC_IDS] + [item.get("id"), item.get("doc_uri")]:
        if found is not None and found != "":
            return found
    raise DataError(
        f"{where}: document {i} of {selector} has no id (metadata {', '.join(DOC_IDS)}, or its own id); "
        f"give the documents ids, or map the ids with dataset.columns.{name}=...[*].metadata.KEY"
    )


def _call(item: Any) -> Any:
    """A span (a TOOL span) as the call it made: its name, its inputs as the arguments."""
    if isinstance(item, Mapping) and "span_id" in item and "name" in item:
        return {"name": item["name"], "arguments": item.get("inputs") or {}}
    return item
