"""`evalframe review push|pull` on a real MLflow store (SQLite, in process): a run judged by a panel of
two scripted judges is pushed to a review queue, a scripted reviewer answers through MLflow's own API
as the Review tab does (a HUMAN feedback named after the question, then the item marked complete), and
the answers come back as labels.jsonl and agreement figures logged to the run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from evalframe.tracking.store import fluent_store
from tests.conftest import run_cli
from tests.fake_judge import fenced
from tests.scorers.test_panel import panel_args
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest

# Each test evaluates a 60-item run with a panel of two judges (3 to 5 s): not in `make check`.
pytestmark = pytest.mark.slow

ITEMS = 60
SCORE = {"same": 1.0, "subset": 0.4, "superset": 0.6, "disagree": 0.0, "immaterial": 1.0}


def verdicts(number: int) -> tuple[str, str]:
    """Judges a and b on item `number`: every third item they disagree outright (1.0 against 0.0), the
    next they nearly agree (1.0 against 0.6), the third they agree."""
    return [("same", "disagree"), ("same", "superset"), ("same", "same")][number % 3]


def two_judges(request: FakeRequest) -> dict[str, Any]:
    number = int(fenced(request)["SUBMISSION"].split()[-1])
    a, b = verdicts(number)
    choice = b if request.model == "judge-b" else a
    return {"reason": f"the answers are {choice}", "choice": choice}


def _evaluated(scripted: ScriptedModel, folder: Path, uri: str | None = None, *more: str) -> tuple[str, str]:
    """(the store's URI, the run id) of a panel's run over ITEMS rows, logged to `uri` (a tracking
    server), else to folder/mlflow.db."""
    from mlflow.tracking import MlflowClient

    scripted.responder = two_judges
    data = folder / "qa.jsonl"
    rows = [
        {"id": f"q{i:02d}", "input": "Question?", "ground_truth": "Paris.", "output": f"answer {i}"}
        for i in range(ITEMS)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["scorer=factuality", *panel_args(), "dataset=jsonl", f"dataset.path={data}", *more]
    done = run_cli([*args, f"tracking.uri={uri}"] if uri else args, folder)
    assert done.returncode == 0, done.stderr
    uri = uri or f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    [run] = client.search_runs([experiment.experiment_id])
    return uri, run.info.run_id


def _queue(uri: str, name: str) -> tuple[str, dict[str, str]]:
    """(queue id, trace id -> item id) of the queue's items, read back through MLflow."""
    import mlflow
    from mlflow.genai import review_queues as rq

    with fluent_store(uri):  # MLflow's fluent API on this store, the process's own put back after
        experiment = mlflow.get_experiment_by_name("evalframe")
        assert experiment is not None
        queue = rq.get_review_queue(name=name, experiment_id=experiment.experiment_id)
        items = rq.list_review_queue_items(queue.queue_id, max_results=1000)
        found = mlflow.search_traces(
            locations=[experiment.experiment_id], return_type="list", include_spans=False
        )
    traces = {t.info.trace_id: t.info.tags["evalframe.item_id"] for t in found}
    return queue.queue_id, {i.item_id: traces[i.item_id] for i in items}


def _answer(
    uri: str, queue_id: str, traces: dict[str, str], reviewer: str, choose: Any, only: int | None = None
) -> None:
    """A reviewer answers each queued trace as the Review tab does and marks it complete."""
    import mlflow
    from mlflow.entities import AssessmentSource
    from mlflow.genai import review_queues as rq

    with fluent_store(uri):
        for trace_id, item in sorted(traces.items(), key=lambda t: t[1])[:only]:
            source = AssessmentSource(source_type="HUMAN", source_id=reviewer)
            mlflow.log_feedback(
                trace_id=trace_id,
                name="factuality",
                value=choose(item),
                rationale=f"{reviewer} on {item}",
                source=source,
            )
            rq.set_review_queue_item_status(
                queue_id, item_id=trace_id, status="complete", completed_by=reviewer
            )


def _metrics(uri: str, run_id: str) -> dict[str, float]:
    from mlflow.tracking import MlflowClient

    return dict(MlflowClient(uri).get_run(run_id).data.metrics)


def test_push_the_most_disputed_then_pull_the_labels_and_agreement(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    uri, run_id = _evaluated(scripted, tmp_path)
    push = ["review", "push", f"run_id={run_id}", "queue=q", "size=20", "select=disagreement"]
    done = run_cli(push, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "20 items added, 0 of this run already there" in done.stdout
    queue_id, traces = _queue(uri, "q")
    assert sorted(traces.values()) == [f"q{i:02d}" for i in range(0, ITEMS, 3)]  # the 20 the judges split on

    # The question is the judge's own: factuality's five choices.
    from mlflow.genai import label_schemas as ls, review_queues as rq

    with fluent_store(uri):
        [schema_id] = rq.get_review_queue(queue_id).schema_ids
        schema = ls.get_label_schema(schema_id=schema_id)
    assert (
        schema.name == "factuality"
        and sorted(schema.input.options) == sorted(SCORE)  # type: ignore[union-attr]
        and schema.enable_comment
    )

    again = run_cli(push, tmp_path)  # idempotent: nothing added twice
    assert again.returncode == 0, again.stderr
    assert "0 items added, 20 of this run already there" in again.stdout
    assert len(_queue(uri, "q")[1]) == 20

    # alice agrees with judge a on half the items and with judge b on the other half
    alice = {item: verdicts(int(item[1:]))[int(item[1:]) % 2] for item in traces.values()}
    _answer(uri, queue_id, traces, "alice", alice.__getitem__)
    pulled = run_cli(["review", "pull", "queue=q", "output=labels.jsonl"], tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    labels = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert len(labels) == 20
    assert {(x["item_id"], x["label"], x["value"], x["reviewer"]) for x in labels} == {
        (item, choice, SCORE[choice], "alice") for item, choice in alice.items()
    }
    assert all(x["scorer"] == "factuality" and x["comment"] == f"alice on {x['item_id']}" for x in labels)
    assert "the judges against the people" in pulled.stdout
    metrics = _metrics(uri, run_id)
    assert metrics["review/factuality/n"] == 20 and metrics["review/factuality/labels"] == 20
    # the panel's score is 0.5 on each: at the 0.5 line it passes, as alice's "same" does on half
    assert metrics["review/factuality/accuracy"] == pytest.approx(0.5)
    assert (
        metrics["review/factuality/accuracy_ci_low"] <= 0.5 <= metrics["review/factuality/accuracy_ci_high"]
    )
    assert "review/factuality/reviewers_alpha" not in metrics  # one reviewer: nothing to agree on

    # bob labels 10 of them, agreeing with alice on all but two: the reviewers' alpha, with its interval
    bob = {
        item: choice if i >= 2 else ("disagree" if choice == "same" else "same")
        for i, (item, choice) in enumerate(sorted(alice.items()))
    }
    _answer(uri, queue_id, traces, "bob", bob.__getitem__, only=10)
    pulled = run_cli(["review", "pull", "queue=q"], tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert len((tmp_path / "labels.jsonl").read_text().splitlines()) == 30
    assert "the reviewers among themselves" in pulled.stdout
    metrics = _metrics(uri, run_id)
    assert metrics["review/factuality/reviewers_n"] == 10
    from evalframe.results.agreement import krippendorff_alpha

    ten = sorted(alice)[:10]
    expected = krippendorff_alpha([[SCORE[alice[i]] for i in ten], [SCORE[bob[i]] for i in ten]])
    assert metrics["review/factuality/reviewers_alpha"] == pytest.approx(expected)
    assert 0 < expected < 1
    low, high = (
        metrics["review/factuality/reviewers_alpha_ci_low"],
        metrics["review/factuality/reviewers_alpha_ci_high"],
    )
    assert low <= expected <= high and not math.isnan(low)

    # Labelled now, the same 20 are still the run's share of the queue: pushing again adds none.
    assert "0 items added, 20 of this run already there" in run_cli(push, tmp_path).stdout
    assert len(_queue(uri, "q")[1]) == 20


def test_threshold_takes_the_unlabelled_nearest_the_line(scripted: ScriptedModel, tmp_path: Path) -> None:
    uri, run_id = _evaluated(scripted, tmp_path)
    assert run_cli(["review", "push", f"run_id={run_id}", "queue=q", "size=20"], tmp_path).returncode == 0
    queue_id, traces = _queue(uri, "q")
    _answer(uri, queue_id, traces, "alice", lambda item: "same")
    # The 20 at 0.5 are labelled now: the next nearest the 0.5 line are the items at 0.8, smallest ids first.
    # The run named as compare and rescore take it (before: `last` was read as an id, and not found).
    done = run_cli(["review", "push", "run_id=last", "queue=t", "size=5", "select=threshold"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(_queue(uri, "t")[1].values()) == ["q01", "q04", "q07", "q10", "q13"]


BAD_PUSHES = [
    (["size=61"], "size=61: run "),
    (["size=0"], "size=0: give a whole number above 0"),
    (["size=5", "select=worst"], "select=worst: choose one of disagreement, threshold, random"),
]


def test_bad_pushes_are_one_line_and_exit_2(scripted: ScriptedModel, tmp_path: Path) -> None:
    _, run_id = _evaluated(scripted, tmp_path)  # one run for every case: a refused push changes nothing
    for args, message in BAD_PUSHES:
        done = run_cli(["review", "push", f"run_id={run_id}", "queue=q", *args], tmp_path)
        assert done.returncode == 2, args
        assert done.stderr.startswith(f"error: {message}") and "Traceback" not in done.stderr


def test_bad_answers_and_a_queue_asking_other_questions_are_one_line_and_exit_2(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    from mlflow.genai import review_queues as rq

    uri, run_id = _evaluated(scripted, tmp_path)
    assert run_cli(["review", "push", f"run_id={run_id}", "queue=q", "size=2"], tmp_path).returncode == 0
    queue_id, traces = _queue(uri, "q")
    _answer(uri, queue_id, traces, "alice", lambda item: "maybe")  # no choice of factuality's
    done = run_cli(["review", "pull", "queue=q"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert re.match(
        r"error: reviewer alice on item q0[03]: 'maybe' is outside factuality's scale \(", done.stderr
    )
    assert not (tmp_path / "labels.jsonl").exists()  # nothing written

    _answer(uri, queue_id, traces, "bob", lambda item: "same")
    _answer(uri, queue_id, traces, "bob", lambda item: "subset", only=1)  # bob again on q00
    with fluent_store(uri):  # alice's stray answers withdrawn, as deleting them in the UI would
        import mlflow

        for trace_id in traces:
            for a in mlflow.get_trace(trace_id).info.assessments:
                if a.source.source_id == "alice":
                    mlflow.delete_assessment(trace_id=trace_id, assessment_id=a.assessment_id)
    done = run_cli(["review", "pull", "queue=q"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: reviewer bob answered factuality twice on item q00 (trace ")
    assert not (tmp_path / "labels.jsonl").exists()

    with fluent_store(uri):
        experiment = rq.get_review_queue(queue_id).experiment_id
        rq.create_review_queue("other", queue_type="custom", schema_ids=[], experiment_id=experiment)
    done = run_cli(["review", "push", f"run_id={run_id}", "queue=other", "size=2"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(
        "error: review queue 'other' exists with other questions (none; these scorers ask factuality)"
    )


def test_a_trace_datasets_items_are_queued_as_their_own_traces(traced_store: Any, tmp_path: Path) -> None:
    """A run of dataset=mlflow_traces logs no traces of its own: its items are the app's traces, and
    those are what people label (their answers sit beside the app's requests)."""
    from mlflow.tracking import MlflowClient

    run = ["dataset=mlflow_traces", f"dataset.experiment={traced_store.experiment}", "scorer=exact_match"]
    done = run_cli([*run, f"tracking.uri={traced_store.uri}", "dataset.limit=6"], tmp_path)
    assert done.returncode in (0, 1), done.stderr
    client = MlflowClient(traced_store.uri)
    [logged] = client.search_runs([traced_store.experiment_id])
    push = ["review", "push", f"run_id={logged.info.run_id}", "queue=app", "size=3", "select=random"]
    done = run_cli([*push, f"tracking.uri={traced_store.uri}"], tmp_path)
    assert done.returncode == 0, done.stderr
    # Named by its dataset instead, the newest run that judged the experiment's traces: the same items.
    by_dataset = ["dataset=mlflow_traces", f"dataset.experiment={traced_store.experiment}"]
    again = run_cli(
        ["review", "push", *by_dataset, "queue=app", "size=3", f"tracking.uri={traced_store.uri}"], tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert "0 items added, 3 of this run already there" in again.stdout
    none = ["review", "push", "dataset=mlflow_traces", "dataset.experiment=nobody", "queue=app", "size=3"]
    done = run_cli([*none, f"tracking.uri={traced_store.uri}"], tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: no evalframe run has judged the traces of")
    from mlflow.genai import review_queues as rq

    with fluent_store(traced_store.uri):
        queue = rq.get_review_queue(name="app", experiment_id=traced_store.experiment_id)
        queued = [i.item_id for i in rq.list_review_queue_items(queue.queue_id)]
    assert len(queued) == 3 and set(queued) <= set(traced_store.ids)


def test_a_file_round_trip_without_the_review_tab(scripted: ScriptedModel, tmp_path: Path) -> None:
    uri, run_id = _evaluated(scripted, tmp_path)
    push = ["review", "push", f"run_id={run_id}", "format=jsonl", "size=4"]
    done = run_cli(push, tmp_path)
    assert done.returncode == 0, done.stderr
    sheet = tmp_path / "review.jsonl"
    lines = [json.loads(line) for line in sheet.read_text().splitlines()]
    assert [x["item_id"] for x in lines] == ["q00", "q03", "q06", "q09"]  # the four the judges split on most
    assert all(x["label"] is None and x["reviewer"] is None and x["comment"] is None for x in lines)
    assert lines[0]["question"]["kind"] == "categorical" and "same" in lines[0]["question"]["options"]
    assert run_cli(push, tmp_path).stdout.count("0 items added, 4 of this run already there") == 1

    for (
        line
    ) in lines:  # a person fills in the file: "same" on every item, one of them twice (another reviewer)
        line.update(label="same", reviewer="carol", comment="checked")
    lines.append({**lines[0], "reviewer": "dan", "label": "disagree"})
    sheet.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = run_cli(["review", "pull", f"labels={sheet}"], tmp_path)
    assert done.returncode == 0, done.stderr
    labels = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert sorted((x["item_id"], x["reviewer"], x["value"]) for x in labels) == [
        ("q00", "carol", 1.0),
        ("q00", "dan", 0.0),
        ("q03", "carol", 1.0),
        ("q06", "carol", 1.0),
        ("q09", "carol", 1.0),
    ]
    metrics = _metrics(uri, run_id)
    assert metrics["review/factuality/n"] == 4 and metrics["review/factuality/reviewers_n"] == 1

    lines[1]["label"] = "maybe"
    sheet.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = run_cli(["review", "pull", f"labels={sheet}"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {sheet}: line 2 (item q03): 'maybe' is outside factuality's scale")


def test_a_run_without_traces_is_one_line_and_exit_2_and_a_file_still_works(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    _, run_id = _evaluated(scripted, tmp_path, None, "tracking.traces=false")
    done = run_cli(["review", "push", f"run_id={run_id}", "queue=q", "size=2"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: run {run_id} has no traces of its items to label")
    done = run_cli(["review", "push", f"run_id={run_id}", "format=jsonl", "size=2"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert [json.loads(x)["trace_id"] for x in (tmp_path / "review.jsonl").read_text().splitlines()] == [
        None,
        None,
    ]


def test_peoples_choices_on_traces_are_a_trace_datasets_human_score(
    scripted: ScriptedModel, traced_store: Any, tmp_path: Path
) -> None:
    """Reviewers answer a choosing judge's question with its choices (`same`, `disagree`): read back as
    dataset.human_score=factuality, each is the number the judge's own choice scores. Before: 'same'
    is not a finite number, exit 2, so a trace dataset could use only numeric questions' labels."""
    import mlflow
    from mlflow.entities import AssessmentSource

    answers = dict(zip(traced_store.ids[:4], ["same", "disagree", "superset", "subset"], strict=True))
    with fluent_store(traced_store.uri):
        for trace_id, choice in answers.items():
            source = AssessmentSource(source_type="HUMAN", source_id="alice")
            mlflow.log_feedback(trace_id=trace_id, name="factuality", value=choice, source=source)
    scripted.responder = lambda request: {"reason": "the answers are the same", "choice": "same"}
    run = ["dataset=mlflow_traces", f"dataset.experiment={traced_store.experiment}", "scorer=factuality"]
    judge = ["model.name=scripted/judge", "model.api_key_env=null", "dataset.human_score=factuality"]
    done = run_cli([*run, *judge, f"tracking.uri={traced_store.uri}", "tracking.feedback=false"], tmp_path)
    assert done.returncode in (0, 1), done.stderr
    [results] = tmp_path.glob("outputs/*/*/results.jsonl")
    human = {item["id"]: item["human"] for item in map(json.loads, results.read_text().splitlines())}
    assert {i: human[i] for i in answers} == {i: SCORE[c] for i, c in answers.items()}
    assert all(human[i] is None for i in human if i not in answers)  # unlabelled traces: no human score
