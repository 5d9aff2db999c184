"""Rows from trace records, without MLflow: the selectors' grammar and what each reads, each field's
default, the errors that name the trace, the query's keys (times, status, tags, sample) and the sample
that nests."""

from __future__ import annotations

from typing import Any

import pytest

from evalframe.data.rows import ToolCall
from evalframe.data.trace_query import Query, instant
from evalframe.data.traces import parse, row, rows, sampled, select, selectors, text
from evalframe.errors import ConfigError, DataError
from tests.conftest import compose

DEFAULTS = compose(["dataset=mlflow_traces", "dataset.experiment=app"])["dataset"]
NOW = 1_750_000_000.0  # 2025-06-15T15:06:40Z


def span(span_id: str, name: str, kind: str, parent: str | None = "root", **values: Any) -> dict[str, Any]:
    return {
        "span_id": span_id,
        "parent_id": parent,
        "name": name,
        "span_type": kind,
        "start_ns": 0,
        "end_ns": 1,
        "inputs": values.get("inputs"),
        "outputs": values.get("outputs"),
        "attributes": values.get("attributes", {}),
    }


def assessment(name: str, kind: str, value: Any, source: str = "HUMAN", valid: bool = True) -> dict[str, Any]:
    return {
        "assessment_id": f"a-{name}-{value}",
        "name": name,
        "kind": kind,
        "value": value,
        "valid": valid,
        "source_type": source,
        "source_id": "someone",
        "rationale": None,
        "metadata": {},
        "span_id": None,
        "error": None,
    }


def doc(text: str, uri: str | None = None, **more: Any) -> dict[str, Any]:
    return {"page_content": text, "metadata": {"doc_uri": uri} if uri else {}, **more}


def rag_record(trace_id: str = "tr-1", **changes: Any) -> dict[str, Any]:
    """A RAG app's trace: a question in, two retrievals (the last one counts), two tool calls, an answer."""
    record = {
        "trace_id": trace_id,
        "state": "OK",
        "request_time": 1,
        "tags": {"env": "prod", "mlflow.traceName": "answer"},
        "metadata": {"mlflow.trace.session": "s1", "user": "u7"},
        "session_id": "s1",
        "spans": [
            span("root", "answer", "CHAIN", None, inputs={"question": "Where?"}, outputs="In Paris."),
            span("r1", "rewrite", "RETRIEVER", outputs=[doc("stale", "kb://9")]),
            span("t1", "weather", "TOOL", inputs={"city": "Paris"}, outputs="sunny"),
            span("r2", "search", "RETRIEVER", outputs=[doc("first", "kb://1"), doc("second", "kb://2")]),
            span("t2", "clock", "TOOL", inputs={}, outputs="noon"),
        ],
        "assessments": [
            assessment("expected_response", "expectation", "Paris"),
            assessment(
                "expected_tool_calls", "expectation", [{"name": "weather", "arguments": {"city": "Paris"}}]
            ),
            assessment("rating", "feedback", 0.75),
        ],
    }
    return record | changes


def test_the_defaults_read_a_rag_trace() -> None:
    r = row(rag_record(), 1, selectors(DEFAULTS), "src")
    assert (r.id, r.trace_id, r.input, r.output, r.ground_truth) == (
        "tr-1",
        "tr-1",
        "Where?",
        "In Paris.",
        "Paris",
    )
    # The last retrieval's documents, in rank order; their ids from the metadata; the span they came from.
    assert r.contexts == ["first", "second"] and r.context_ids == ["kb://1", "kb://2"]
    assert r.retriever_span_id == "r2"
    assert r.tool_calls == [ToolCall("weather", {"city": "Paris"}), ToolCall("clock", {})]
    assert r.expected_tool_calls == [ToolCall("weather", {"city": "Paris"})]
    assert r.reference_context_ids is None and r.human is None and r.available_tools is None
    assert r.extra == rag_record() and r.line == 1


def test_a_trace_without_retrieval_or_tools_has_no_contexts_and_no_calls() -> None:
    record = rag_record(spans=[span("root", "answer", "CHAIN", None, inputs={"q": "Hi?"}, outputs="Hello")])
    r = row(record, 1, selectors(DEFAULTS), "src")
    assert r.contexts is None and r.context_ids is None and r.retriever_span_id is None
    assert r.tool_calls == []  # no TOOL span: no call made, which tool_call_accuracy scores


@pytest.mark.parametrize(
    ("selector", "found"),
    [
        ("root.inputs", {"question": "Where?"}),
        ("root.inputs.question", "Where?"),
        ("root.outputs", "In Paris."),
        ("span:RETRIEVER[0].outputs[0].page_content", "stale"),
        ("span:RETRIEVER[-1].outputs[*].metadata.doc_uri", ["kb://1", "kb://2"]),
        ("span:search[0].outputs[1].page_content", "second"),  # by the span's name
        ("span:TOOL[*].name", ["weather", "clock"]),
        ("span:TOOL[1].outputs", "noon"),
        ("span:TOOL[2].outputs", None),  # no third tool span
        ("span:LLM[-1].outputs", None),
        ("span:LLM[*]", []),
        ("expectation:expected_response", "Paris"),
        ("expectation:expected_tool_calls[0].arguments.city", "Paris"),
        ("expectation:nothing", None),
        ("feedback:rating", 0.75),
        ("tag:env", "prod"),
        ("tag:`mlflow.traceName`", "answer"),
        ("metadata:user", "u7"),
        ("metadata:`mlflow.trace.session`", "s1"),
        ("trace.session_id", "s1"),
        ("trace.state", "OK"),
        ("root.inputs.missing.deeper", None),
        ("root.outputs[0]", None),  # a string is no list
    ],
)
def test_each_selector_reads_its_part_of_the_trace(selector: str, found: Any) -> None:
    assert select(rag_record(), parse(selector, "k")).value == found


def test_feedback_takes_a_persons_newest_valid_value_and_expectations_the_newest_valid() -> None:
    record = rag_record(
        assessments=[
            assessment("rating", "feedback", 0.2),
            assessment("rating", "feedback", 0.4),
            assessment("rating", "feedback", 0.9, source="LLM_JUDGE"),  # a judge's, not a person's
            assessment("rating", "feedback", 0.6, valid=False),  # overridden
            assessment("expected_response", "expectation", "old"),
            assessment("expected_response", "expectation", "new"),
            assessment("expected_response", "expectation", "withdrawn", valid=False),
        ]
    )
    assert select(record, parse("feedback:rating", "k")).value == 0.4
    assert select(record, parse("expectation:expected_response", "k")).value == "new"
    errored = assessment("rating", "feedback", None) | {"error": {"error_code": "X", "error_message": "m"}}
    assert select(rag_record(assessments=[errored]), parse("feedback:rating", "k")).value is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        ({"question": "one value"}, "one value"),
        (
            {"choices": [{"message": {"role": "assistant", "content": "from a completion"}}]},
            "from a completion",
        ),
        ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "asked"}]}, "asked"),
        ({"a": 1, "b": "x"}, '{"a": 1, "b": "x"}'),  # anything else: its JSON text, as a dataset value's
        (["x", 2], '["x", 2]'),
        (42, "42"),
        (None, None),
    ],
)
def test_text_fields_take_a_string_a_chat_message_or_a_mappings_one_value(value: Any, expected: Any) -> None:
    assert text(value) == expected


def test_mapped_fields_and_a_human_score_from_a_persons_feedback() -> None:
    cfg = compose(
        [
            "dataset=mlflow_traces",
            "dataset.columns.input=root.inputs.question",
            # Brackets are Hydra's syntax too: on the command line a selector holding them is quoted.
            "dataset.columns.context_ids='span:RETRIEVER[-1].outputs[*].id'",
            "dataset.columns.reference_context_ids='expectation:expected_tool_calls[*].arguments.city'",
            "dataset.columns.ground_truth=tag:env",
            "dataset.columns.tool_calls=null",
            "dataset.human_score=rating",
        ]
    )["dataset"]
    record = rag_record()
    record["spans"][3]["outputs"] = [doc("first") | {"id": "d1"}, doc("second") | {"id": 2}]
    r = row(record, 1, selectors(cfg), "src")
    assert r.context_ids == ["d1", "2"] and r.reference_context_ids == ["Paris"] and r.ground_truth == "prod"
    assert r.tool_calls is None and r.human == 0.75
    # A trace nobody rated has no human score (agreement leaves it out), not an error.
    unrated = row(record | {"assessments": []}, 1, selectors(cfg), "src")
    assert unrated.human is None and unrated.ground_truth == "prod"


def test_a_human_score_names_a_persons_feedback_even_one_named_like_a_source() -> None:
    cfg = compose(["dataset=mlflow_traces", "dataset.human_score=trace_quality"])["dataset"]
    rated = rag_record(assessments=[assessment("trace_quality", "feedback", 3)])
    assert row(rated, 1, selectors(cfg), "src").human == 3


def test_a_human_score_may_be_any_selector_but_must_be_a_number() -> None:
    cfg = compose(["dataset=mlflow_traces", "dataset.human_score=tag:env"])["dataset"]
    with pytest.raises(
        DataError, match=r"src, trace tr-1: the human score \('tag:env'\) is 'prod', not a finite"
    ):
        row(rag_record(), 1, selectors(cfg), "src")


def test_document_ids_fall_back_from_doc_uri_to_id_and_chunk_id_and_the_documents_own() -> None:
    documents = [
        {"page_content": "a", "metadata": {"doc_uri": "kb://a", "chunk_id": "c"}},
        {"page_content": "b", "metadata": {"id": "m-b"}},
        {"page_content": "c", "metadata": {"chunk_id": "c-7"}},
        {"page_content": "d", "metadata": {}, "id": "own"},
        "a plain string chunk",
    ]
    record = rag_record()
    record["spans"][3]["outputs"] = documents
    r = row(record, 1, selectors(DEFAULTS), "src")
    assert r.context_ids == ["kb://a", "m-b", "c-7", "own", "a plain string chunk"]
    assert r.contexts == ["a", "b", "c", "d", "a plain string chunk"]
    record["spans"][3]["outputs"] = [{"page_content": "no id", "metadata": {}}]
    with pytest.raises(DataError, match=r"trace tr-1: document 0 of span:RETRIEVER\[-1\].outputs has no id"):
        row(record, 1, selectors(DEFAULTS), "src")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spans": []}, r"src, trace tr-1: no input at root.inputs; set dataset.columns.input"),
        (
            {"spans": [span("root", "a", "CHAIN", None, inputs={"question": "Q", "history": []})]},
            r"root.inputs holds several values \(question, history\); choose the question with "
            r"dataset.columns.input=root.inputs.KEY",
        ),
        (
            {"spans": [span("root", "a", "CHAIN", None, inputs={"q": " "})]},
            r"the input \(root.inputs\) is empty",
        ),
        (
            {
                "spans": [
                    span("root", "a", "CHAIN", None, inputs={"q": "Q"}),
                    span("r", "r", "RETRIEVER", outputs="x"),
                ]
            },
            r"'span:RETRIEVER\[-1\].outputs' must be a list",
        ),
        (
            {
                "spans": [
                    span("root", "a", "CHAIN", None, inputs={"q": "Q"}),
                    span("t", "t", "TOOL", inputs=[1]),
                ]
            },
            r"the arguments of t must be an object",
        ),
        (
            {"tags": {"score": float("nan")}},
            r"src, trace tr-1: the trace.tags.score is nan, not a finite number",
        ),
    ],
)
def test_a_trace_that_cannot_be_read_is_named_with_what_to_fix(change: dict[str, Any], message: str) -> None:
    with pytest.raises(DataError, match=message):
        row(rag_record(**change), 1, selectors(DEFAULTS), "src")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("input", "root.input", r"dataset.columns.input='root.input' is not a trace selector"),
        ("contexts", "span:RETRIEVER.outputs", r"is not a trace selector"),
        ("contexts", "span:RETRIEVER[-1].outputs[x]", r"cannot read '\[x\]'; after the source come"),
        ("output", "root.outputs..a", r"cannot read '..a'"),
        (
            "id",
            "tag:env",
            r"dataset.columns.id='tag:env': a row read from a trace is identified by its trace id",
        ),
    ],
)
def test_a_selector_that_is_not_one_is_a_config_error(key: str, value: str, message: str) -> None:
    cfg = compose(["dataset=mlflow_traces", f"dataset.columns.{key}='{value}'"])["dataset"]
    with pytest.raises(ConfigError, match=message):
        selectors(cfg)


def test_rows_keep_the_order_sample_then_limit_and_never_repeat_a_trace() -> None:
    records = [rag_record(f"tr-{i}") for i in range(200)]
    every = [r.id for r in rows(records + records[:3], DEFAULTS, "src")]
    assert every == [f"tr-{i}" for i in range(200)]  # a repeat (pages over a changing store) is dropped
    half = [r.id for r in rows(records, DEFAULTS | {"sample": {"rate": 0.5, "salt": "s"}}, "src")]
    assert half == [f"tr-{i}" for i in range(200) if sampled(f"tr-{i}", 0.5, "s")] and 70 < len(half) < 130
    first = [
        r.id for r in rows(records, DEFAULTS | {"sample": {"rate": 0.5, "salt": "s"}, "limit": 5}, "src")
    ]
    assert first == half[:5]


def test_samples_nest_and_stay_put_for_a_salt() -> None:
    ids = [f"tr-{i:05x}" for i in range(4000)]
    quarter = {i for i in ids if sampled(i, 0.25, "team-a")}
    half = {i for i in ids if sampled(i, 0.5, "team-a")}
    assert quarter < half  # 0.25 is a subset of 0.5
    assert abs(len(quarter) / len(ids) - 0.25) < 0.03 and abs(len(half) / len(ids) - 0.5) < 0.03
    assert {i for i in ids if sampled(i, 0.25, "team-a")} == quarter  # the same salt: the same traces
    other = {i for i in ids if sampled(i, 0.25, "team-b")}
    assert other != quarter and abs(len(other) / len(ids) - 0.25) < 0.03  # another salt: another sample
    assert all(sampled(i, 1.0, "x") for i in ids)


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("2025-06-01", 1_748_736_000_000),
        ("2025-06-01T12:00:00Z", 1_748_779_200_000),
        ("2025-06-01T14:00:00+02:00", 1_748_779_200_000),
        ("2025-06-01 12:00", 1_748_779_200_000),  # no zone: UTC
        ("30m", int((NOW - 1800) * 1000)),
        ("24h", int((NOW - 86400) * 1000)),
        ("7d", int((NOW - 7 * 86400) * 1000)),
        ("2w", int((NOW - 14 * 86400) * 1000)),
        ("1.5h", int((NOW - 5400) * 1000)),
        (None, None),
    ],
)
def test_times_are_iso_or_a_time_ago(value: str | None, ms: int | None) -> None:
    assert instant(value, "dataset.since", NOW) == ms


def test_the_query_pins_its_window_and_writes_one_filter() -> None:
    query = Query.of(
        DEFAULTS
        | {"since": "24h", "tags": {"env": "prod", "owner's": "x", "v": 2}, "filter": "span.name = 'a'"},
        NOW,
    )
    assert query.until_ms == int(NOW * 1000)  # not set: when the run started, for both reads
    assert query.filter_string() == (
        f"trace.timestamp_ms < {int(NOW * 1000)} AND trace.timestamp_ms >= {int((NOW - 86400) * 1000)} "
        "AND trace.status = 'OK' AND tags.`env` = 'prod' AND tags.`owner's` = 'x' AND tags.`v` = '2' "
        "AND span.name = 'a'"
    )
    assert "status" not in Query.of(DEFAULTS | {"status": None}, NOW).filter_string()
    assert Query.of(DEFAULTS | {"tags": {"q": "it's"}}, NOW).filter_string().endswith('tags.`q` = "it\'s"')
    # A value no literal can hold: a pattern, the store finding maybe more, the reader keeping exact matches.
    odd = Query.of(DEFAULTS | {"tags": {"dir": "C:\\tmp\\", "q": "'\"", "env": "prod"}}, NOW)
    assert odd.filter_string().endswith(
        "AND tags.`dir` LIKE 'C:_tmp_' AND tags.`q` LIKE '__' AND tags.`env` = 'prod'"
    )
    assert odd.keeps({"dir": "C:\\tmp\\", "q": "'\"", "env": "prod"})
    assert not odd.keeps({"dir": "C:\\tmp_", "q": "'\"", "env": "prod"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"since": "yesterday"}, r"dataset.since='yesterday' is not a time; write an ISO time"),
        ({"until": "24"}, r"dataset.until='24' is not a time"),
        ({"since": "1h", "until": "2h"}, r"dataset.since='1h' is not before dataset.until='2h'"),
        ({"status": "DONE"}, r"dataset.status='DONE': choose one of OK, ERROR, IN_PROGRESS, or null"),
        (
            {"sample": {"rate": 0}},
            r"dataset.sample.rate=0: the share of traces to read, above 0 and at most 1",
        ),
        ({"sample": {"rate": 1.5}}, r"dataset.sample.rate=1.5"),
        ({"sample": {"rate": "half"}}, r"dataset.sample.rate='half'"),
        ({"limit": 0}, r"dataset.limit=0: it should be a whole number from 1"),
        ({"page_size": 100000}, r"dataset.page_size=100000: it should be a whole number from 1 up to 50000"),
        ({"tags": ["env"]}, r"dataset.tags=\['env'\]: give a mapping of tag to value"),
        (
            {"since": "100000000000000000000000w"},
            r"dataset.since='100000000000000000000000w' is out of range: a time ago reaches back",
        ),
    ],
)
def test_a_bad_query_key_is_a_config_error_naming_it(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Query.of(DEFAULTS | change, NOW).filter_string()
