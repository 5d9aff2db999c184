"""What a trace already carries: the verdicts an earlier run wrote back onto it (evalframe.tracking.
feedback), read from the trace record's assessments, so a trace is never judged twice under the same
settings.

A row's trace holds scorer S's verdict under digest D when it has a valid feedback named S on the trace
itself (not on a span) whose metadata `evalframe.digest` is D, and that feedback is a decision: a value,
or "not applicable" (nothing to measure). An unscored verdict (the judge failed, a 429, a timeout) is no
decision: the trace is judged again, and the new verdict overrides it.

`Unjudged` drops the rows whose trace holds every scorer's verdict and counts them; a row missing some
is kept, and the run reuses the verdicts it has (a scorer added to a judged experiment judges, the old
ones are not asked again).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from evalframe.data.rows import Row, Rows
from evalframe.errors import EXIT_OK, DataError, EvalframeError

DIGEST = "evalframe.digest"  # feedback metadata: the digest of the settings that gave the verdict
RUN_ID = "evalframe.run_id"  # feedback metadata: the evalframe run (its MLflow run id) that gave it
NOT_APPLICABLE = "NOT_APPLICABLE"  # the error code of a verdict with nothing to measure: a decision
# A not-applicable verdict's metadata: the row field its trace lacked (an expectation, say). A decision
# only while the trace still lacks it: once someone adds it, the trace is judged again.
MISSING = "evalframe.missing"
SESSION_TRACES = "session_traces"  # a session item's record: its traces, [{"trace_id", "turn"}] in order


class AllJudged(EvalframeError):
    """Every row's trace already carries every scorer's verdict: nothing to do, which is no failure."""

    exit_code = EXIT_OK
    skipped = 0  # the traces skipped (watch mode counts them per tick)


def error_code(assessment: Mapping[str, Any]) -> str | None:
    """An assessment's error code (None: no error); the record may hold the error as a mapping or text."""
    error = assessment.get("error")
    if isinstance(error, Mapping):
        return str(error.get("error_code") or "ERROR")
    return str(error) if error else None


def feedbacks(assessments: Any, name: str, span_id: str | None = None) -> list[Mapping[str, Any]]:
    """The valid feedbacks named `name` on the trace (`span_id` None) or on that span, oldest first."""
    return [
        a
        for a in assessments or []
        if isinstance(a, Mapping)
        and a.get("kind", "feedback") == "feedback"
        and a.get("name") == name
        and a.get("valid", True)
        and (a.get("span_id") or None) == span_id
    ]


def verdict(
    assessments: Any, name: str, digest: str | None, row: Row | None = None
) -> Mapping[str, Any] | None:
    """The latest valid feedback of scorer `name` on the trace given under `digest` that decides
    something (a score, or not applicable; not one for a field `row` now has), or None."""
    if not digest:
        return None
    for a in reversed(feedbacks(assessments, name)):
        metadata = a.get("metadata") or {}
        if metadata.get(DIGEST) == digest:
            code, value = error_code(a), a.get("value")
            if code is None and isinstance(value, int | float) and not isinstance(value, bool):
                return a
            lacked = metadata.get(MISSING)
            if code == NOT_APPLICABLE and not (
                row and lacked and getattr(row, str(lacked), None) is not None
            ):
                return a
    return None


def taken(assessments: Any, name: str, digest: str) -> bool:
    """Whether the trace carries a valid verdict of scorer `name` under `digest`, decided or not: an
    unscored one (a judge that failed, a trace that cannot be judged) says a run took the trace, which a
    watcher looking for traces stored late does not take again (a run over them judges it again)."""
    return any((a.get("metadata") or {}).get(DIGEST) == digest for a in feedbacks(assessments, name))


def digest_for(record: Mapping[str, Any], digest: str) -> str:
    """The digest a row's verdicts are given under: the settings' `digest`; for a session (a record with
    SESSION_TRACES) the settings' and a hash of its traces' ids, so a session that has grown a turn since
    it was judged is judged again (and its new verdict overrides the old one), while the same session
    under the same settings is not."""
    entries = record.get(SESSION_TRACES)
    if not digest or not isinstance(entries, list) or not entries:
        return digest
    ids = "\n".join(str(e.get("trace_id")) for e in entries if isinstance(e, Mapping))
    return f"{digest}.{hashlib.sha256(ids.encode()).hexdigest()[:12]}"


def already_judged(assessments: list[dict[str, Any]], name: str, digest: str, row: Row | None = None) -> bool:
    """Whether a trace with these assessments (`row`'s) carries scorer `name`'s verdict under `digest`."""
    return verdict(assessments, name, digest, row) is not None


def assessments_of(row: Row) -> Any:
    """The assessments of the trace a row was read from (its record's); none for other rows."""
    return row.extra.get("assessments") if row.trace_id else None


class Unjudged(Rows):
    """`rows` without those whose trace carries the verdict of every scorer in `digests` ({name:
    digest}); once read through, `skipped` says how many were dropped and `reused` how many verdicts
    the kept rows already carry, per scorer."""

    def __init__(self, rows: Rows, digests: Mapping[str, str]):
        super().__init__(self._unjudged(rows), rows.source)
        self.digests = dict(digests)
        self.skipped = 0
        self.unit = "trace(s)"  # what a row is: a trace, or a session (its verdicts on its first trace)
        self.reused: Counter[str] = Counter()

    def _unjudged(self, rows: Rows) -> Callable[[], Iterator[Row]]:
        def read() -> Iterator[Row]:
            skipped, reused = 0, Counter[str]()
            for row in rows:
                found = assessments_of(row)
                if SESSION_TRACES in row.extra:
                    self.unit = "session(s)"
                done = [
                    n
                    for n, d in self.digests.items()
                    if found and already_judged(found, n, digest_for(row.extra, d), row)
                ]
                if self.digests and len(done) == len(self.digests):
                    skipped += 1
                    continue
                reused.update(done)
                yield row
            self.skipped, self.reused = skipped, reused  # counts of a whole pass only

        return read

    def validate(self, check: Callable[[list[Row]], None], size: int = 2000) -> Row:
        try:
            return super().validate(check, size)
        except DataError:
            if self.count is None and self.skipped:
                done = AllJudged(
                    f"nothing to judge: {self.skipped} {self.unit} already judged with these settings "
                    "(their verdicts are on the traces)"
                )
                done.skipped = self.skipped
                raise done from None
            raise

    def said(self) -> str | None:
        """The console's line on what was not judged again, if anything."""
        if not self.skipped and not self.reused:
            return None
        line = f"already judged with these settings: {self.skipped} {self.unit} skipped"
        if self.reused:
            each = ", ".join(f"{name} on {n}" for name, n in sorted(self.reused.items()))
            line += f"; verdicts reused ({each}) where other scorers judge"
        return line


class SetAside(Rows):
    """`rows`, each checked alone by `check` (which raises DataError): a row it refuses, like one that
    could not be read (Row.unjudgeable), is kept saying why, and the run leaves it unscored instead of
    stopping (a watch tick: one bad trace must not stop a watcher). Once read through, `aside` counts
    them, `reasons` holds the first SHOWN, and `first` is the first row that can be judged."""

    SHOWN = 3

    def __init__(self, rows: Rows, check: Callable[[list[Row]], None]):
        super().__init__(self._checked(rows, check), rows.source)
        self.aside = 0
        self.reasons: list[str] = []
        self.first: Row | None = None

    def _checked(self, rows: Rows, check: Callable[[list[Row]], None]) -> Callable[[], Iterator[Row]]:
        def read() -> Iterator[Row]:
            reasons: list[str] = []
            aside, first = 0, None
            for row in rows:
                if row.unjudgeable is None:
                    try:
                        check([row])
                    except DataError as e:
                        row = replace(row, unjudgeable=str(e))
                if row.unjudgeable is None:
                    first = first or row
                else:
                    aside += 1
                    reasons += [row.unjudgeable][: self.SHOWN - len(reasons)]
                yield row
            self.aside, self.reasons, self.first = aside, reasons, first  # of a whole pass only

        return read
