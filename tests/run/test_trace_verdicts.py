"""A run over MLflow traces writes each verdict back onto its trace, once: `evalframe dataset=mlflow_traces`
in process against the scripted judge, on the traced RAG app's store (tests/traced_app.py; the first 4 OK
traces, `dataset.limit=4`, which carry expected answers), read back with MLflow's own API. A second run
with an empty judge cache asks nothing and writes nothing; changed settings judge again and override; a
scorer added later judges alone; a run MLflow could not take, or one killed half-way, writes its verdicts
when it is logged or resumed, and a resumed run reads the traces it started on."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.entities import AssessmentSource, AssessmentSourceType

from evalframe.results.manifest import Manifest
from evalframe.tracking import verdict_writes
from tests.conftest import fake_model, run_cli
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest, Fault
from tests.traced_app import QUESTIONS, Seeded, answer, feedbacks, logging_to, verdicts

pytestmark = pytest.mark.slow  # whole runs logged to MLflow, several per test: make test runs them

SCORERS = "scorer=[faithfulness,context_precision,exact_match]"
FOUR = "dataset.limit=4"  # the first 4 OK traces: quick, and each has an expected answer (exact_match)


def untracked(store: Seeded) -> list[str]:
    """exact_match with no MLflow run (tracking=none): the traces' store named by dataset.tracking_uri."""
    return ["scorer=exact_match", FOUR, "tracking=none", f"dataset.tracking_uri={store.uri}"]


def evalframe(store: Seeded, cwd: Path, *args: str, **env: str) -> Any:
    result = run_cli([*store.overrides(), *args], cwd=cwd, env=env)
    assert "Traceback" not in result.stderr
    return result


def judged_run(scripted: ScriptedModel, store: Seeded, cwd: Path, *args: str, **env: str) -> Any:
    return evalframe(store, cwd, SCORERS, FOUR, *fake_model(scripted), *args, **env)


def runs(store: Seeded) -> list[Any]:
    """The evalframe runs beside the traces, oldest first."""
    found = mlflow.MlflowClient(store.uri).search_runs([store.experiment_id])
    return sorted(found, key=lambda r: r.info.start_time)


def linked(store: Seeded, run_id: str) -> set[str]:
    found = mlflow.MlflowClient(store.uri).search_traces(locations=[store.experiment_id], run_id=run_id)
    return {t.info.trace_id for t in found}


ONE_EACH = Counter(
    {"faithfulness": 1, "context_precision": 1, "context_precision/chunks": 1, "exact_match": 1}
)


def test_verdicts_go_onto_the_traces_once_and_a_second_run_asks_nothing(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    first = judged_run(scripted, store, tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(scripted.requests) > 0
    assert "verdicts: " in first.stderr and "onto 4 traces" in first.stderr
    assert sorted(verdicts(store)) == sorted(store.ok[:4])
    assert all(names == ONE_EACH for names in verdicts(store).values()), verdicts(store)
    [run] = runs(store)
    assert linked(store, run.info.run_id) == set(store.ok[:4])  # the run's traces tab lists them
    client = mlflow.MlflowClient(store.uri)
    for trace_id, found in feedbacks(store).items():
        by_name = {a.name: a for a in found}
        assert {a.metadata["evalframe.run_id"] for a in found} == {run.info.run_id}
        assert len({a.metadata["evalframe.digest"] for a in found}) == 3  # one per scorer
        judge_source = by_name["faithfulness"].source
        assert (judge_source.source_type, judge_source.source_id) == ("LLM_JUDGE", "scripted/judge")
        code = by_name["exact_match"].source
        assert (code.source_type, code.source_id) == ("CODE", "evalframe.exact_match")
        assert by_name["exact_match"].value in (0.0, 1.0) and by_name["exact_match"].rationale
        chunks = by_name["context_precision/chunks"]
        [retriever] = [s for s in client.get_trace(trace_id).data.spans if s.span_type == "RETRIEVER"]
        assert chunks.span_id == retriever.span_id
        assert len(chunks.value) == len(store.documents[trace_id])
        assert by_name["faithfulness"].span_id is None
    # No evalframe.item trace of its own for an item read from a trace: its verdicts are on the original.
    every = client.search_traces(locations=[store.experiment_id], include_spans=False, max_results=500)
    assert sorted(t.info.trace_id for t in every) == sorted(store.ids)

    scripted.reset()
    again = judged_run(scripted, store, tmp_path, EVALFRAME_CACHE_DIR=str(tmp_path / "another-machine"))
    assert again.returncode == 0, again.stderr
    assert "nothing to judge: 4 trace(s) already judged with these settings" in again.stderr
    assert scripted.requests == []
    assert all(names == ONE_EACH for names in verdicts(store).values())
    assert sum(len(found) for found in feedbacks(store).values()) == 16  # none written twice
    assert len(runs(store)) == 1  # and no empty run logged


def test_changed_settings_judge_again_and_override_only_that_scorers_verdicts(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    assert judged_run(scripted, store, tmp_path).returncode == 0
    before = {t: {a.name: a for a in found} for t, found in feedbacks(store).items()}
    changed = judged_run(scripted, store, tmp_path, "scorers.faithfulness.output.verdicts.not_found=0.5")
    assert changed.returncode == 0, changed.stderr
    assert "0 trace(s) skipped; verdicts reused (context_precision on 4, exact_match on 4)" in changed.stderr
    assert all(names == ONE_EACH for names in verdicts(store).values())
    for trace_id, found in feedbacks(store).items():
        faithfulness = [a for a in found if a.name == "faithfulness"]
        [old] = [a for a in faithfulness if not a.valid]
        [new] = [a for a in faithfulness if a.valid]
        assert old.assessment_id == before[trace_id]["faithfulness"].assessment_id
        assert new.overrides == old.assessment_id
        assert new.metadata["evalframe.digest"] != old.metadata["evalframe.digest"]
        assert len(found) == 5  # the other scorers' verdicts untouched
    _, second = runs(store)
    assert linked(store, second.info.run_id) == set(before) == set(store.ok[:4])


def test_a_scorer_added_later_judges_alone(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    assert evalframe(store, tmp_path, "scorer=exact_match", FOUR).returncode == 0
    ids = {t: [a.assessment_id for a in found] for t, found in feedbacks(store).items()}
    added = evalframe(store, tmp_path, "scorer=[exact_match,token_f1]", FOUR)
    assert added.returncode == 0, added.stderr
    assert "verdicts reused (exact_match on 4)" in added.stderr
    assert sorted(feedbacks(store)) == sorted(store.ok[:4])
    for trace_id, found in feedbacks(store).items():
        assert Counter(a.name for a in found if a.valid) == Counter({"exact_match": 1, "token_f1": 1})
        assert [a.assessment_id for a in found if a.name == "exact_match"] == ids[trace_id]


def test_an_unscored_item_is_an_error_on_its_trace_and_is_judged_again_next_time(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    seats = store.ok[3]  # its answer and best document, seat reservations, no other of the four retrieves
    marker = store.documents[seats][0].page_content
    assert not any(marker in (d.page_content for d in store.documents[t]) for t in store.ok[:3])

    def fails_on_seats(request: FakeRequest) -> Any:
        if any(marker in m["content"] for m in request.messages):
            return Fault(400)  # not retried: the item is unscored
        return judge(request)

    scripted.responder = fails_on_seats
    first = judged_run(scripted, store, tmp_path, "max_unscored_rate=1")
    assert first.returncode == 0, first.stderr
    errors = {a.name: a.feedback.error for a in feedbacks(store)[seats] if a.valid}
    assert errors["faithfulness"].error_code == "UNSCORED" and "400" in errors["faithfulness"].error_message
    assert {a.name: a.value for a in feedbacks(store)[seats] if a.valid}["faithfulness"] is None

    scripted.responder, scripted.requests[:] = judge, []
    again = judged_run(scripted, store, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "3 trace(s) skipped" in again.stderr  # only the unscored one is judged again
    assert scripted.requests and all(marker in r.messages[-1]["content"] for r in scripted.requests)
    faithfulness = [a for a in feedbacks(store)[seats] if a.name == "faithfulness"]
    [new] = [a for a in faithfulness if a.valid]
    [old] = [a for a in faithfulness if not a.valid]
    assert new.overrides == old.assessment_id and old.feedback.error is not None


def test_without_tracking_the_verdicts_are_still_written_unless_feedback_is_off(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    off = evalframe(store, tmp_path, *untracked(store), "tracking.feedback=false")
    assert off.returncode == 0, off.stderr
    assert "verdicts" not in off.stderr and verdicts(store) == {}
    on = evalframe(store, tmp_path, *untracked(store))
    assert on.returncode == 0, on.stderr
    assert verdicts(store) == {t: Counter({"exact_match": 1}) for t in store.ok[:4]}
    assert all("evalframe.run_id" not in a.metadata for found in feedbacks(store).values() for a in found)
    assert runs(store) == []


def test_a_run_logged_later_writes_its_verdicts_then(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    store = traced_store
    done = evalframe(store, tmp_path, *untracked(store), "tracking.feedback=false")
    assert done.returncode == 0, done.stderr
    [directory] = [p.parent for p in (tmp_path / "outputs").rglob("run.json")]
    # The run kept its verdicts back (tracking.feedback=false): log-run keeps the run's settings but for
    # what its own command line sets, here feedback back on.
    where = [f"tracking.uri={store.uri}", f"tracking.experiment={store.experiment}", "tracking.feedback=true"]
    logged = run_cli(["log-run", str(directory), *where], cwd=tmp_path)
    assert logged.returncode == 0, logged.stderr
    [run] = runs(store)
    assert verdicts(store) == {t: Counter({"exact_match": 1}) for t in store.ok[:4]}
    assert {a.metadata["evalframe.run_id"] for f in feedbacks(store).values() for a in f} == {run.info.run_id}
    assert linked(store, run.info.run_id) == set(store.ok[:4])
    again = run_cli(["log-run", str(directory), "--again", *where], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sum(len(f) for f in feedbacks(store).values()) == 4  # not written twice
    assert linked(store, runs(store)[1].info.run_id) == set(store.ok[:4])  # the new run lists them too


def test_a_run_killed_half_way_resumes_on_its_own_traces_and_writes_every_verdict(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path
) -> None:
    """Between the kill and the resume the app goes on: a new trace arrives that the filter selects,
    and a reviewer's feedback lands on a trace the run reads. The resumed run reads the traces it
    started on (its time window pinned in run.json) and judges only the items it had not finished."""
    store = traced_store
    billing = store.tags["team"]["billing"]  # 6 traces, all OK
    answered: list[FakeRequest] = []

    def interrupted_after_three(request: FakeRequest) -> Any:
        if len(answered) == 3:
            raise KeyboardInterrupt  # Ctrl-C while items are being judged
        answered.append(request)
        return judge(request)

    scripted.responder = interrupted_after_three
    args = ["scorer=faithfulness", "concurrency=1", "dataset.tags={team: billing}", *fake_model(scripted)]
    killed = evalframe(store, tmp_path, *args)
    assert killed.returncode == 130, killed.stderr
    assert verdicts(store) == {}  # written at the end, not yet
    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    finished = [json.loads(line)["id"] for line in journal.read_text().splitlines()]
    assert 0 < len(finished) < len(billing)

    with logging_to(store.uri, store.experiment):  # the app answers another billing question
        answer(QUESTIONS[2])
        mlflow.flush_trace_async_logging()
        late = mlflow.get_last_active_trace_id()
    reviewer = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="reviewer@example.com")
    with logging_to(store.uri):
        mlflow.log_feedback(trace_id=billing[0], name="helpfulness", value=1.0, source=reviewer)

    scripted.responder, scripted.requests[:] = judge, []
    # An empty judge cache: each item not finished is asked again in full, and only those are.
    resumed = evalframe(store, tmp_path, *args, "resume=true", EVALFRAME_CACHE_DIR=str(tmp_path / "empty"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(finished)} of {len(billing)} items already done" in resumed.stderr
    asked = [m["content"] for r in scripted.requests for m in r.messages]
    for trace_id in billing:  # only the unfinished items are judged (a claims prompt names its question)
        assert any(store.questions[trace_id] in text for text in asked) == (trace_id not in finished)
    assert verdicts(store) == {t: Counter({"faithfulness": 1}) for t in billing}
    assert late not in verdicts(store)


TWO = ["scorer=[faithfulness,exact_match]", "dataset.limit=12"]  # 12 traces with expected answers


def killed_in_the_write_back(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """The run stopped (Ctrl-C; a SIGKILL leaves the same on disk and in the store) once `after` verdicts
    are on their traces: after its MLflow run, which is logged before its verdicts."""
    real, written = verdict_writes.Traces.write, list[verdict_writes.TraceVerdict]()
    lock = threading.Lock()

    def write(self: verdict_writes.Traces, verdict: verdict_writes.TraceVerdict) -> str | None:
        with lock:
            if len(written) >= after:
                raise KeyboardInterrupt
            written.append(verdict)
        return real(self, verdict)

    monkeypatch.setattr(verdict_writes.Traces, "write", write)


def half_written(
    scripted: ScriptedModel, store: Seeded, cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str
) -> Path:
    """A run of TWO killed while writing its verdicts; its directory."""
    with monkeypatch.context() as patched:
        killed_in_the_write_back(patched, after=10)
        killed = evalframe(store, cwd, *TWO, *fake_model(scripted), *args)
    assert killed.returncode == 130, killed.stderr
    [directory] = [p.parent for p in (cwd / "outputs").rglob("run.json")]
    manifest = Manifest.read(directory)
    assert manifest.finished and manifest.verdicts_pending
    assert 0 < sum(sum(names.values()) for names in verdicts(store).values()) < 24
    return directory


def one_each(store: Seeded) -> bool:
    """Every one of the 12 traces holds one verdict of each scorer, none written twice (valid or not)."""
    both = Counter({"faithfulness": 1, "exact_match": 1})
    counted = {t: Counter(a.name for a in found) for t, found in feedbacks(store).items()}
    return verdicts(store) == counted == dict.fromkeys(store.ok[:12], both)


def test_a_run_killed_while_writing_its_verdicts_is_completed_by_resume_without_a_second_run(
    scripted: ScriptedModel, traced_store: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = traced_store
    directory = half_written(scripted, store, tmp_path, monkeypatch)
    [run] = runs(store)
    scripted.reset()
    resumed = evalframe(store, tmp_path, *TWO, *fake_model(scripted), "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {directory}: every item had finished; nothing is judged again" in resumed.stderr
    assert "writing the missing ones" in resumed.stderr and "there already" in resumed.stderr
    assert scripted.requests == []
    assert one_each(store)
    assert [r.info.run_id for r in runs(store)] == [run.info.run_id]
    assert linked(store, run.info.run_id) == set(store.ok[:12])
    assert {a.metadata["evalframe.run_id"] for f in feedbacks(store).values() for a in f} == {run.info.run_id}
    assert Manifest.read(directory).verdicts_written
    again = evalframe(store, tmp_path, *TWO, *fake_model(scripted), "resume=true")  # nothing left
    assert again.returncode == 2 and "no unfinished run" in again.stderr


@pytest.mark.parametrize("tracking", ["on", "none"])
def test_log_run_of_a_run_killed_while_writing_its_verdicts_writes_only_the_missing_ones(
    tracking: str,
    scripted: ScriptedModel,
    traced_store: Seeded,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Logged already (tracking on): no second run, the verdicts it lacks linked to its run. Never logged
    (tracking=none): logged once, and the verdicts on the traces already are not written again."""
    store = traced_store
    untracked = ["tracking=none", f"dataset.tracking_uri={store.uri}"] if tracking == "none" else []
    directory = half_written(scripted, store, tmp_path, monkeypatch, *untracked)
    before = [r.info.run_id for r in runs(store)]
    where = [f"tracking.uri={store.uri}", f"tracking.experiment={store.experiment}"]
    logged = run_cli(["log-run", str(directory), *where], cwd=tmp_path)
    assert logged.returncode == 0 and "Traceback" not in logged.stderr, logged.stderr
    assert one_each(store)
    [run] = runs(store)
    assert before == ([run.info.run_id] if tracking == "on" else [])
    assert linked(store, run.info.run_id) == set(store.ok[:12])
    assert Manifest.read(directory).verdicts_written
