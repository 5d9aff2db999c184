"""Verdicts written back onto the traces a run judged (a trace dataset's rows, a live target's own
traces): MLflow's trace view then shows each scorer's score and reason beside the request, and the run's
traces tab lists the traces it judged.

For each item with a trace and each scorer, one Feedback on the trace: the scorer's name, the score
(an unscored item: an AssessmentError with the reason, never a value), evalframe's reason as the
rationale, the judge model(s) as an LLM_JUDGE source (CODE for scorers that ask no chat model), and
metadata `evalframe.run_id` and `evalframe.digest` (scorers/digest.py). The per-chunk verdicts of a
context judge (context_precision, context_precision_ids) go on the RETRIEVER span as one more
feedback, `<scorer>/chunks`: the verdicts in rank order, a reason per chunk.

An earlier evalframe verdict of the same name under another digest (or one that failed) is overridden
through MLflow's own `overrides` (kept, marked invalid); one under the same digest that decided
something is left alone, so nothing is written twice. A verdict reused from the trace (data.judged)
is not written again.

The verdicts are written from the run's results.jsonl once the run is logged (or finished, without
tracking), so a run killed half-way writes every finished item's verdicts when it is resumed or logged
later (`evalframe log-run`). A write that fails is a warning: the results are on disk and in the run.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalframe.data import judged
from evalframe.redaction import scrub_text
from evalframe.results import summary
from evalframe.results.results_file import iter_items
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.tracking.store import display_uri, fluent_store, one_line, store_uri, unavailable
from evalframe.tracking.trace_records import SESSION

WORKERS = 4  # writes in flight: a tracking server answers them side by side (SQLite takes one at a time)
LINKS_PER_CALL = 100  # MLflow's link_traces_to_run refuses more (MAX_TRACE_LINKS_PER_REQUEST)
CHUNK = 500  # items whose verdicts are written together: memory holds one chunk, not the run
CHUNKS = "/chunks"  # the name of a scorer's per-chunk feedback on the RETRIEVER span: `<scorer>/chunks`
TURN = "/turn"  # the name of a conversation judge's verdict on one turn of a session, on its trace
TURN_NUMBER = "evalframe.turn"  # a per-turn verdict's metadata: the number of the turn it is on


@dataclass(frozen=True)
class TraceVerdict:
    """One Feedback to write onto a trace (or one of its spans)."""

    trace_id: str
    name: str
    value: Any  # None when `error` is set
    rationale: str
    source: tuple[str, str]  # (MLflow AssessmentSourceType, source id)
    metadata: Mapping[str, str]
    error: tuple[str, str] | None = None  # (error code, message): an unscored item
    span_id: str | None = None
    overrides: str | None = None  # the earlier evalframe verdict it replaces


def source(name: str, spec: Any) -> tuple[str, str]:
    """Who gives scorer `name`'s verdicts: its judge model(s) (a panel's, comma-separated), else
    evalframe's code (the embedding models it compares with, if any)."""
    if isinstance(spec, Mapping) and spec.get("model") is not None:
        return "LLM_JUDGE", ",".join(summary.scorer_judges(spec))
    models = spec.get("models") if isinstance(spec, Mapping) else None
    return "CODE", ",".join(map(str, models)) if models else f"evalframe.{name}"


def chunk_verdicts(result: ScoreResult) -> list[tuple[str, str]] | None:
    """(verdict, reason) per retrieved chunk, in rank order, when the result holds them: a ranking
    judge's (one judgment: a panel's are several lists) or context_precision_ids' (each distinct id
    retrieved, in the reference or not)."""
    details = result.details
    found = details.get("verdicts")
    entries = found if isinstance(found, list) and "statements" not in details else []  # not claims'
    if entries and all(isinstance(v, Mapping) and "verdict" in v for v in entries):
        return [(str(v["verdict"]), str(v.get("reason", ""))) for v in entries]
    ids, hits = details.get("ids"), details.get("hits")
    if isinstance(ids, list) and isinstance(hits, list):
        return [
            ("relevant", f"{i} is in the reference") if i in hits else ("irrelevant", f"{i} is not")
            for i in ids
        ]
    return None


def _earlier(assessments: Any, name: str, digest: str, span_id: str | None) -> tuple[bool, str | None]:
    """(whether the verdict is on the trace already, the earlier evalframe verdict to override)."""
    ours = [
        a for a in judged.feedbacks(assessments, name, span_id) if judged.DIGEST in (a.get("metadata") or {})
    ]
    if not ours:
        return False, None
    last = ours[-1]
    same = (last.get("metadata") or {}).get(judged.DIGEST) == digest
    return same and judged.error_code(last) in (None, judged.NOT_APPLICABLE), str(last.get("assessment_id"))


def verdicts(
    item: ItemResult, digests: Mapping[str, str], sources: Mapping[str, tuple[str, str]], run_id: str | None
) -> list[TraceVerdict]:
    """What to write for one item: a feedback per scorer on its trace, and a scorer's per-chunk
    verdicts on its RETRIEVER span; none for a verdict reused from the trace or already on it."""
    if not item.trace_id:
        return []
    found = item.record.get("assessments")
    out = []
    for name, result in item.scores.items():
        if name not in digests or "reused" in result.details:
            continue
        digest = judged.digest_for(item.record, digests[name])
        metadata = {judged.DIGEST: digest, **({judged.RUN_ID: run_id} if run_id else {}), **_session(item)}
        base = TraceVerdict(
            item.trace_id, name, result.score, result.reason, sources.get(name, ("CODE", name)), metadata
        )
        there, overrides = _earlier(found, name, digest, None)
        if not there and result.scored:
            out.append(replace(base, overrides=overrides))
        elif not there:
            code = judged.NOT_APPLICABLE if result.not_applicable else "UNSCORED"
            out.append(
                replace(base, value=None, error=(code, result.error or result.reason), overrides=overrides)
            )
        chunks = chunk_verdicts(result) if result.scored else None
        if chunks and item.retriever_span_id:
            there, overrides = _earlier(found, name + CHUNKS, digest, item.retriever_span_id)
            if not there:
                lines = "\n".join(f"#{i} {verdict}: {reason}" for i, (verdict, reason) in enumerate(chunks))
                value = [verdict for verdict, _ in chunks]
                span = item.retriever_span_id
                out.append(
                    replace(
                        base,
                        name=name + CHUNKS,
                        value=value,
                        rationale=lines,
                        span_id=span,
                        overrides=overrides,
                    )
                )
        if result.scored:
            out += turn_verdicts(item, result, base)
    return out


def _session(item: ItemResult) -> dict[str, str]:
    """A session's verdict carries its session id, as MLflow's session judges' do (on its first trace)."""
    session = item.record.get("session_id")
    return {SESSION: str(session)} if session and item.record.get(judged.SESSION_TRACES) else {}


def trace_ids(item: ItemResult) -> list[str]:
    """The traces an item was read from: its own, or every trace of its session, oldest first."""
    entries = item.record.get(judged.SESSION_TRACES)
    if isinstance(entries, list) and entries:
        return [str(e["trace_id"]) for e in entries if isinstance(e, Mapping) and e.get("trace_id")]
    return [item.trace_id] if item.trace_id else []


def turn_verdicts(item: ItemResult, result: ScoreResult, base: TraceVerdict) -> list[TraceVerdict]:
    """A conversation judge's verdict on each assistant turn of a session (details["turns"]), each on
    the trace that made the turn, named `<scorer>/turn`: the turn's score, its verdict and reason as
    the rationale; none for a turn whose verdict is on its trace already. The session's own verdict
    (`base`, on its first trace) is not among them."""
    made = {
        e.get("turn"): str(e["trace_id"])
        for e in item.record.get(judged.SESSION_TRACES) or []
        if isinstance(e, Mapping) and e.get("turn") is not None and e.get("trace_id")
    }
    others = item.record.get("turn_assessments") or {}
    metadata = {k: v for k, v in base.metadata.items() if k != SESSION}  # a turn's verdict is the trace's
    out = []
    for entry in result.details.get("turns") or []:
        trace_id = made.get(entry.get("turn")) if isinstance(entry, Mapping) else None
        if trace_id is None:
            continue
        found = item.record.get("assessments") if trace_id == item.trace_id else others.get(trace_id)
        there, overrides = _earlier(found, base.name + TURN, metadata[judged.DIGEST], None)
        if there:
            continue
        score, reason = entry.get("score"), f"{entry.get('verdict')}: {entry.get('reason') or ''}"
        number = isinstance(score, int | float) and not isinstance(score, bool) and score == score
        out.append(
            replace(
                base,
                trace_id=trace_id,
                name=base.name + TURN,
                value=score if number else None,
                error=None if number else ("UNSCORED", reason),
                rationale=reason,
                metadata={**metadata, TURN_NUMBER: str(entry["turn"])},
                overrides=overrides,
            )
        )
    return out


def _write(verdict: TraceVerdict) -> str | None:
    """Write one verdict; the error, if it could not be written."""
    import mlflow
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback

    try:
        # log_assessment with `overrides`: what mlflow.override_feedback does (the earlier verdict kept,
        # marked invalid) in one request instead of two, and for an unscored verdict too (an error).
        mlflow.log_assessment(
            verdict.trace_id,
            Feedback(
                name=verdict.name,
                value=verdict.value,
                error=AssessmentError(error_code=verdict.error[0], error_message=verdict.error[1])
                if verdict.error
                else None,
                rationale=verdict.rationale,
                source=AssessmentSource(source_type=verdict.source[0], source_id=verdict.source[1]),
                metadata=dict(verdict.metadata),
                span_id=verdict.span_id,
                overrides=verdict.overrides,
            ),
        )
    except Exception as e:  # its first line: SQLAlchemy's go on with the statement (MLflow's log has it all)
        return f"{type(e).__name__}: {one_line(scrub_text(str(e)))}"
    return None


def traces_uri(config: Mapping[str, Any]) -> str:
    """The store the run's traces are in: the trace dataset's (dataset.tracking_uri), else the run's."""
    import os

    dataset, tracking = config.get("dataset") or {}, config.get("tracking") or {}
    uri = dataset.get("tracking_uri") or tracking.get("uri") or os.environ.get("MLFLOW_TRACKING_URI")
    return store_uri(str(uri or "sqlite:///mlflow.db"))


@dataclass
class Tally:
    written: int = 0
    overriding: int = 0
    failed: int = 0
    first_error: str = ""
    traces: int = 0
    linked: int = 0


def _items(results_file: Path) -> Iterator[list[ItemResult]]:
    with_trace = (item for item in iter_items(results_file) if item.trace_id)
    while chunk := list(itertools.islice(with_trace, CHUNK)):
        yield chunk


def write_back(
    results_file: Path,
    config: Mapping[str, Any],
    run_id: str | None,
    digests: Mapping[str, str] | None,
    notes: list[str],
) -> Tally | None:
    """Write the verdicts of the items in `results_file` onto their traces (`digests` None: they are
    written already, only link them) and link the traces to the run `run_id` when it is in their store.
    Returns what was done (None: no item has a trace); what went wrong is a warning in `notes`."""
    chunks = _items(results_file)
    first = next(chunks, None)
    if first is None:  # no item came from a trace: no store is opened (tracking=none creates none)
        return None
    uri = traces_uri(config)
    problem = unavailable(uri)
    if problem is not None:
        notes.append(f"warning: verdicts not written onto the traces at {display_uri(uri)} ({problem})")
        return None
    sources = {name: source(name, spec) for name, spec in (config.get("scorers") or {}).items()}
    tally, start = Tally(), time.perf_counter()
    linked = run_id is not None and uri == store_uri(str((config.get("tracking") or {}).get("uri") or ""))
    with fluent_store(uri), concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        client = _client(uri)
        for chunk in itertools.chain([first], chunks):
            tally.traces += sum(len(trace_ids(item)) for item in chunk)
            todo = (
                [v for item in chunk for v in verdicts(item, digests or {}, sources, run_id)]
                if digests
                else []
            )
            for verdict, error in zip(todo, pool.map(_write, todo), strict=True):
                if error is None:
                    tally.written += 1
                    tally.overriding += verdict.overrides is not None
                else:
                    tally.failed += 1
                    tally.first_error = tally.first_error or error
            if linked:
                tally.linked += _link(
                    client, [t for item in chunk for t in trace_ids(item)], str(run_id), notes
                )
    elsewhere = run_id is not None and not linked  # the run's store is not the traces': no link can be made
    notes.append(_said(tally, time.perf_counter() - start, display_uri(uri), results_file, elsewhere))
    return tally


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _link(client: Any, trace_ids: list[str], run_id: str, notes: list[str]) -> int:
    """Link the traces to the run, LINKS_PER_CALL at a time; how many were linked."""
    done = 0
    for start in range(0, len(trace_ids), LINKS_PER_CALL):
        part = trace_ids[start : start + LINKS_PER_CALL]
        try:
            client.link_traces_to_run(part, run_id)
        except Exception as e:
            notes.append(
                f"warning: {len(part)} traces not linked to the run ({type(e).__name__}: "
                f"{scrub_text(str(e))[:300]})"
            )
            continue
        done += len(part)
    return done


def _said(tally: Tally, seconds: float, shown_uri: str, results_file: Path, elsewhere: bool) -> str:
    """The console's line on the verdicts written, and a warning for those that were not."""
    line = f"verdicts: {tally.written} written onto {tally.traces} traces at {shown_uri}"
    if tally.overriding:
        line += f" ({tally.overriding} overriding earlier verdicts)"
    if tally.linked:
        line += f", {tally.linked} linked to the run"
    elif elsewhere:
        line += " (not linked: the run is in another store)"
    line += f" in {seconds:.1f} s"
    if tally.failed:
        line += (
            f"\nwarning: {tally.failed} verdicts could not be written onto their traces "
            f"({tally.first_error}); every result is in {results_file}. Run the same command again: the "
            "traces that have their verdicts are skipped and the judge cache answers the rest"
        )
    return line
