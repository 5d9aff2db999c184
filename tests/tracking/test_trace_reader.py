"""dataset=mlflow_traces on a real store: the traces of a traced RAG app (tests/traced_app.py) read back
as rows, filtered in the store (status, tags, filter, since, until), sampled, capped, paged, read twice
alike, and judged end to end through the command line against the scripted judge."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from evalframe.data.rows import ToolCall
from evalframe.errors import ConfigError, TrackingError
from evalframe.run import sources
from evalframe.tracking import trace_reader
from evalframe.tracking.trace_records import record
from tests import traced_app
from tests.conftest import compose, fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.traced_app import EXPERIMENT, Seeded


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def test_each_ok_trace_is_a_row_oldest_first_with_its_fields_from_the_spans(traced_store: Seeded) -> None:
    rows = traced_store.rows()
    assert [r.id for r in rows] == traced_store.ok  # status OK by default: the 6 ERROR traces are left out
    for n, row in enumerate(rows):
        documents = traced_store.documents[row.id]
        assert row.trace_id == row.id and row.input == traced_store.questions[row.id]
        assert row.output == documents[0].page_content  # the app answers from its best document
        assert row.contexts == [d.page_content for d in documents]  # in rank order
        assert row.context_ids == [d.metadata["doc_uri"] for d in documents]
        [retriever] = [s for s in row.extra["spans"] if s["span_type"] == "RETRIEVER"]
        assert row.retriever_span_id == retriever["span_id"]
        calls = traced_store.tool_calls[row.id]
        assert row.tool_calls == [ToolCall(c["name"], c["arguments"]) for c in calls]
        if n < 20:  # the first 20 OK traces carry a reviewer's expectations
            assert row.ground_truth == documents[0].page_content
            assert row.expected_tool_calls == row.tool_calls
        else:
            assert row.ground_truth is None and row.expected_tool_calls is None
    assert sum(1 for r in rows if r.tool_calls) == 9


def test_the_record_is_the_shared_shape(traced_store: Seeded) -> None:
    import mlflow
    from mlflow.entities import AssessmentError

    client = mlflow.MlflowClient(traced_store.uri)
    failed = AssessmentError(error_code="UNSCORED", error_message="the judge did not answer")
    with traced_app.logging_to(traced_store.uri):
        mlflow.log_feedback(
            trace_id=traced_store.ok[0], name="faithfulness", error=failed, metadata={"k": "v"}
        )
    made = record(client.get_trace(traced_store.ok[0]))
    assert set(made) == {
        "trace_id", "state", "request_time", "tags", "metadata", "session_id", "spans", "assessments"
    }  # fmt: skip
    assert (made["trace_id"], made["state"], made["session_id"]) == (traced_store.ok[0], "OK", "session-0")
    assert made["tags"]["env"] == "prod" and isinstance(made["request_time"], int)
    assert [s["name"] for s in made["spans"]] == ["answer", "retrieve"]  # in start order
    root, retriever = made["spans"]
    assert root["parent_id"] is None and retriever["parent_id"] == root["span_id"]
    assert (
        retriever["outputs"][0]["metadata"]["doc_uri"]
        == traced_store.documents[made["trace_id"]][0].metadata["doc_uri"]
    )
    assert "mlflow.spanOutputs" not in retriever["attributes"]  # the outputs once, not twice
    assert set(root) == {
        "span_id",
        "parent_id",
        "name",
        "span_type",
        "start_ns",
        "end_ns",
        "inputs",
        "outputs",
        "attributes",
    }
    kinds = [(a["name"], a["kind"], a["source_type"], a["valid"]) for a in made["assessments"]]
    assert kinds == [
        ("expected_response", "expectation", "HUMAN", True),
        ("expected_tool_calls", "expectation", "HUMAN", True),
        ("helpfulness", "feedback", "HUMAN", True),
        ("helpfulness", "feedback", "LLM_JUDGE", True),
        ("faithfulness", "feedback", "CODE", True),
    ]
    unscored = made["assessments"][4]
    assert unscored["value"] is None and unscored["metadata"] == {"k": "v"}
    assert unscored["error"] == {"error_code": "UNSCORED", "error_message": "the judge did not answer"}
    feedback = made["assessments"][3]
    assert (
        feedback["value"] == 0.123 and feedback["source_id"] == "openai:/gpt-4o" and feedback["error"] is None
    )
    assert set(feedback) == {
        "assessment_id", "name", "kind", "value", "valid", "source_type", "source_id", "rationale",
        "metadata", "span_id", "error",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["dataset.status=null"], lambda s: s.ids),
        (["dataset.status=ERROR"], lambda s: s.error),
        (["dataset.tags={env: prod}"], lambda s: [i for i in s.ok if i in s.tags["env"]["prod"]]),
        (
            ["dataset.tags={env: prod, team: billing}"],
            lambda s: [i for i in s.ok if i in s.tags["env"]["prod"] and i in s.tags["team"]["billing"]],
        ),
        (["+dataset.tags.team=billing", "dataset.status=null"], lambda s: s.tags["team"]["billing"]),
        (
            ["dataset.filter='metadata.`mlflow.trace.session` = \"session-1\"'", "dataset.status=null"],
            lambda s: s.ids[3:6],
        ),
        (["dataset.filter='feedback.helpfulness IS NOT NULL'"], lambda s: s.rated),
        (["dataset.limit=5"], lambda s: s.ok[:5]),
        (["dataset.since=24h"], lambda s: s.ok),  # seeded moments ago
        (["dataset.since=30d", "dataset.until=24h"], lambda s: []),
    ],
)
def test_the_store_filters_and_the_reader_caps(
    traced_store: Seeded, overrides: list[str], expected: Any
) -> None:
    assert [r.id for r in traced_store.rows(*overrides)] == expected(traced_store)


def test_a_tag_value_ending_in_a_backslash_beside_another_tag_is_searched_for(traced_store: Seeded) -> None:
    """MLflow's filter language has no escapes and reads a trailing backslash as escaping the closing
    quote: such a value (or one holding both quote marks) is matched by a pattern, then exactly."""
    import mlflow

    client = mlflow.MlflowClient(traced_store.uri)
    prod = [i for i in traced_store.ok if i in traced_store.tags["env"]["prod"]]
    values = {prod[0]: "C:\\data\\", prod[1]: "C:\\data_", prod[2]: 'said "it\'s"', prod[3]: 'said "it_s"'}
    for trace_id, value in values.items():  # the second of each pair: what the pattern also finds
        client.set_trace_tag(trace_id, "folder", value)
    cfg = compose(["dataset=mlflow_traces", f"dataset.experiment={EXPERIMENT}"])["dataset"]
    for trace_id in (prod[0], prod[2]):
        for tags in (
            {"folder": values[trace_id], "env": "prod"},
            {"env": "prod", "folder": values[trace_id]},
        ):
            read = sources.rows({**cfg, "tags": tags}, {"uri": traced_store.uri})
            assert [r.id for r in read] == [trace_id], tags


def test_a_time_ago_out_of_range_is_said_in_one_line(traced_store: Seeded) -> None:
    cfg = compose(["dataset=mlflow_traces", f"dataset.experiment={EXPERIMENT}"])["dataset"]
    with pytest.raises(ConfigError, match=r"^dataset.since='100000000000000000000000w' is out of range: "):
        list(iter(sources.rows({**cfg, "since": "100000000000000000000000w"}, {"uri": traced_store.uri})))


def test_since_and_until_cut_at_a_traces_time(traced_store: Seeded) -> None:
    import mlflow

    tenth = mlflow.MlflowClient(traced_store.uri).get_trace(traced_store.ids[10]).info.request_time
    assert [r.id for r in traced_store.rows("dataset.status=null", f"dataset.until={iso(tenth)}")] == (
        traced_store.ids[:10]
    )
    assert [r.id for r in traced_store.rows("dataset.status=null", f"dataset.since={iso(tenth)}")] == (
        traced_store.ids[10:]
    )


def test_the_reader_pages_and_every_page_gives_the_same_rows(
    traced_store: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    asked: list[int] = []
    search = MlflowClient.search_traces

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        page = search(self, *args, **kwargs)
        asked.append(len(page))
        return page

    monkeypatch.setattr(MlflowClient, "search_traces", counted)
    paged = traced_store.rows("dataset.page_size=4")
    assert asked == [4] * 7 + [2]  # 30 traces, four at a time: never more than a page in hand
    assert [r.id for r in paged] == traced_store.ok == [r.id for r in traced_store.rows()]
    asked.clear()
    traced_store.rows("dataset.page_size=4", "dataset.limit=6")
    assert asked == [4, 4]  # a limit stops asking once it is reached


@pytest.mark.slow
def test_a_second_read_gives_the_same_traces_while_the_app_goes_on(traced_store: Seeded) -> None:
    import mlflow

    cfg = compose(["dataset=mlflow_traces", f"dataset.experiment={EXPERIMENT}"])["dataset"]
    rows = sources.rows(cfg, {"uri": traced_store.uri})
    first = [r.id for r in rows]
    with traced_app.logging_to(traced_store.uri, EXPERIMENT):
        traced_app.answer(traced_app.QUESTIONS[0])  # a new trace, after the first read
        mlflow.flush_trace_async_logging()
    assert [r.id for r in rows] == first == traced_store.ok  # the window was pinned when the rows were made
    assert len(traced_store.rows()) == len(first) + 1  # a new read sees it


@pytest.mark.slow
def test_samples_nest_and_a_salt_keeps_its_sample(traced_store: Seeded) -> None:
    quarter = [
        r.id
        for r in traced_store.rows("dataset.status=null", "dataset.sample.rate=0.25", "dataset.sample.salt=a")
    ]
    half = [
        r.id
        for r in traced_store.rows("dataset.status=null", "dataset.sample.rate=0.5", "dataset.sample.salt=a")
    ]
    assert set(quarter) < set(half) < set(traced_store.ids) and quarter
    again = [
        r.id
        for r in traced_store.rows("dataset.status=null", "dataset.sample.rate=0.25", "dataset.sample.salt=a")
    ]
    assert again == quarter
    other = [
        r.id
        for r in traced_store.rows("dataset.status=null", "dataset.sample.rate=0.25", "dataset.sample.salt=b")
    ]
    assert other != quarter


def test_an_experiment_by_id_and_a_human_score_from_a_persons_feedback(traced_store: Seeded) -> None:
    rows = traced_store.rows(
        f"dataset.experiment={traced_store.experiment_id}", "dataset.human_score=helpfulness"
    )
    assert [r.id for r in rows] == traced_store.ok
    # n/9 for the n-th rated trace: a judge's feedback of the same name on the first is not a person's
    assert [r.human for r in rows[:10]] == pytest.approx([n / 9 for n in range(10)])
    assert all(r.human is None for r in rows[10:])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"dataset.experiment is not set: name the experiment whose traces to read \(its name or id\). "
             r"The MLflow store at sqlite:///\S+ has '(Default|rag-app)', '(Default|rag-app)'"),
        (["dataset.experiment=rag-ap"], r"dataset.experiment='rag-ap' is not there: .* has '"),
        (["dataset.experiment=999"], r"dataset.experiment='999' is not there"),
        (["dataset.experiment=rag-app", "dataset.filter='tags.env === 1'"],
         r"refused the trace search .*check dataset.filter"),
        (["dataset.experiment=rag-app", "dataset.since=yesterday"],
         r"dataset.since='yesterday' is not a time"),
    ],
)  # fmt: skip
def test_a_missing_or_unknown_experiment_or_a_bad_filter_says_what_to_fix(
    traced_store: Seeded, overrides: list[str], message: str
) -> None:
    cfg = compose(["dataset=mlflow_traces", *overrides])["dataset"]
    with pytest.raises(ConfigError, match=message):
        list(iter(sources.rows(cfg, {"uri": traced_store.uri})))


def test_no_store_there_is_an_error_and_none_is_made(tmp_path: Path) -> None:
    cfg = compose(["dataset=mlflow_traces", "dataset.experiment=app"])["dataset"]
    with pytest.raises(ConfigError, match=r"no MLflow database at .*missing.db; set dataset.tracking_uri"):
        sources.rows(cfg, {"uri": f"sqlite:///{tmp_path / 'missing.db'}"})
    assert not (tmp_path / "missing.db").exists()
    # A server that does not answer: said at once, its credentials never.
    server = {"tracking_uri": "http://reader:s3cr3t-pass@127.0.0.1:9"}
    with pytest.raises(
        TrackingError, match=r"cannot reach the tracking server at http://\*\*\*@127.0.0.1:9"
    ) as e:
        sources.rows(cfg | server, {})
    assert "s3cr3t" not in str(e.value)


def test_the_runs_own_store_is_the_default_and_dataset_tracking_uri_another(
    traced_store: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert trace_reader.run_store({"uri": "sqlite:///x.db"}) == "sqlite:///x.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", traced_store.uri)
    assert trace_reader.run_store({"uri": None}) == traced_store.uri  # tracking=none: where it would log
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    assert trace_reader.run_store({}) == "sqlite:///mlflow.db"
    cfg = compose(
        [
            "dataset=mlflow_traces",
            f"dataset.experiment={EXPERIMENT}",
            f"dataset.tracking_uri={traced_store.uri}",
        ]
    )
    rows = sources.rows(cfg["dataset"], {"uri": f"sqlite:///{tmp_path / 'elsewhere.db'}"})
    assert [r.id for r in rows] == traced_store.ok


def test_a_trace_lacking_what_a_scorer_needs_is_not_applicable_and_said_before_any_call(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    # answer_similarity needs a ground truth: only the first 20 OK traces have one. Production traces
    # carry expectations on some traces only: the others are not applicable, not a refused run.
    done = run_cli([*traced_store.overrides(), "scorer=answer_similarity", *fake_model(scripted)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "not applicable: answer_similarity on 10 trace(s) without ground_truth "
        "(read from expectation:expected_response)"
    ) in done.stdout + done.stderr
    assert "answer_similarity: 10 not applicable" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_run_on_traces_is_rescored_from_its_stored_replies(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    import mlflow

    first = run_cli(
        [
            *traced_store.overrides(),
            "scorer=[faithfulness,tool_call_accuracy]",
            "dataset.limit=6",
            *fake_model(scripted),
        ],
        tmp_path,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    client = mlflow.MlflowClient(traced_store.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)  # a trace dataset logs its run beside its traces
    assert experiment is not None
    [run] = client.search_runs([experiment.experiment_id])
    asked = scripted.count()
    # The rows come back from each item's stored trace record, through the same selectors.
    again = run_cli(
        [
            "rescore",
            f"run_id={run.info.run_id}",
            f"tracking.uri={traced_store.uri}",
            "scorers.faithfulness.empty=0",
        ],
        tmp_path,
        env={"EVALFRAME_CACHE_DIR": str(tmp_path / "empty-cache")},
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert scripted.count() == asked and "0 model calls" in again.stdout


def test_a_run_on_traces_is_a_dataset_again_with_its_contexts_and_trace_ids(
    traced_store: Seeded, scripted: ScriptedModel, tmp_path: Path
) -> None:
    from evalframe.run import earlier

    first = run_cli([*traced_store.overrides(), "scorer=tool_call_accuracy", "dataset.limit=5"], tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    [run_dir] = tmp_path.glob("outputs/*/*")
    rows = list(iter(earlier.rows({"path": str(run_dir)})))
    assert [r.id for r in rows] == [r.trace_id for r in rows] == traced_store.ok[:5]
    for row in rows:  # read back from each item's trace record through the run's selectors
        assert row.contexts == [d.page_content for d in traced_store.documents[row.id]]
        [retriever] = [s for s in row.extra["spans"] if s["span_type"] == "RETRIEVER"]
        assert row.retriever_span_id == retriever["span_id"]
