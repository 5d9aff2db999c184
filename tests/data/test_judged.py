"""What a trace already carries (evalframe.data.judged), on plain trace records: which verdicts count as
judged, and the rows a run drops because their traces carry every scorer's verdict."""

from __future__ import annotations

from typing import Any

import pytest

from evalframe.data.judged import AllJudged, SetAside, Unjudged, already_judged, taken, verdict
from evalframe.data.rows import Row, Rows
from evalframe.errors import EXIT_OK, DataError

D1, D2 = "1" * 16, "2" * 16


def feedback(
    name: str = "faithfulness", digest: str | None = D1, value: Any = 0.5, **more: Any
) -> dict[str, Any]:
    return {
        "assessment_id": more.pop("assessment_id", f"a-{name}"),
        "name": name,
        "kind": "feedback",
        "value": value,
        "valid": True,
        "source_type": "LLM_JUDGE",
        "source_id": "openai/gpt-4o-mini",
        "rationale": "why",
        "metadata": {"evalframe.digest": digest} if digest else {},
        "span_id": None,
        "error": None,
        **more,
    }


def test_a_valid_decided_verdict_under_the_same_digest_is_judged() -> None:
    assert already_judged([feedback()], "faithfulness", D1)
    assert already_judged([feedback(value=0)], "faithfulness", D1)  # a score of 0 decides too
    na = feedback(value=None, error={"error_code": "NOT_APPLICABLE", "error_message": "no claims"})
    assert already_judged([na], "faithfulness", D1)  # nothing to measure: decided


@pytest.mark.parametrize(
    ("assessments", "why"),
    [
        ([feedback(digest=D2)], "other settings"),
        ([feedback(digest=None)], "not evalframe's (a person's, another tool's)"),
        ([feedback(valid=False)], "overridden"),
        ([feedback(name="context_precision")], "another scorer's"),
        ([feedback(span_id="span-1")], "on a span, not on the trace"),
        ([feedback(kind="expectation")], "an expectation"),
        ([feedback(value=None, error={"error_code": "UNSCORED", "error_message": "429"})], "a failure"),
        ([feedback(value=None, error="TIMEOUT")], "a failure, its error as text"),
        ([feedback(value="yes")], "not a score"),
        ([feedback(value=True)], "not a score"),
        ([], "nothing"),
        (None, "no assessments"),
    ],
)
def test_anything_else_is_not_judged(assessments: Any, why: str) -> None:
    assert not already_judged(assessments, "faithfulness", D1), why


def test_the_latest_verdict_is_the_one_that_counts() -> None:
    older, newer = feedback(assessment_id="a-1", value=0.1), feedback(assessment_id="a-2", value=0.9)
    found = verdict([older, newer], "faithfulness", D1)
    assert found is not None and found["assessment_id"] == "a-2"
    assert verdict([older], "faithfulness", None) is None  # no digest: nothing can match


def row(n: int, *assessments: dict[str, Any], trace: bool = True) -> Row:
    record = {"trace_id": f"tr-{n}", "assessments": list(assessments)}
    trace_id = f"tr-{n}" if trace else None
    return Row(f"tr-{n}", "q", "a", "a", n, extra=record, trace_id=trace_id)


def test_rows_whose_traces_carry_every_verdict_are_dropped_and_counted() -> None:
    rows = [
        row(1, feedback("faithfulness"), feedback("exact_match", D2)),  # both: dropped
        row(2, feedback("faithfulness")),  # one: kept, its faithfulness reused
        row(3),  # none: kept
        row(4, feedback("faithfulness"), feedback("exact_match", D2), trace=False),  # not a trace's row
    ]
    unjudged = Unjudged(Rows.of(rows), {"faithfulness": D1, "exact_match": D2})
    assert [r.id for r in unjudged] == ["tr-2", "tr-3", "tr-4"]
    assert unjudged.skipped == 1 and dict(unjudged.reused) == {"faithfulness": 1}
    assert [r.id for r in unjudged] == ["tr-2", "tr-3", "tr-4"]  # read again: the same rows, the same counts
    assert unjudged.skipped == 1 and dict(unjudged.reused) == {"faithfulness": 1}
    assert unjudged.said() == (
        "already judged with these settings: 1 trace(s) skipped; verdicts reused (faithfulness on 1) "
        "where other scorers judge"
    )
    first = unjudged.validate(lambda window: None)
    assert first.id == "tr-2" and len(unjudged) == 3


def test_every_trace_judged_already_is_a_clean_end_not_an_empty_dataset() -> None:
    rows = [row(n, feedback()) for n in range(3)]
    unjudged = Unjudged(Rows.of(rows, "experiment app"), {"faithfulness": D1})
    with pytest.raises(AllJudged, match=r"^nothing to judge: 3 trace\(s\) already judged") as e:
        unjudged.validate(lambda window: None)
    assert e.value.exit_code == EXIT_OK
    with pytest.raises(Exception, match="has no rows"):  # an empty dataset is still an error
        Unjudged(Rows.of([], "experiment app"), {"faithfulness": D1}).validate(lambda window: None)


def test_rows_without_traces_pass_untouched_and_say_nothing() -> None:
    unjudged = Unjudged(Rows.of([row(1, feedback(), trace=False)]), {"faithfulness": D1})
    assert [r.id for r in unjudged] == ["tr-1"] and unjudged.said() is None


def test_a_trace_is_taken_by_any_verdict_of_the_digest_decided_or_not() -> None:
    """What a watcher looking for traces stored late counts as taken: an unscored verdict too (a trace
    that cannot be judged is not taken again each tick), not one of other settings or overridden."""
    unscored = feedback(value=None, error={"error_code": "UNSCORED", "error_message": "empty input"})
    assert taken([unscored], "faithfulness", D1) and taken([feedback()], "faithfulness", D1)
    assert not taken([feedback(digest=D2)], "faithfulness", D1)
    assert not taken([feedback(valid=False)], "faithfulness", D1)
    assert not taken([], "faithfulness", D1) and not taken(None, "faithfulness", D1)


def test_rows_that_cannot_be_judged_are_kept_saying_why_not_stopping_the_run() -> None:
    """A row the check refuses, like one the reader could not read (Row.unjudgeable), is kept marked:
    the run leaves it unscored. The check sees each row alone, so one bad row spoils no other."""

    def check(window: list[Row]) -> None:
        for r in window:
            if r.output == "":
                raise DataError(f"trace {r.id}: no output")

    unread = Row("tr-9", "", None, None, 9, {"trace_id": "tr-9"}, trace_id="tr-9", unjudgeable="unreadable")
    rows = [row(1), Row("tr-2", "q", "a", "", 2, trace_id="tr-2"), row(3), unread, *[row(n) for n in (5, 6)]]
    aside = SetAside(Rows.of(rows), check)
    marked = {r.id: r.unjudgeable for r in aside}
    assert marked == {
        "tr-1": None, "tr-2": "trace tr-2: no output", "tr-3": None, "tr-9": "unreadable", "tr-5": None,
        "tr-6": None,
    }  # fmt: skip
    assert aside.aside == 2 and aside.reasons == ["trace tr-2: no output", "unreadable"]
    assert aside.first is not None and aside.first.id == "tr-1"
    everything = SetAside(Rows.of([unread] * 5), check)
    assert everything.validate(check).id == "tr-9"  # no row stops it, not even when none can be judged
    assert everything.aside == 5 and len(everything.reasons) == SetAside.SHOWN and everything.first is None
