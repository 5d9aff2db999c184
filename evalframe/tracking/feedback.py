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
is not written again. What the trace holds is read again just before its verdicts are written (another
run, or this one killed and logged again, may have written since the rows were read), and each verdict
gets an id made from the state it was decided on (TraceVerdict.assessment_id): of two runs writing onto the
same trace at once, the store takes one verdict, the other finds it there and skips (the same digest)
or overrides it (another digest). One verdict per (trace, scorer, digest), whatever runs at once.

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
from evalframe.tracking.store import display_uri, store_uri, unavailable
from evalframe.tracking.trace_records import SESSION
from evalframe.tracking.verdict_writes import TURNS, Done, Traces, TraceVerdict, trace_ids, write_item

WORKERS = 4  # writes in flight: a tracking server answers them side by side (SQLite takes one at a time)
LINKS_PER_CALL = 100  # MLflow's link_traces_to_run refuses more (MAX_TRACE_LINKS_PER_REQUEST)
CHUNK = 500  # items whose verdicts are written together: memory holds one chunk, not the run
CHUNKS = "/chunks"  # the name of a scorer's per-chunk feedback on the RETRIEVER span: `<scorer>/chunks`
TURN = "/turn"  # the name of a conversation judge's verdict on one turn of a session, on its trace
TURN_NUMBER = "evalframe.turn"  # a per-turn verdict's metadata: the number of the turn it is on


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


def _against(verdict: TraceVerdict, found: Any) -> TraceVerdict:
    """`verdict` decided against the assessments `found` on its trace: there already (the latest
    evalframe verdict of its name has its digest and decided something), else overriding that latest one."""
    name, span = verdict.name, verdict.span_id
    seen = tuple(
        str(a.get("assessment_id"))
        for a in found or []
        if isinstance(a, Mapping) and a.get("name") == name and (a.get("span_id") or None) == span
    )
    ours = [a for a in judged.feedbacks(found, name, span) if judged.DIGEST in (a.get("metadata") or {})]
    if not ours:
        return replace(verdict, seen=seen)
    last = ours[-1]
    earlier = last.get("metadata") or {}
    same = all(earlier.get(key) == verdict.metadata.get(key) for key in (judged.DIGEST, judged.MISSING))
    there = same and judged.error_code(last) in (None, judged.NOT_APPLICABLE)
    return replace(verdict, seen=seen, there=there, overrides=None if there else str(last["assessment_id"]))


def verdicts(
    item: ItemResult, digests: Mapping[str, str], sources: Mapping[str, tuple[str, str]], run_id: str | None
) -> list[TraceVerdict]:
    """What to write for one item: a feedback per scorer on its trace, and a scorer's per-chunk
    verdicts on its RETRIEVER span; none for a verdict reused from the trace or already on it."""
    return [v for v in decided(item, digests, sources, run_id) if not v.there]


def decided(
    item: ItemResult, digests: Mapping[str, str], sources: Mapping[str, tuple[str, str]], run_id: str | None
) -> list[TraceVerdict]:
    """Every verdict of one item but those reused from the trace, each decided against what its trace
    holds (item.record's assessments): `there` already, or to write."""
    if not item.trace_id:
        return []
    found = item.record.get("assessments")
    out = []
    for name, result in item.scores.items():
        if name not in digests or "reused" in result.details:
            continue
        digest = judged.digest_for(item.record, digests[name])
        metadata = {judged.DIGEST: digest, **({judged.RUN_ID: run_id} if run_id else {}), **_session(item)}
        if lacked := result.details.get(judged.MISSING):  # not applicable to it until the trace has it
            metadata[judged.MISSING] = str(lacked)
        base = TraceVerdict(
            item.trace_id, name, result.score, result.reason, sources.get(name, ("CODE", name)), metadata
        )
        if result.scored:
            out.append(_against(base, found))
        else:
            code = judged.NOT_APPLICABLE if result.not_applicable else "UNSCORED"
            out.append(
                _against(replace(base, value=None, error=(code, result.error or result.reason)), found)
            )
        chunks = chunk_verdicts(result) if result.scored else None
        if chunks and item.retriever_span_id:
            lines = "\n".join(f"#{i} {verdict}: {reason}" for i, (verdict, reason) in enumerate(chunks))
            value = [verdict for verdict, _ in chunks]
            chunked = replace(
                base, name=name + CHUNKS, value=value, rationale=lines, span_id=item.retriever_span_id
            )
            out.append(_against(chunked, found))
        if result.scored:
            out += turn_verdicts(item, result, base)
    return out


def _session(item: ItemResult) -> dict[str, str]:
    """A session's verdict carries its session id, as MLflow's session judges' do (on its first trace)."""
    session = item.record.get("session_id")
    return {SESSION: str(session)} if session and item.record.get(judged.SESSION_TRACES) else {}


def turn_verdicts(item: ItemResult, result: ScoreResult, base: TraceVerdict) -> list[TraceVerdict]:
    """A conversation judge's verdict on each assistant turn of a session (details["turns"]), each on
    the trace that made the turn, named `<scorer>/turn`: the turn's score, its verdict and reason as
    the rationale, each decided against what its trace holds (`there` already, or to write). The
    session's own verdict (`base`, on its first trace) is not among them."""
    made = {
        e.get("turn"): str(e["trace_id"])
        for e in item.record.get(judged.SESSION_TRACES) or []
        if isinstance(e, Mapping) and e.get("turn") is not None and e.get("trace_id")
    }
    others = item.record.get(TURNS) or {}
    metadata = {k: v for k, v in base.metadata.items() if k != SESSION}  # a turn's verdict is the trace's
    out = []
    for entry in result.details.get("turns") or []:
        trace_id = made.get(entry.get("turn")) if isinstance(entry, Mapping) else None
        if trace_id is None:
            continue
        found = item.record.get("assessments") if trace_id == item.trace_id else others.get(trace_id)
        score, reason = entry.get("score"), f"{entry.get('verdict')}: {entry.get('reason') or ''}"
        number = isinstance(score, int | float) and not isinstance(score, bool) and score == score
        turn = replace(
            base,
            trace_id=trace_id,
            name=base.name + TURN,
            value=score if number else None,
            error=None if number else ("UNSCORED", reason),
            rationale=reason,
            metadata={**metadata, TURN_NUMBER: str(entry["turn"])},
        )
        out.append(_against(turn, found))
    return out


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
    already: int = 0  # on the trace already (written by another run, or before a kill)
    failed: int = 0
    first_error: str = ""
    traces: int = 0
    linked: int = 0

    def count(self, verdict: TraceVerdict, error: str | None) -> None:
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or error
        elif verdict.there:
            self.already += 1
        else:
            self.written += 1
            self.overriding += verdict.overrides is not None


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
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        client, traces = _client(uri), Traces(uri)

        def write(item: ItemResult) -> list[Done]:
            return write_item(traces, item, lambda fresh: decided(fresh, digests or {}, sources, run_id))

        for chunk in itertools.chain([first], chunks):
            tally.traces += sum(len(trace_ids(item)) for item in chunk)
            for verdict, error in itertools.chain.from_iterable(pool.map(write, chunk if digests else [])):
                tally.count(verdict, error)
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
    if tally.already:
        line += f", {tally.already} there already (not written twice)"
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
