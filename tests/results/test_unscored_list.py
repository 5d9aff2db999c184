"""Unscored items are visible: after the summary the console lists the first 5 per scorer (id, step,
error, one line each) and says where the rest are; report.html has the same list at its top."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from evalframe.models.steps import StepResult
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult, Unscored
from evalframe.run import pipeline
from tests.conftest import compose, fake_model
from tests.fake_judge import judge, step_of
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest


def test_console_and_report_list_the_first_unscored_items(
    scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(req: FakeRequest) -> Any:  # every analysis is unreadable: 26 of 28 items unscored
        return "not json\n[at all]" if step_of(req) == "Analysis" else judge(req)

    scripted.responder = broken
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "model.reply_retries=0"]
    result, code = pipeline.evaluate(compose(overrides), tmp_path)
    assert code == 4 and result.summaries["answer_similarity"].unscored == 26
    out = capsys.readouterr().out
    listed = out[out.index("unscored items (the first 5 per scorer") :].splitlines()
    rows = [line for line in listed[1:] if line.startswith("  answer_similarity  ")]
    unscored = [i.id for i in result.items if not i.scores["answer_similarity"].scored]
    first = [row.split()[1] for row in rows]  # items finish in any order: 5 of them, in the rows' order
    assert len(set(first)) == 5 and set(first) <= set(unscored)
    assert first == sorted(first, key=unscored.index)
    assert all(row.split()[2] == "analyze" and "invalid reply after 1 attempt(s)" in row for row in rows)
    results = str(tmp_path / "results.jsonl")
    assert f"21 more of answer_similarity; every item, error and raw reply is in {results}" in " ".join(
        line.strip() for line in listed
    )
    page = (tmp_path / "report.html").read_text()
    top = page.index("Unscored items (the first 5 per scorer)")
    assert top < page.index("<h2>Summary</h2>")
    assert all(f"<td>{i}</td>" in page[top : page.index("<h2>Summary</h2>")] for i in first)
    assert "21 more of answer_similarity" in page


def test_nothing_is_listed_when_every_item_is_scored(
    scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "dataset.limit=3"]
    pipeline.evaluate(compose(overrides), tmp_path)
    assert "unscored items" not in capsys.readouterr().out
    assert "Unscored items" not in (tmp_path / "report.html").read_text()


def test_an_unscored_item_in_one_line() -> None:
    failed = StepResult("analyze", [], error="invalid reply after 3 attempt(s):\n matches.0: missing")
    result = ScoreResult.unscored(f"analyze: {failed.error}", [failed])
    assert Unscored.of("q1", result) == Unscored(
        "q1", "analyze", "invalid reply after 3 attempt(s): matches.0: missing"
    )
    target = ScoreResult.unscored("target: Timeout: took too long")
    assert Unscored.of("q2", target) == Unscored("q2", "target", "Timeout: took too long")
    # kept from every item, also when the result keeps only the first items
    items = [ItemResult(f"i{n}", "", None, "", {"s": ScoreResult(math.nan, "", error="x")}) for n in range(9)]
    run = RunResult(items, ["s"], keep=2)
    assert [u.id for u in run.unscored["s"]] == ["i0", "i1", "i2", "i3", "i4"] and len(run.items) == 2
    assert re.fullmatch(r"[^\n]*", Unscored.of("q1", result).error)
