"""Watch mode in process, on a real MLflow store of the traced RAG app (tests/traced_app.py) with the
scripted judge: ticks judge the traces that arrived since the checkpoint, each once, into one MLflow run
whose step goes on when the watcher is started again; settle holds back fresh traces; a stop mid-tick
resumes that tick's journal. Each test is several watcher starts on a copied store (3-9 s): what
is tested is that the next start goes on from what the last one left in MLflow."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import compose, fake_model, run_cli
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.traced_app import EXPERIMENT, QUESTIONS, Seeded, answer, logging_to

WATCH = ["watch.every=0.1s", "watch.settle=0s"]


def watcher(store: Seeded, scripted: ScriptedModel, *args: str) -> list[str]:
    return [
        "dataset=mlflow_traces",
        f"dataset.experiment={EXPERIMENT}",
        "scorer=faithfulness",
        *fake_model(scripted),
        f"tracking.uri={store.uri}",
        *WATCH,
        *args,
    ]


def watch(store: Seeded, scripted: ScriptedModel, cwd: Path, *args: str) -> Any:
    done = run_cli(watcher(store, scripted, *args), cwd)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    return done


def add_traces(store: Seeded, questions: list[str]) -> list[str]:
    """The app answers `questions` into the store now: new OK traces (the questions avoid its errors)."""
    import mlflow

    ids = []
    with logging_to(store.uri, store.experiment):
        for question in questions:
            answer(question)
            ids.append(str(mlflow.get_last_active_trace_id()))
        mlflow.flush_trace_async_logging()
    return ids


def verdicts(store: Seeded) -> dict[str, Counter[str]]:
    """The evalframe feedbacks on each trace (valid or not), counted by name."""
    from mlflow.tracking import MlflowClient

    found: dict[str, Counter[str]] = {}
    for trace in MlflowClient(store.uri).search_traces(
        locations=[store.experiment_id], include_spans=False, max_results=500
    ):
        names = Counter(a.name for a in trace.info.assessments if "evalframe.digest" in (a.metadata or {}))
        if names:
            found[trace.info.trace_id] = names
    return found


def asked(scripted: ScriptedModel) -> Counter[str]:
    """The judge's requests per question of the app (a faithfulness judgment asks about its question)."""
    return Counter(
        q for r in scripted.requests for q in QUESTIONS if any(q in m["content"] for m in r.messages)
    )


def the_run(store: Seeded) -> Any:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store.uri)
    runs = client.search_runs([store.experiment_id], filter_string="tags.`evalframe.watch` != ''")
    assert len(runs) == 1, [r.info.run_id for r in runs]
    history = {
        name: [
            (m.step, m.value)
            for m in sorted(client.get_metric_history(runs[0].info.run_id, name), key=lambda m: m.step)
        ]
        for name in ("watch/judged", "watch/skipped", "faithfulness/mean")
    }
    return runs[0], history


NEW = [QUESTIONS[0], QUESTIONS[1]]  # not the ERROR ones (5, 11, ...)


@pytest.mark.slow
def test_ticks_judge_what_arrived_since_the_checkpoint_once_into_one_run(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    first = watch(traced_store, scripted, tmp_path, "watch.ticks=2")
    assert "tick 0 at" in first.stdout and "30 judged" in first.stdout
    assert "tick 1 at" in first.stdout and ": 0 judged" in first.stdout.split("tick 1 at")[1]
    on_ok = asked(scripted)
    assert set(verdicts(traced_store)) == set(traced_store.ok)

    scripted.reset()
    new = add_traces(traced_store, NEW)
    # An empty judge cache: the new traces ask the questions of old ones, whose replies it holds.
    again = watch(traced_store, scripted, tmp_path, "watch.ticks=1", f"cache.dir={tmp_path / 'empty'}")
    assert "continuing at tick 2" in again.stderr
    assert "tick 2 at" in again.stdout and "2 judged" in again.stdout
    judged = verdicts(traced_store)
    assert set(judged) == set(traced_store.ok) | set(new)
    assert all(names == Counter({"faithfulness": 1}) for names in judged.values())
    # Only the new traces were asked about, as often as one judgment of the same question asks.
    assert set(asked(scripted)) == set(NEW)
    assert all(asked(scripted)[q] == on_ok[q] // 2 or asked(scripted)[q] == on_ok[q] for q in NEW)

    run, history = the_run(traced_store)
    assert run.info.status == "FINISHED"
    assert history["watch/judged"] == [(0, 30.0), (1, 0.0), (2, 2.0)]
    assert [step for step, _ in history["faithfulness/mean"]] == [0, 2]
    run_ids = {
        (a.metadata or {}).get("evalframe.run_id")
        for t in new
        for a in __import__("mlflow").MlflowClient(traced_store.uri).get_trace(t).info.assessments
        if a.name == "faithfulness"
    }
    assert run_ids == {run.info.run_id}


@pytest.mark.slow
def test_a_lost_checkpoint_judges_nothing_twice(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    watch(traced_store, scripted, tmp_path, "watch.ticks=1")
    from mlflow.tracking import MlflowClient

    run, _ = the_run(traced_store)
    MlflowClient(traced_store.uri).set_tag(run.info.run_id, "evalframe.watch.done_ms", "0")  # lost
    scripted.reset()
    again = watch(traced_store, scripted, tmp_path, "watch.ticks=1")
    assert scripted.count() == 0
    assert "0 judged, 30 skipped" in again.stdout
    assert all(names == Counter({"faithfulness": 1}) for names in verdicts(traced_store).values())


def test_settle_holds_back_traces_until_quiet_for_long_enough(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The clock is injected for the settle arithmetic only: the traces' end times are the store's."""
    from evalframe.run import watch as watch_mode

    config = compose([*watcher(traced_store, scripted, "watch.ticks=1"), "watch.settle=1h"])
    now = time.time()
    watch_mode.main(config, tmp_path / "a", clock=lambda: now, sleep=lambda s: None)
    assert (
        scripted.count() == 0 and "0 judged, 0 skipped (judged before), 30 waiting" in capsys.readouterr().out
    )
    watch_mode.main(config, tmp_path / "b", clock=lambda: now + 3601, sleep=lambda s: None)
    assert "30 judged" in capsys.readouterr().out
    assert set(verdicts(traced_store)) == set(traced_store.ok)


@pytest.mark.slow
def test_a_stop_mid_tick_resumes_that_ticks_finished_items(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    fired: list[bool] = []

    def interrupting(request: Any) -> Any:
        # Once, from the 20th answer on: an item's requests may be in flight together, so two of them
        # can both see 19 answered (an answer is counted once sent), and none see exactly 20.
        if scripted.count() >= 20 and not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, in the middle of the tick
        return judge(request)

    scripted.responder = interrupting
    # Ctrl-C as it reaches a process started from a terminal: Python's own handler (a library an earlier
    # test ran in this process, such as Ray's driver, may have left its own).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stopped = watch(traced_store, scripted, tmp_path, "watch.ticks=1", "concurrency=1")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "stopped:" in stopped.stderr and "tick 0" not in stopped.stdout, (fired, previous, stopped.stderr)
    [journal] = tmp_path.glob("outputs/*/*/tick-000000/results.jsonl")
    finished = {traced_store.questions[json.loads(line)["id"]] for line in journal.read_text().splitlines()}
    assert 0 < len(finished) < 30
    scripted.responder = judge
    scripted.reset()
    resumed = watch(traced_store, scripted, tmp_path, "watch.ticks=1", f"cache.dir={tmp_path / 'empty'}")
    assert "tick 0 at" in resumed.stdout and "30 judged" in resumed.stdout
    assert asked(scripted) and not finished & set(asked(scripted))
    assert all(names == Counter({"faithfulness": 1}) for names in verdicts(traced_store).values())


def test_watch_mode_needs_a_trace_dataset(tmp_path: Path) -> None:
    done = run_cli(["watch.every=1m", "tracking=none"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: watch mode judges traces as they arrive: it needs dataset=mlflow_traces, not dataset=sample; "
        "drop watch.every or choose dataset=mlflow_traces"
    ]


def feedbacks_on(store: Seeded, trace_id: str) -> list[Any]:
    """The evalframe feedbacks on one trace (valid or not)."""
    from mlflow.tracking import MlflowClient

    found = MlflowClient(store.uri).get_trace(trace_id).info.assessments
    return [a for a in found if "evalframe.digest" in (a.metadata or {})]


@pytest.mark.slow
def test_a_trace_that_cannot_be_judged_is_left_unscored_and_the_watcher_goes_on(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    """One production trace with an empty question among good ones: it is unscored (an error on the
    trace saying why, counted on the tick's line), every good one judged, and the next start goes on
    without taking it again (it stopped every start with exit 2, its tick resumed and failing again)."""
    [empty, good] = add_traces(traced_store, ["", QUESTIONS[0]])
    first = watch(traced_store, scripted, tmp_path, "watch.ticks=1")
    assert "tick 0 at" in first.stdout and ": 32 judged" in first.stdout, first.stdout
    assert "; 1 unscored (1 trace cannot be judged)" in first.stdout
    assert f"warning: MLflow experiment '{EXPERIMENT}', trace {empty}: the input (root.inputs) is empty" in (
        first.stderr
    )
    [verdict] = feedbacks_on(traced_store, empty)
    assert verdict.name == "faithfulness" and verdict.valid is not False and verdict.feedback.value is None
    assert verdict.feedback.error.error_code == "UNSCORED"
    assert "the input (root.inputs) is empty" in verdict.feedback.error.error_message
    judged = verdicts(traced_store)
    assert set(judged) == {*traced_store.ok, empty, good}

    scripted.reset()
    again = watch(traced_store, scripted, tmp_path, "watch.ticks=1")
    assert "tick 1 at" in again.stdout and ": 0 judged" in again.stdout and "unscored" not in again.stdout
    assert scripted.count() == 0 and len(feedbacks_on(traced_store, empty)) == 1


@pytest.mark.slow
def test_a_trace_stored_after_the_checkpoint_passed_its_end_is_judged_on_the_next_tick(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The watcher's clock an hour ahead of the app's: every trace the app stores from then on ended
    before the watcher's checkpoint, as a late upload's, an exporter's retry's or a client's behind.
    Within watch.lookback, the next tick judges it (ticks took only what ended since the checkpoint)."""
    from evalframe.run import watch as watch_mode

    ahead = time.time() + 3600
    config = compose(watcher(traced_store, scripted, "watch.ticks=1"))
    watch_mode.main(config, tmp_path / "a", clock=lambda: ahead, sleep=lambda s: None)
    assert "30 judged" in capsys.readouterr().out
    late = add_traces(traced_store, NEW)

    scripted.reset()
    narrow = compose(watcher(traced_store, scripted, "watch.ticks=1", "watch.lookback=30m"))
    watch_mode.main(narrow, tmp_path / "b", clock=lambda: ahead + 1, sleep=lambda s: None)
    assert "tick 1 at" in (out := capsys.readouterr().out) and ": 0 judged" in out  # ended an hour "ago"
    assert scripted.count() == 0

    # An empty judge cache: the late traces ask the questions of old ones, whose replies it holds.
    uncached = compose(watcher(traced_store, scripted, "watch.ticks=1", f"cache.dir={tmp_path / 'empty'}"))
    watch_mode.main(uncached, tmp_path / "c", clock=lambda: ahead + 2, sleep=lambda s: None)
    assert "tick 2 at" in (out := capsys.readouterr().out) and ": 2 judged, 0 skipped" in out, out
    assert set(asked(scripted)) == set(NEW)
    judged = verdicts(traced_store)
    assert set(judged) == set(traced_store.ok) | set(late)
    assert all(names == Counter({"faithfulness": 1}) for names in judged.values())

    scripted.reset()
    watch_mode.main(config, tmp_path / "d", clock=lambda: ahead + 3, sleep=lambda s: None)
    assert "tick 3 at" in (out := capsys.readouterr().out) and ": 0 judged, 0 skipped" in out
    assert scripted.count() == 0


def test_without_verdicts_written_back_a_tick_takes_only_what_ended_since_the_checkpoint(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tracking.feedback=false: no verdict says which traces were taken, so none is looked back for (each
    tick would judge the whole lookback again)."""
    from evalframe.run import watch as watch_mode

    config = compose(watcher(traced_store, scripted, "watch.ticks=1", "tracking.feedback=false"))
    for step in range(2):
        watch_mode.main(config, tmp_path / str(step), sleep=lambda s: None)
    out = capsys.readouterr().out
    assert "tick 0 at" in out and "30 judged" in out and "tick 1 at" in out
    assert ": 0 judged" in out.split("tick 1 at")[1] and not verdicts(traced_store)
