"""A run over MLflow traces writes each verdict back onto its trace, once: `evalframe` in process
against the scripted judge, on real traces of a traced RAG app in an SQLite store, read back with
MLflow's own API. A second run with an empty judge cache asks nothing and writes nothing; changed
settings judge again and override; a scorer added later judges alone; a run MLflow could not take,
or one killed half-way, writes its verdicts when it is logged or resumed.

The rows come from tests/tracking/traced_rows.py until the trace reader (dataset=mlflow_traces) is on
main: `run.sources.rows` returns them, as it will return the reader's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import mlflow  # noqa: F401 - loaded before the fixtures: new stores start from the test template
import pytest

from evalframe.run import sources
from tests.conftest import fake_model, run_cli
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest, Fault
from tests.tracking import traced_rows

SCORERS = "scorer=[faithfulness,context_precision,exact_match]"


@pytest.fixture
def traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store of the app's traces; a run's dataset is its traces (the store is also the run's). The first
    test of a process seeds the store it copies (2-4 s: MLflow's trace export flushes once a second)."""
    uri = traced_rows.seeded_store(tmp_path)
    monkeypatch.setattr(
        sources, "rows", lambda cfg, tracking=None: traced_rows.reading(uri, traced_rows.EXPERIMENT)
    )
    return uri


def evalframe(uri: str, cwd: Path, *args: str, **env: str) -> Any:
    # The run goes beside the traces, as it does by default for a trace dataset (dataset.experiment).
    result = run_cli(
        [f"tracking.uri={uri}", f"tracking.experiment={traced_rows.EXPERIMENT}", *args], cwd=cwd, env=env
    )
    assert "Traceback" not in result.stderr
    return result


def judged_run(scripted: ScriptedModel, uri: str, cwd: Path, *args: str, **env: str) -> Any:
    return evalframe(uri, cwd, SCORERS, *fake_model(scripted), *args, **env)


def feedbacks(uri: str) -> dict[str, list[Any]]:
    """Every feedback on each trace of the app, valid or not, by trace id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(traced_rows.EXPERIMENT)
    assert experiment is not None
    found = client.search_traces(locations=[experiment.experiment_id], include_spans=False)
    return {t.info.trace_id: [a for a in t.info.assessments if a.feedback is not None] for t in found}


def valid(uri: str) -> dict[str, Counter[str]]:
    """How many valid feedbacks of each name each trace carries."""
    return {t: Counter(a.name for a in found if a.valid) for t, found in feedbacks(uri).items()}


def runs(uri: str) -> list[Any]:
    """The evalframe runs beside the traces, oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(traced_rows.EXPERIMENT)
    assert experiment is not None
    return sorted(client.search_runs([experiment.experiment_id]), key=lambda r: r.info.start_time)


def linked(uri: str, run_id: str) -> set[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(traced_rows.EXPERIMENT)
    assert experiment is not None
    return {
        t.info.trace_id for t in client.search_traces(locations=[experiment.experiment_id], run_id=run_id)
    }


ONE_EACH = Counter(
    {"faithfulness": 1, "context_precision": 1, "context_precision/chunks": 1, "exact_match": 1}
)


def test_verdicts_go_onto_the_traces_once_and_a_second_run_asks_nothing(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    first = judged_run(scripted, traces, tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(scripted.requests) > 0
    assert "verdicts: " in first.stderr and "onto 4 traces" in first.stderr
    assert all(names == ONE_EACH for names in valid(traces).values()), valid(traces)
    [run] = runs(traces)
    assert linked(traces, run.info.run_id) == set(valid(traces))  # the run's traces tab lists them
    for trace_id, found in feedbacks(traces).items():
        by_name = {a.name: a for a in found}
        assert {a.metadata["evalframe.run_id"] for a in found} == {run.info.run_id}
        assert len({a.metadata["evalframe.digest"] for a in found}) == 3  # one per scorer
        judge_source = by_name["faithfulness"].source
        assert (judge_source.source_type, judge_source.source_id) == ("LLM_JUDGE", "scripted/judge")
        code = by_name["exact_match"].source
        assert (code.source_type, code.source_id) == ("CODE", "evalframe.exact_match")
        assert by_name["exact_match"].value in (0.0, 1.0) and by_name["exact_match"].rationale
        chunks = by_name["context_precision/chunks"]
        [row] = [r for r in traced_rows.read(traces, traced_rows.EXPERIMENT) if r.trace_id == trace_id]
        assert chunks.span_id == row.retriever_span_id and len(chunks.value) == len(row.contexts or [])
        assert by_name["faithfulness"].span_id is None
    # No evalframe.item trace of its own for an item read from a trace: its verdicts are on the original.
    assert set(feedbacks(traces)) == set(valid(traces)) and len(valid(traces)) == 4

    scripted.reset()
    again = judged_run(scripted, traces, tmp_path, EVALFRAME_CACHE_DIR=str(tmp_path / "another-machine"))
    assert again.returncode == 0, again.stderr
    assert "nothing to judge: 4 trace(s) already judged with these settings" in again.stderr
    assert scripted.requests == []
    assert all(names == ONE_EACH for names in valid(traces).values())
    assert sum(len(found) for found in feedbacks(traces).values()) == 16  # none written twice
    assert len(runs(traces)) == 1  # and no empty run logged


def test_changed_settings_judge_again_and_override_only_that_scorers_verdicts(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    assert judged_run(scripted, traces, tmp_path).returncode == 0
    before = {t: {a.name: a for a in found} for t, found in feedbacks(traces).items()}
    changed = judged_run(scripted, traces, tmp_path, "scorers.faithfulness.output.verdicts.not_found=0.5")
    assert changed.returncode == 0, changed.stderr
    assert "0 trace(s) skipped; verdicts reused (context_precision on 4, exact_match on 4)" in changed.stderr
    assert all(names == ONE_EACH for names in valid(traces).values())
    for trace_id, found in feedbacks(traces).items():
        faithfulness = [a for a in found if a.name == "faithfulness"]
        [old] = [a for a in faithfulness if not a.valid]
        [new] = [a for a in faithfulness if a.valid]
        assert old.assessment_id == before[trace_id]["faithfulness"].assessment_id
        assert new.overrides == old.assessment_id
        assert new.metadata["evalframe.digest"] != old.metadata["evalframe.digest"]
        assert len(found) == 5  # the other scorers' verdicts untouched
    _, second = runs(traces)
    assert linked(traces, second.info.run_id) == set(before)


def test_a_scorer_added_later_judges_alone(scripted: ScriptedModel, traces: str, tmp_path: Path) -> None:
    assert evalframe(traces, tmp_path, "scorer=exact_match").returncode == 0
    ids = {t: [a.assessment_id for a in found] for t, found in feedbacks(traces).items()}
    added = evalframe(traces, tmp_path, "scorer=[exact_match,token_f1]")
    assert added.returncode == 0, added.stderr
    assert "verdicts reused (exact_match on 4)" in added.stderr
    for trace_id, found in feedbacks(traces).items():
        assert Counter(a.name for a in found if a.valid) == Counter({"exact_match": 1, "token_f1": 1})
        assert [a.assessment_id for a in found if a.name == "exact_match"] == ids[trace_id]


def test_an_unscored_item_is_an_error_on_its_trace_and_is_judged_again_next_time(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    def fails_on_hamlet(request: FakeRequest) -> Any:
        if any("Hamlet" in m["content"] for m in request.messages):
            return Fault(400)  # not retried: the item is unscored
        return judge(request)

    scripted.responder = fails_on_hamlet
    first = judged_run(scripted, traces, tmp_path, "max_unscored_rate=1")
    assert first.returncode == 0, first.stderr
    hamlet = next(r.id for r in traced_rows.read(traces, traced_rows.EXPERIMENT) if "Hamlet" in r.input)
    errors = {a.name: a.feedback.error for a in feedbacks(traces)[hamlet] if a.valid}
    assert errors["faithfulness"].error_code == "UNSCORED" and "400" in errors["faithfulness"].error_message
    assert {a.name: a.value for a in feedbacks(traces)[hamlet] if a.valid}["faithfulness"] is None

    scripted.responder, scripted.requests[:] = judge, []
    again = judged_run(scripted, traces, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "3 trace(s) skipped" in again.stderr  # only the unscored one is judged again
    assert scripted.requests and all("Hamlet" in r.messages[-1]["content"] for r in scripted.requests)
    faithfulness = [a for a in feedbacks(traces)[hamlet] if a.name == "faithfulness"]
    [new] = [a for a in faithfulness if a.valid]
    [old] = [a for a in faithfulness if not a.valid]
    assert new.overrides == old.assessment_id and old.feedback.error is not None


def test_without_tracking_the_verdicts_are_still_written_unless_feedback_is_off(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    off = evalframe(traces, tmp_path, "scorer=exact_match", "tracking=none", "tracking.feedback=false")
    assert off.returncode == 0 and "verdicts" not in off.stderr
    assert all(names == Counter() for names in valid(traces).values())
    on = evalframe(traces, tmp_path, "scorer=exact_match", "tracking=none", f"+dataset.tracking_uri={traces}")
    assert on.returncode == 0, on.stderr
    assert all(names == Counter({"exact_match": 1}) for names in valid(traces).values())
    assert all("evalframe.run_id" not in a.metadata for found in feedbacks(traces).values() for a in found)
    assert runs(traces) == []


def test_a_run_logged_later_writes_its_verdicts_then(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    done = evalframe(traces, tmp_path, "scorer=exact_match", "tracking=none", "tracking.feedback=false")
    assert done.returncode == 0
    [directory] = [p.parent for p in (tmp_path / "outputs").rglob("run.json")]
    logged = run_cli(
        ["log-run", str(directory), f"tracking.uri={traces}", "tracking.experiment=app"], cwd=tmp_path
    )
    assert logged.returncode == 0, logged.stderr
    [run] = runs(traces)
    assert all(names == Counter({"exact_match": 1}) for names in valid(traces).values())
    assert {a.metadata["evalframe.run_id"] for f in feedbacks(traces).values() for a in f} == {
        run.info.run_id
    }
    assert linked(traces, run.info.run_id) == set(valid(traces))
    again = run_cli(
        ["log-run", str(directory), "--again", f"tracking.uri={traces}", "tracking.experiment=app"],
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stderr
    assert sum(len(f) for f in feedbacks(traces).values()) == 4  # not written twice
    assert linked(traces, runs(traces)[1].info.run_id) == set(valid(traces))  # the new run lists them too


def test_a_run_killed_half_way_writes_every_verdict_when_resumed(
    scripted: ScriptedModel, traces: str, tmp_path: Path
) -> None:
    answered: list[FakeRequest] = []

    def interrupted_after_three(request: FakeRequest) -> Any:
        if len(answered) == 3:
            raise KeyboardInterrupt  # Ctrl-C while items are being judged
        answered.append(request)
        return judge(request)

    scripted.responder = interrupted_after_three
    args = ["scorer=faithfulness", "concurrency=1"]
    killed = evalframe(traces, tmp_path, *args, *fake_model(scripted))
    assert killed.returncode == 130, killed.stderr
    assert all(names == Counter() for names in valid(traces).values())  # written at the end, not yet
    scripted.responder = judge
    resumed = evalframe(traces, tmp_path, *args, *fake_model(scripted), "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 of 4 items already done" in resumed.stderr
    assert all(names == Counter({"faithfulness": 1}) for names in valid(traces).values())
