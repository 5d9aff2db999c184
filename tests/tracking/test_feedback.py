"""Verdicts written back onto traces (evalframe.tracking.feedback): what is written for an item, then
written for real into an SQLite MLflow store holding real traces, and read back with MLflow's API.
The run end to end (skip, reuse, override, log-run, resume) is in tests/run/test_trace_verdicts.py."""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import mlflow  # noqa: F401 - loaded before the fixtures: new stores start from the test template
import pytest

from evalframe.data import judged
from evalframe.results.journal import Journal
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.tracking import feedback
from tests.traced_app import EXPERIMENT, Seeded

SOURCES = {
    "faithfulness": ("LLM_JUDGE", "openai/gpt-4o-mini"),
    "exact_match": ("CODE", "evalframe.exact_match"),
}
DIGESTS = {"faithfulness": "f" * 16, "exact_match": "e" * 16, "context_precision": "c" * 16}
RANKED = {
    "verdicts": [{"reason": "states it", "verdict": "relevant"}, {"reason": "off", "verdict": "irrelevant"}]
}


def item(trace_id: str | None = "tr-1", span: str | None = "span-1", **scores: ScoreResult) -> ItemResult:
    return ItemResult("1", "q", "a", "a", scores=dict(scores), trace_id=trace_id, retriever_span_id=span)


def feedback_of(name: str, digest: str, value: Any = 1.0, **more: Any) -> dict[str, Any]:
    return {
        "assessment_id": more.pop("assessment_id", "a-old"),
        "name": name,
        "kind": "feedback",
        "value": value,
        "valid": True,
        "metadata": {judged.DIGEST: digest},
        "span_id": None,
        "error": None,
        **more,
    }


# --- what is written for an item (pure) ------------------------------------------------------------------


def test_one_verdict_per_scorer_with_its_source_digest_and_run() -> None:
    found = feedback.verdicts(
        item(faithfulness=ScoreResult(0.5, "half supported"), exact_match=ScoreResult(1.0, "same")),
        DIGESTS,
        SOURCES,
        "run-1",
    )
    assert [(v.name, v.value, v.rationale, v.source, v.error, v.span_id) for v in found] == [
        ("faithfulness", 0.5, "half supported", ("LLM_JUDGE", "openai/gpt-4o-mini"), None, None),
        ("exact_match", 1.0, "same", ("CODE", "evalframe.exact_match"), None, None),
    ]
    assert found[0].metadata == {"evalframe.digest": "f" * 16, "evalframe.run_id": "run-1"}
    assert all(v.trace_id == "tr-1" and v.overrides is None for v in found)


def test_an_unscored_item_is_an_error_never_a_value_and_no_run_means_no_run_id() -> None:
    unscored = ScoreResult.unscored("verdicts: the reply is not valid JSON")
    [v] = feedback.verdicts(item(faithfulness=unscored), DIGESTS, SOURCES, None)
    assert v.value is None and v.error == ("UNSCORED", "verdicts: the reply is not valid JSON")
    assert v.metadata == {"evalframe.digest": "f" * 16}
    [na] = feedback.verdicts(item(faithfulness=ScoreResult.empty("no claims")), DIGESTS, SOURCES, None)
    assert na.value is None and na.error == ("NOT_APPLICABLE", "not applicable: no claims")


def test_per_chunk_verdicts_go_on_the_retriever_span() -> None:
    ranked = ScoreResult(1.0, "1 of 2 relevant", details=RANKED)
    trace_level, chunks = feedback.verdicts(item(context_precision=ranked), DIGESTS, {}, "run-1")
    assert (trace_level.name, trace_level.span_id) == ("context_precision", None)
    assert (chunks.name, chunks.span_id, chunks.value) == (
        "context_precision/chunks",
        "span-1",
        ["relevant", "irrelevant"],
    )
    assert chunks.rationale == "#0 relevant: states it\n#1 irrelevant: off"
    assert chunks.metadata == trace_level.metadata
    # No RETRIEVER span known: the trace's verdict only.
    assert [
        v.name for v in feedback.verdicts(item(span=None, context_precision=ranked), DIGESTS, {}, None)
    ] == ["context_precision"]


def test_which_details_are_per_chunk_verdicts() -> None:
    assert feedback.chunk_verdicts(ScoreResult(1.0, "", details=RANKED)) == [
        ("relevant", "states it"),
        ("irrelevant", "off"),
    ]
    claims = {
        "statements": ["s"],
        "verdicts": [{"reason": "r", "verdict": "supported"}],
    }  # per claim, not chunk
    assert feedback.chunk_verdicts(ScoreResult(1.0, "", details=claims)) is None
    ids = {"ids": ["d1", "d2", "d3"], "hits": ["d2"]}  # context_precision_ids
    assert feedback.chunk_verdicts(ScoreResult(1 / 3, "", details=ids)) == [
        ("irrelevant", "d1 is not"),
        ("relevant", "d2 is in the reference"),
        ("irrelevant", "d3 is not"),
    ]
    panel = {"judgments": [RANKED, RANKED]}
    assert feedback.chunk_verdicts(ScoreResult(1.0, "", details=panel)) is None


def test_a_verdict_on_the_trace_already_is_not_written_again_and_an_older_one_is_overridden() -> None:
    result = ScoreResult(0.5, "r")

    def written(*assessments: dict[str, Any]) -> list[tuple[str | None, Any]]:
        it = item(faithfulness=result)
        it.record = {"assessments": list(assessments)}
        return [(v.overrides, v.value) for v in feedback.verdicts(it, DIGESTS, SOURCES, "run-2")]

    assert written(feedback_of("faithfulness", "f" * 16)) == []  # same settings: there already
    assert written(feedback_of("faithfulness", "0" * 16)) == [("a-old", 0.5)]  # other settings: overridden
    failed = feedback_of(
        "faithfulness", "f" * 16, None, error={"error_code": "UNSCORED", "error_message": "x"}
    )
    assert written(failed) == [("a-old", 0.5)]  # a failure decided nothing: the new verdict replaces it
    human = {**feedback_of("faithfulness", "f" * 16), "metadata": {}}  # someone else's: left alone
    assert written(human) == [(None, 0.5)]
    invalid = {**feedback_of("faithfulness", "f" * 16), "valid": False}
    assert written(invalid) == [(None, 0.5)]


def test_a_reused_verdict_and_a_row_without_a_trace_write_nothing() -> None:
    reused = ScoreResult(1.0, "r", details={"reused": {"assessment_id": "a-1", "run_id": "run-0"}})
    assert feedback.verdicts(item(faithfulness=reused), DIGESTS, SOURCES, "run-1") == []
    assert (
        feedback.verdicts(item(trace_id=None, faithfulness=ScoreResult(1.0, "r")), DIGESTS, SOURCES, None)
        == []
    )


def test_sources_judges_for_llm_scorers_code_otherwise() -> None:
    assert feedback.source("faithfulness", {"model": {"name": "openai/gpt-4o-mini"}}) == (
        "LLM_JUDGE",
        "openai/gpt-4o-mini",
    )
    panel = {"model": {"name": "openai/gpt-4o-mini"}, "models": ["gpt", {"name": "anthropic/claude"}]}
    assert feedback.source("faithfulness", panel) == ("LLM_JUDGE", "gpt,anthropic/claude")
    assert feedback.source("exact_match", {"_target_": "x"}) == ("CODE", "evalframe.exact_match")
    assert feedback.source("semantic_similarity", {"models": ["local/all-MiniLM-L6-v2"]}) == (
        "CODE",
        "local/all-MiniLM-L6-v2",
    )


# --- written into a real store ----------------------------------------------------------------------------


@pytest.fixture
def store(traced_store: Seeded) -> tuple[str, list[Any]]:
    """Real traces of the RAG app in an SQLite store (tests/traced_app.py), and the rows of its first 4
    OK traces."""
    return traced_store.uri, traced_store.rows("dataset.limit=4")


def journaled(tmp_path: Path, items: list[ItemResult]) -> Path:
    journal = Journal(tmp_path / "run")
    journal.start({}, len(items))
    for i in items:
        journal.append(i)
    journal.finish()
    return journal.path


def items_of(rows: list[Any], **scores: ScoreResult) -> list[ItemResult]:
    return [
        ItemResult(
            r.id,
            r.input,
            r.ground_truth,
            r.output or "",
            scores=dict(scores),
            record=dict(r.extra),
            trace_id=r.trace_id,
            retriever_span_id=r.retriever_span_id,
        )
        for r in rows
    ]


def assessments(uri: str, trace_id: str | None) -> list[Any]:
    """evalframe's verdicts on the trace (the app's people and judges give feedback too)."""
    from mlflow.tracking import MlflowClient

    found = MlflowClient(uri).get_trace(trace_id).info.assessments
    return [a for a in found if a.feedback is not None and judged.DIGEST in (a.metadata or {})]


def config(uri: str) -> dict[str, Any]:
    scorers = {"context_precision": {"model": {"name": "scripted/judge"}}, "exact_match": {}}
    return {"scorers": scorers, "tracking": {"uri": uri, "enabled": True}}


@pytest.mark.slow
def test_written_verdicts_read_back_from_mlflow(store: tuple[str, list[Any]], tmp_path: Path) -> None:
    uri, rows = store
    scores = {
        "context_precision": ScoreResult(0.5, "half", details=RANKED),
        "exact_match": ScoreResult(math.nan, "unscored: x", error="x"),
    }
    results = journaled(tmp_path, items_of(rows, **scores))
    notes: list[str] = []
    tally = feedback.write_back(results, config(uri), None, DIGESTS, notes)
    assert tally is not None and (tally.written, tally.failed, tally.traces) == (12, 0, 4)
    assert notes == [notes[0]] and notes[0].startswith(f"verdicts: 12 written onto 4 traces at {uri}")
    for row in rows:
        found = {(a.name, a.span_id): a for a in assessments(uri, row.trace_id)}
        assert len(found) == 3  # one per scorer on the trace, one per-chunk on the span: no more
        precision = found[("context_precision", None)]
        assert precision.value == 0.5 and precision.rationale == "half" and precision.valid
        assert (precision.source.source_type, precision.source.source_id) == ("LLM_JUDGE", "scripted/judge")
        assert precision.metadata == {"evalframe.digest": "c" * 16}
        chunks = found[("context_precision/chunks", row.retriever_span_id)]
        assert chunks.value == ["relevant", "irrelevant"]
        exact = found[("exact_match", None)]
        assert exact.value is None and exact.feedback.error.error_code == "UNSCORED"
        assert (exact.source.source_type, exact.source.source_id) == ("CODE", "evalframe.exact_match")


def test_a_changed_verdict_overrides_the_old_one_which_stays_invalid(
    store: tuple[str, list[Any]], traced_store: Seeded, tmp_path: Path
) -> None:
    uri, rows = store
    rows = rows[:1]
    feedback.write_back(
        journaled(tmp_path, items_of(rows, exact_match=ScoreResult(0.0, "old"))),
        config(uri),
        None,
        DIGESTS,
        [],
    )
    [again] = [r for r in traced_store.rows("dataset.limit=1") if r.id == rows[0].id]  # its assessments now
    changed = {"exact_match": "9" * 16}
    (tmp_path / "run" / "results.jsonl").unlink()
    feedback.write_back(
        journaled(tmp_path, items_of([again], exact_match=ScoreResult(1.0, "new"))),
        config(uri),
        None,
        changed,
        [],
    )
    found = [a for a in assessments(uri, again.trace_id) if a.name == "exact_match"]
    [old] = [a for a in found if not a.valid]
    [new] = [a for a in found if a.valid]
    assert (old.value, new.value, new.overrides) == (0.0, 1.0, old.assessment_id)
    assert new.metadata["evalframe.digest"] == "9" * 16


def test_a_verdict_that_cannot_be_written_is_a_warning_and_the_others_are_written(
    store: tuple[str, list[Any]], tmp_path: Path
) -> None:
    uri, rows = store
    items = items_of(rows, exact_match=ScoreResult(1.0, "same"))
    items[0].trace_id = "tr-0000000000000000000000000000dead"  # deleted since it was read
    notes: list[str] = []
    tally = feedback.write_back(journaled(tmp_path, items), config(uri), None, DIGESTS, notes)
    assert tally is not None and (tally.written, tally.failed) == (3, 1)
    assert "warning: 1 verdicts could not be written onto their traces" in notes[0]
    assert "Run the same command again" in notes[0]


def test_the_run_is_linked_to_its_traces_a_few_at_a_time(
    store: tuple[str, list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    uri, rows = store
    monkeypatch.setattr(feedback, "LINKS_PER_CALL", 3)  # MLflow's own limit is 100 a call
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    run = client.create_run(experiment.experiment_id)
    notes: list[str] = []
    tally = feedback.write_back(
        journaled(tmp_path, items_of(rows, exact_match=ScoreResult(1.0, "same"))),
        config(uri),
        run.info.run_id,
        DIGESTS,
        notes,
    )
    assert tally is not None and tally.linked == 4
    linked = client.search_traces(
        locations=[run.info.experiment_id], run_id=run.info.run_id, include_spans=False
    )
    assert {t.info.trace_id for t in linked} == {r.trace_id for r in rows}
    assert all(
        a.metadata["evalframe.run_id"] == run.info.run_id for r in rows for a in assessments(uri, r.trace_id)
    )


def test_items_without_traces_open_no_store(tmp_path: Path) -> None:
    results = journaled(tmp_path, [item(trace_id=None, exact_match=ScoreResult(1.0, "same"))])
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    assert feedback.write_back(results, config(uri), None, DIGESTS, []) is None
    assert not (tmp_path / "none.db").exists()


def valid_verdicts(uri: str, trace_id: str | None) -> list[tuple[str, str]]:
    """(name, digest) of each valid evalframe verdict on the trace."""
    return sorted((a.name, a.metadata[judged.DIGEST]) for a in assessments(uri, trace_id) if a.valid)


ONE_EACH = [
    ("context_precision", "c" * 16),
    ("context_precision/chunks", "c" * 16),
    ("exact_match", "e" * 16),
]


@pytest.mark.slow
def test_results_written_back_again_write_nothing_twice(traced_store: Seeded, tmp_path: Path) -> None:
    """A run logged again after a kill in its write-back, or resumed: its results were read before any
    verdict went onto the traces, and are written from that. What the traces hold now decides."""
    uri, rows = traced_store.uri, traced_store.rows("dataset.limit=12")
    scores = {
        "context_precision": ScoreResult(0.5, "half", details=RANKED),
        "exact_match": ScoreResult(1.0, ""),
    }
    results = journaled(tmp_path, items_of(rows, **scores))
    first = feedback.write_back(results, config(uri), None, DIGESTS, [])
    assert first is not None and (first.written, first.already) == (36, 0)
    notes: list[str] = []
    again = feedback.write_back(results, config(uri), None, DIGESTS, notes)
    assert again is not None and (again.written, again.already, again.failed) == (0, 36, 0)
    assert "verdicts: 0 written onto 12 traces" in notes[0] and "36 there already" in notes[0]
    assert all(valid_verdicts(uri, r.trace_id) == ONE_EACH for r in rows)
    assert all(len(assessments(uri, r.trace_id)) == 3 for r in rows)  # none written twice, valid or not


class ReadTooEarly(feedback.Traces):
    """A write-back whose read of each trace comes before another run's write, and its own write after:
    the first read of a trace finds nothing (as the other run had not written yet)."""

    def __init__(self, uri: str):
        super().__init__(uri)
        self.seen: set[str] = set()

    def read(self, trace_id: str) -> list[dict[str, Any]] | None:
        if trace_id not in self.seen:
            self.seen.add(trace_id)
            return []
        return super().read(trace_id)


@pytest.mark.slow
def test_a_verdict_written_between_the_read_and_the_write_is_not_written_twice(
    traced_store: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, rows = traced_store.uri, traced_store.rows("dataset.limit=12")
    scores = {
        "context_precision": ScoreResult(0.5, "half", details=RANKED),
        "exact_match": ScoreResult(1.0, ""),
    }
    results = journaled(tmp_path, items_of(rows, **scores))
    assert feedback.write_back(results, config(uri), None, DIGESTS, []) is not None
    monkeypatch.setattr(feedback, "Traces", ReadTooEarly)
    late = feedback.write_back(results, config(uri), None, DIGESTS, [])
    # Its writes are refused by the store (the ids of verdicts decided on the same state), it reads
    # again and finds them there.
    assert late is not None and (late.written, late.already, late.failed) == (0, 36, 0)
    assert all(valid_verdicts(uri, r.trace_id) == ONE_EACH for r in rows)
    assert all(len(assessments(uri, r.trace_id)) == 3 for r in rows)
    changed = {**DIGESTS, "exact_match": "9" * 16}  # another digest met the same way: overrides
    monkeypatch.setattr(feedback, "Traces", ReadTooEarly)
    other = journaled(tmp_path / "other", items_of(rows, exact_match=ScoreResult(0.0, "")))
    overriding = feedback.write_back(other, config(uri), None, changed, [])
    assert overriding is not None and (overriding.written, overriding.overriding) == (12, 12)
    assert all(("exact_match", "9" * 16) in valid_verdicts(uri, r.trace_id) for r in rows)
    assert all(len(valid_verdicts(uri, r.trace_id)) == 3 for r in rows)


@pytest.mark.slow
def test_two_write_backs_at_once_leave_one_verdict_per_scorer_and_digest(
    traced_store: Seeded, tmp_path: Path
) -> None:
    """Four runs over the same 12 traces at once, each having read them before any wrote: two with the
    same exact_match settings, two with different faithfulness settings. Whichever writes second finds
    the verdict there (the same digest) or overrides it (another digest): one valid verdict per scorer."""
    uri, rows = traced_store.uri, traced_store.rows("dataset.limit=12")
    changed = {**DIGESTS, "faithfulness": "9" * 16}
    runs = [
        (journaled(tmp_path / "a", items_of(rows, exact_match=ScoreResult(1.0, "a"))), DIGESTS),
        (journaled(tmp_path / "b", items_of(rows, exact_match=ScoreResult(0.0, "b"))), DIGESTS),
        (journaled(tmp_path / "c", items_of(rows, faithfulness=ScoreResult(0.5, "c"))), DIGESTS),
        (journaled(tmp_path / "d", items_of(rows, faithfulness=ScoreResult(1.0, "d"))), changed),
    ]
    start = threading.Barrier(len(runs))

    def write(run: tuple[Path, dict[str, str]]) -> feedback.Tally | None:
        start.wait()
        return feedback.write_back(run[0], config(uri), None, run[1], [])

    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        a, b, c, d = list(pool.map(write, runs))
    assert a and b and c and d and not any(t.failed for t in (a, b, c, d))
    assert (a.written + b.written, a.already + b.already) == (12, 12)
    assert (c.written + d.written, c.overriding + d.overriding) == (24, 12)
    for row in rows:
        assert Counter(name for name, _ in valid_verdicts(uri, row.trace_id)) == Counter(
            {"exact_match": 1, "faithfulness": 1}
        )
