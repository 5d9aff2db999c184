"""Large datasets: rows stream from the file, are all validated before the first model call, and are
scored as a continuous flow with the same results whatever the window; the result keeps aggregates of
every item and at most `keep_items` items."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalframe.data import rows as data
from evalframe.errors import DataError
from evalframe.paths import SAMPLE_DATASET
from evalframe.results.journal import RESULTS
from evalframe.results.run_result import RunResult
from evalframe.run import pipeline
from tests.conftest import Judge, compose, fake_model
from tests.scripted import ScriptedModel


def _dataset(path: Path, n: int, last: str | None = None) -> Path:
    lines = [
        json.dumps(
            {"id": f"r{i}", "input": f"Q{i}?", "ground_truth": f"Answer {i}.", "output": f"Answer {i}."}
        )
        for i in range(n)
    ]
    path.write_text("\n".join([*lines, *([last] if last else [])]) + "\n", encoding="utf-8")
    return path


def test_rows_are_read_lazily_one_at_a_time(tmp_path: Path) -> None:
    path = _dataset(tmp_path / "d.jsonl", 3, last="{not json")
    rows = iter(data.Rows.from_config({"path": str(path)}))
    assert inspect.isgenerator(iter(data.Rows.from_config({"path": str(path)})))
    assert next(rows).id == "r0"  # the broken last line has not been read yet
    assert [r.id for r in (next(rows), next(rows))] == ["r1", "r2"]
    with pytest.raises(DataError, match=r"d\.jsonl, line 4: not valid JSON"):
        next(rows)


def test_windows_cover_every_row_once_in_order() -> None:
    rows = data.Rows.from_config({"path": None})
    windows = list(rows.windows(5))
    assert [len(w) for w in windows[:-1]] == [5] * (len(windows) - 1) and 1 <= len(windows[-1]) <= 5
    assert [r.id for w in windows for r in w] == [r.id for r in data.load_rows({"path": None})]
    with pytest.raises(Exception, match="at least one row"):
        next(rows.windows(0))


def test_validate_reads_every_window_and_counts() -> None:
    rows = data.Rows.from_config({"path": str(SAMPLE_DATASET), "limit": 10})
    seen: list[int] = []
    first = rows.validate(lambda window: seen.append(len(window)), 4)
    assert seen == [4, 4, 2] and len(rows) == 10 and first.id == next(iter(rows)).id


@pytest.mark.parametrize(
    "last, message",
    [
        ("{not json", "line 7: not valid JSON"),
        (
            json.dumps({"id": "r1", "input": "Q?", "ground_truth": "A", "output": "A"}),
            "line 7: id 'r1' repeats",
        ),
        (json.dumps({"id": "x", "input": "Q?", "output": "A"}), r"line 7 \(id x\): no ground_truth"),
        (json.dumps({"id": "x", "input": "Q?", "ground_truth": "A"}), r"line 7 \(id x\): no output"),
    ],
)
def test_an_error_on_the_last_line_stops_the_run_before_any_call(
    last: str, message: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    path = _dataset(tmp_path / "d.jsonl", 6, last=last)
    config = compose(
        [
            *(
                "scorer=answer_similarity",
                "tracking=none",
                "dataset=jsonl",
                f"dataset.path={path}",
                "window=2",
            ),
            *fake_model(scripted),
        ]
    )
    with pytest.raises(DataError, match=message):
        pipeline.evaluate(config, tmp_path / "out")
    assert scripted.count() == 0
    assert not (tmp_path / "out" / RESULTS).exists()


def _evaluate(server: Judge, out: Path, *extra: str) -> RunResult:
    overrides = ["scorer=[answer_similarity,token_f1]", *fake_model(server), "tracking=none", *extra]
    return pipeline.evaluate(compose(overrides), out)[0]


def _journal(out: Path) -> list[dict[str, Any]]:
    lines = (out / RESULTS).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_small_windows_give_the_results_of_one_window(scripted: ScriptedModel, tmp_path: Path) -> None:
    whole = _evaluate(scripted, tmp_path / "whole", "window=1000")
    calls = scripted.count()
    scripted.reset()
    windowed = _evaluate(scripted, tmp_path / "windowed", "window=3", "cache.mode=off")
    assert scripted.count() >= calls > 0  # cache off: the judge really answered again

    assert whole.count == windowed.count == len(whole.items) == 28
    assert [i.id for i in windowed.items] == [i.id for i in whole.items]
    for a, b in zip(whole.items, windowed.items, strict=True):
        for name in ("answer_similarity", "token_f1"):
            assert a.scores[name].reason == b.scores[name].reason
            assert a.scores[name].score == b.scores[name].score or (
                math.isnan(a.scores[name].score) and math.isnan(b.scores[name].score)
            )
    # Items finish in any order, so sums of costs may differ in the last bit.
    for name, summary in whole.summaries.items():
        other = windowed.summaries[name]
        assert replace(summary, cost=0) == replace(other, cost=0) and summary.cost == pytest.approx(
            other.cost
        )
    journaled = _journal(tmp_path / "windowed")
    assert sorted(i["id"] for i in journaled) == sorted(i.id for i in whole.items)  # each item once


def test_keep_items_caps_the_items_held_not_the_aggregates(scripted: ScriptedModel, tmp_path: Path) -> None:
    full = _evaluate(scripted, tmp_path / "full", "window=4")
    capped = _evaluate(scripted, tmp_path / "capped", "window=4", "keep_items=5")
    assert len(capped.items) == 5 and capped.count == full.count == 28
    assert [i.id for i in capped.items] == [i.id for i in full.items[:5]]
    # The same statistics (the second run's replies came from the cache, so they cost nothing).
    assert {n: replace(s, cost=0) for n, s in capped.summaries.items()} == {
        n: replace(s, cost=0) for n, s in full.summaries.items()
    }
    assert len(_journal(tmp_path / "capped")) == 28  # every item is on disk


def test_a_large_run_logs_its_first_items_and_says_so(scripted: ScriptedModel, tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = ["scorer=token_f1", "tracking=mlflow", f"tracking.uri={uri}", "keep_items=4", "window=3"]
    pipeline.evaluate(compose(overrides), tmp_path / "out")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    [logged] = client.search_runs([client.get_experiment_by_name("evalframe").experiment_id])  # type: ignore[union-attr]
    assert logged.data.tags["evalframe.items_shown"] == "4 of 28"
    assert logged.data.metrics["token_f1/scored"] + logged.data.metrics.get("token_f1/unscored", 0) == 28
    table = json.loads(
        Path(client.download_artifacts(logged.info.run_id, "items.json", str(tmp_path))).read_text()
    )
    assert len(table["data"]) == 4
    results = Path(client.download_artifacts(logged.info.run_id, RESULTS, str(tmp_path / "r")))
    assert len(results.read_text().splitlines()) == 28


def test_resume_skips_finished_windows_and_counts_their_items(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "cache.mode=off"]
    config = compose([*overrides, "dataset.limit=12", "window=4"])
    full = pipeline.evaluate(config, tmp_path / "out")[0]
    all_calls = scripted.count()
    # As if killed after 6 items: the first window and half of the second are on disk.
    journal = tmp_path / "out" / RESULTS
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:6]))
    scripted.reset()
    resumed = pipeline.evaluate(config, tmp_path / "out", resume_from=tmp_path / "out")[0]
    assert 0 < scripted.count() < all_calls
    assert resumed.count == 12 and [i.id for i in resumed.items] == [i.id for i in full.items]
    assert resumed.summaries["answer_similarity"].mean == full.summaries["answer_similarity"].mean
    assert sorted(i["id"] for i in _journal(tmp_path / "out")) == sorted(i.id for i in full.items)


def _journal_order(monkeypatch: pytest.MonkeyPatch, scripted: ScriptedModel) -> list[tuple[str, int]]:
    """(item id, requests the judge had answered) at each journaled item, in journal order."""
    from evalframe.results.journal import Journal

    seen: list[tuple[str, int]] = []
    append = Journal.append

    def spy(self: Journal, item: Any) -> None:
        seen.append((item.id, scripted.count()))
        append(self, item)

    monkeypatch.setattr(Journal, "append", spy)
    return seen


def test_items_flow_continuously_a_bounded_number_in_flight(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 2 requests at a time, about 4 items are in flight: the first is journaled after a few
    requests, not after every row's first step (the progress bar moves at once on a large run)."""
    seen = _journal_order(monkeypatch, scripted)
    path = _dataset(tmp_path / "d.jsonl", 40)
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "concurrency=2"]
    config = compose([*overrides, "dataset=jsonl", f"dataset.path={path}"])
    result = pipeline.evaluate(config, tmp_path / "o")[0]
    assert result.count == 40 and len(seen) == 40
    assert seen[0][1] <= 4 * 3  # 4 items of at most 3 requests each; window by window: 80 extractions first
    assert [i.id for i in result.items] == [f"r{i}" for i in range(40)]  # the result keeps the rows' order


async def _held_until(seen: list[Any], others: int, request: Any) -> Any:
    """The fake judge's reply, once `others` items are journaled (not after a number of seconds: a
    loaded machine may take any time to score them); 120 s at most, for a run that never lets them."""
    from tests.fake_judge import judge

    for _ in range(2400):
        if len(seen) >= others:
            break
        await asyncio.sleep(0.05)
    return judge(request)


def test_a_slow_item_does_not_hold_back_the_next_rows(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window barrier: while one item's request is stalled, the rows after it go on being scored
    (window=4 used to let at most 3 items pass a stalled one). The stalled item is r5, not r0: until a
    model's first request is back it is the only one in flight (limits.py), by design."""
    from tests.fake_judge import judge

    stalled: list[bool] = []

    def slow_first(request: Any) -> Any:
        if "Answer 5." in json.dumps(request.messages) and not stalled:
            stalled.append(True)
            return _held_until(seen, 20, request)  # a window barrier would never let 20 pass
        return judge(request)

    scripted.responder = slow_first
    seen = _journal_order(monkeypatch, scripted)
    path = _dataset(tmp_path / "d.jsonl", 24)
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "concurrency=4"]
    config = compose([*overrides, "dataset=jsonl", f"dataset.path={path}", "window=4"])
    result = pipeline.evaluate(config, tmp_path / "o")[0]
    assert result.count == 24 and stalled
    order = [item for item, _ in seen]
    assert order.index("r5") >= 20, order  # the other rows flowed past the stalled one


@pytest.mark.slow
def test_a_stalled_first_request_holds_the_others_back_only_a_few_seconds(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's first request is alone in flight until it is back (its rate-limit headers first), but
    not for as long as it stalls: after FIRST_ALONE seconds the rest go too, so a first request that hangs
    until model.timeout does not hold the whole run."""
    from evalframe.models import limits
    from tests.fake_judge import judge

    monkeypatch.setattr(limits, "FIRST_ALONE", 0.5)
    first: list[str] = []  # the row whose request was the model's first

    def stall_the_first(request: Any) -> Any:
        if not first:
            first.append(re.findall(r"Answer (\d+)\.", json.dumps(request.messages))[0])
            return _held_until(seen, 10, request)
        return judge(request)

    scripted.responder = stall_the_first
    seen = _journal_order(monkeypatch, scripted)
    path = _dataset(tmp_path / "d.jsonl", 16)
    overrides = ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "concurrency=4"]
    config = compose([*overrides, "dataset=jsonl", f"dataset.path={path}", "model.timeout=120"])
    result = pipeline.evaluate(config, tmp_path / "o")[0]
    assert result.count == 16 and first
    assert len(seen) == 16 and [item for item, _ in seen].index(f"r{first[0]}") >= 10  # the rest went on
