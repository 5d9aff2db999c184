"""The verdicts of a finished run onto the traces its rows came from: results.jsonl is read back only
when some item came from a trace (a 100,000-item run of a file would read it all for nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalframe.config.settings import RunSettings
from evalframe.results.journal import Journal
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.run import sinks
from evalframe.run.sinks import Concluded


def _result(*trace_ids: str | None) -> RunResult:
    result = RunResult(items=[], scorers=["exact_match"])
    for i, trace_id in enumerate(trace_ids):
        item = ItemResult(str(i), "q", "a", "a", scores={"exact_match": ScoreResult(1.0, "same")})
        item.trace_id = trace_id
        result.add(item)
    return result


@pytest.mark.parametrize(("trace_ids", "read_back"), [((None, None), False), ((None, "tr-1"), True)])
def test_results_are_read_back_for_the_traces_only_when_an_item_has_one(
    trace_ids: tuple[str | None, ...], read_back: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Path] = []

    def write_back(results_file: Path, *args: Any) -> None:
        asked.append(results_file)

    monkeypatch.setattr(sinks.feedback, "write_back", write_back)
    result = _result(*trace_ids)
    assert result.traced == sum(t is not None for t in trace_ids)
    sinks.trace_verdicts(
        Concluded(result, RunSettings(), {"tracking": {"feedback": True}}, Journal(tmp_path))
    )
    assert bool(asked) is read_back


def test_a_result_built_without_add_still_reads_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Path] = []
    monkeypatch.setattr(sinks.feedback, "write_back", lambda results_file, *args: asked.append(results_file))
    sinks.trace_verdicts(Concluded(RunResult(items=[], scorers=[]), RunSettings(), {}, Journal(tmp_path)))
    assert asked


def test_a_file_datasets_run_never_passes_through_trace_verdict_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reusing the verdicts traces carry is a trace dataset's: a file's rows carry none, so its run
    neither filters them nor asks reuse which to score, yet still has the digests a live target's
    traces get with their verdicts."""
    from evalframe.run import pipeline, planning, reuse
    from tests.conftest import compose

    def never(*args: Any) -> Any:
        raise AssertionError("a file dataset's run asked reuse")

    monkeypatch.setattr(reuse, "ask", never)
    config = compose(["scorer=exact_match", "tracking=none"])
    p = planning.plan(config)
    assert p.unjudged is None and set(p.digests) == {"exact_match"}
    result, code = pipeline.evaluate(config, tmp_path)
    assert code == 0 and result.count == p.rows.count


def test_a_shard_and_its_merge_hold_a_whole_runs_outputs_and_write_the_verdicts_once() -> None:
    from evalframe.run import modes

    assert modes.VERDICTS not in modes.SHARD.outputs and modes.VERDICTS in modes.MERGE.outputs
    whole = modes.RUN.outputs - {modes.WHERE}  # the sweep names its parent run, where the merge goes
    assert modes.SHARD.outputs | modes.MERGE.outputs >= whole
    assert not modes.SHARD.gated and modes.MERGE.gated and not modes.SHARD.progress
    assert modes.VERDICTS not in modes.SWEEP_JOB.outputs  # each job's settings would override the last's
    off = RunSettings.model_validate({"tracking": {"enabled": False, "feedback": False}})
    assert modes.RUN.sinks(off) == [sinks.report_file, sinks.console_tables, sinks.where_to_look]
    assert sinks.trace_verdicts in modes.RUN.sinks(RunSettings())
