"""Real traces of a small traced RAG app in an MLflow store, and the rows a trace dataset makes of them
(the shared contract of issue 24: `id = trace_id`, `trace_id`, `retriever_span_id`, `extra` = the trace
record with its assessments), read back from the store each time, as a trace reader does.

The write-back tests build their rows here until the trace reader (dataset=mlflow_traces) is on main;
`reading(uri, experiment)` is what `run.sources.rows` returns for them, so plugging the reader in is
replacing that one function.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evalframe.data.rows import Row, Rows
from evalframe.tracking.store import fluent_store

QUESTIONS = [
    (
        "What is the capital of France?",
        "Paris is the capital of France.",
        ["Paris is the capital of France.", "Lyon is a city in France."],
    ),
    (
        "Who wrote Hamlet?",
        "Shakespeare wrote Hamlet.",
        ["Hamlet is a tragedy by William Shakespeare.", "Macbeth is a play."],
    ),
    (
        "How many legs has a spider?",
        "A spider has eight legs.",
        ["Spiders have eight legs.", "Insects have six legs.", "Ticks are arachnids."],
    ),
    (
        "What is the boiling point of water?",
        "Water boils at 100 C at sea level.",
        ["At sea level water boils at 100 degrees Celsius."],
    ),
]


def seed(uri: str, experiment: str, copies: int = 1) -> list[str]:
    """Trace the app answering each question (`copies` times): a root span (the question in, the answer
    out) around a RETRIEVER span returning ranked documents with ids, plus the expected answer as an
    expectation. Returns the trace ids, oldest first."""
    import mlflow
    from mlflow.entities import Document

    ids = []
    with fluent_store(uri):
        mlflow.set_experiment(experiment)
        for _ in range(copies):
            for n, (question, answer, documents) in enumerate(QUESTIONS):
                with mlflow.start_span(name="rag_app", span_type="CHAIN") as root:
                    root.set_inputs({"question": question})
                    with mlflow.start_span(name="retrieve", span_type="RETRIEVER") as retriever:
                        retriever.set_inputs({"query": question})
                        docs = [Document(page_content=d, id=f"doc-{n}-{i}") for i, d in enumerate(documents)]
                        retriever.set_outputs(docs)
                    root.set_outputs(answer)
                ids.append(root.trace_id)
        mlflow.flush_trace_async_logging()
        for trace_id, (_, answer, _) in zip(ids, QUESTIONS * copies, strict=True):
            mlflow.log_expectation(trace_id=trace_id, name="expected_response", value=answer)
    return ids


EXPERIMENT = "app"


@functools.cache
def _template() -> Path:
    """A store seeded once per test process (MLflow's trace export takes a second or two to flush)."""
    folder = Path(tempfile.mkdtemp(prefix="evalframe-traced-"))
    atexit.register(shutil.rmtree, folder, True)
    seed(f"sqlite:///{folder / 'mlflow.db'}", EXPERIMENT)
    return folder / "mlflow.db"


def seeded_store(directory: Path) -> str:
    """The URI of a new store in `directory` holding the app's traces (experiment EXPERIMENT), each
    test's own copy of one seeded store."""
    path = directory / "mlflow.db"
    source, copy = sqlite3.connect(_template()), sqlite3.connect(path)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return f"sqlite:///{path}"


def _assessment(a: Any) -> dict[str, Any]:
    feedback = a.feedback
    error = feedback.error if feedback is not None else None
    return {
        "assessment_id": a.assessment_id,
        "name": a.name,
        "kind": "feedback" if feedback is not None else "expectation",
        "value": feedback.value if feedback is not None else a.expectation.value,
        "valid": a.valid is not False,
        "source_type": str(a.source.source_type),
        "source_id": a.source.source_id,
        "rationale": a.rationale,
        "metadata": dict(a.metadata or {}),
        "span_id": a.span_id,
        "error": {"error_code": error.error_code, "error_message": error.error_message} if error else None,
    }


def record(trace: Any) -> dict[str, Any]:
    """The trace record of the contract, from an mlflow Trace."""
    info = trace.info
    spans = sorted(trace.data.spans, key=lambda s: s.start_time_ns)
    return {
        "trace_id": info.trace_id,
        "state": str(info.state),
        "request_time": info.request_time,
        "tags": dict(info.tags),
        "metadata": dict(info.trace_metadata),
        "session_id": info.trace_metadata.get("mlflow.trace.session"),
        "spans": [
            {
                "span_id": s.span_id,
                "parent_id": s.parent_id,
                "name": s.name,
                "span_type": s.span_type,
                "start_ns": s.start_time_ns,
                "end_ns": s.end_time_ns,
                "inputs": s.inputs,
                "outputs": s.outputs,
                "attributes": {},
            }
            for s in spans
        ],
        "assessments": [_assessment(a) for a in info.assessments],
    }


def row(rec: dict[str, Any], line: int) -> Row:
    """A trace's row: the root's question and answer, the last RETRIEVER span's documents (text and
    ids, in rank order), the expected response."""
    root = rec["spans"][0]
    retriever = [s for s in rec["spans"] if s["span_type"] == "RETRIEVER"][-1]
    docs = retriever["outputs"] or []
    expected = [a["value"] for a in rec["assessments"] if a["name"] == "expected_response" and a["valid"]]
    return Row(
        id=rec["trace_id"],
        input=root["inputs"]["question"],
        ground_truth=expected[-1] if expected else None,
        output=root["outputs"],
        line=line,
        extra=rec,
        contexts=[d["page_content"] for d in docs],
        context_ids=[str(d["id"]) for d in docs],
        trace_id=rec["trace_id"],
        retriever_span_id=retriever["span_id"],
    )


def read(uri: str, experiment: str) -> Iterator[Row]:
    """The experiment's traces as rows, oldest first, read from the store as they are now."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    traces = client.search_traces(
        locations=[found.experiment_id], max_results=1000, order_by=["timestamp ASC"]
    )
    for line, trace in enumerate(traces, start=1):
        yield row(record(trace), line)


def reading(uri: str, experiment: str) -> Rows:
    """The rows stream a trace dataset gives the pipeline: read again on each pass, as the reader does."""
    return Rows(lambda: read(uri, experiment), f"MLflow experiment {experiment}")
