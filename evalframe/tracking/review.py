"""MLflow's review queues and label schemas (mlflow.genai, 3.14+) for `evalframe review`: the questions
made from the scorers, the queue of traces people label in the experiment's Review tab, and their
answers read back from the traces (each a HUMAN feedback named after its question).

A queue is made in the evaluation run's experiment (a trace dataset's run is logged where its traces
are), with one label schema per scorer, named after it: a person's answer then sits on the trace
beside the judge's verdict of the same name, and a trace dataset's `feedback:NAME` selector reads it
back as a human score. The run is tagged with the queue, so a pull finds the run whose judges it
compares with the people.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.data.trace_query import quoted
from evalframe.errors import ConfigError
from evalframe.results.review_questions import CATEGORICAL, NUMERIC, PASS_FAIL, Question
from evalframe.tracking.read import LoggedRun, check_store
from evalframe.tracking.store import display_uri, fluent_store, store_uri

QUEUE_TAG = "evalframe.review."  # + the queue's id, on the evaluation run: the queue's name
ITEM_TAG = "evalframe.item_id"  # on a run's own per-item traces (tracking/traces.py)
PAGE = 100  # traces per search, items per listing
WRITES = "review creates label schemas and a review queue there: run it as a user who can write it"


@dataclass(frozen=True)
class Answer:
    """One person's answer on a trace, as MLflow holds it."""

    trace_id: str
    name: str
    value: Any
    reviewer: str
    comment: str | None
    time_ms: int


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=store_uri(uri))


def opened(uri: str) -> None:
    """The store is there, answers and can be written, before anything is read or made."""
    check_store(uri, WRITES)


def run_config(uri: str, run_id: str, directory: Path) -> dict[str, Any]:
    """The run's resolved config (its config.yaml artifact): the scorers' reply forms and thresholds."""
    import yaml

    try:
        local = _client(uri).download_artifacts(run_id, "config.yaml", str(directory))
    except Exception:
        raise ConfigError(
            f"run {run_id} has no config.yaml artifact: it was not logged by evalframe; run it again"
        ) from None
    loaded = yaml.safe_load(Path(local).read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def _traces(uri: str, experiment_id: str, wanted: str, run_id: str | None = None) -> Iterator[Any]:
    """The experiment's traces a filter selects (without their spans), a page at a time."""
    client, token = _client(uri), None
    while True:
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=wanted or None,
            run_id=run_id,
            max_results=PAGE,
            page_token=token,
            include_spans=False,
        )
        yield from page
        token = page.token
        if not token:
            return


def _of(uri: str, experiment_id: str, trace_ids: Sequence[str]) -> Iterator[Any]:
    for start in range(0, len(trace_ids), PAGE):
        wanted = ", ".join(quoted(i, f"trace {i!r}") for i in trace_ids[start : start + PAGE])
        yield from _traces(uri, experiment_id, f"trace.request_id IN ({wanted})")


def item_traces(uri: str, run: LoggedRun, items: Sequence[Any]) -> dict[str, str]:
    """item id -> the id of its trace: the trace it was read from (a trace dataset's items), else the
    trace the run logged for it (tracking.max_traces of them)."""
    found = {item.id: item.trace_id for item in items if item.trace_id}
    if len(found) < len(items):
        for trace in _traces(uri, run.experiment_id, "", run_id=run.run_id):
            item_id = (trace.info.tags or {}).get(ITEM_TAG)
            if item_id is not None:
                found.setdefault(item_id, trace.info.trace_id)
    return found


def answers(uri: str, experiment_id: str, trace_ids: Sequence[str], names: Sequence[str]) -> list[Answer]:
    """Every valid feedback from a person (HUMAN source) named as one of `names` on the traces."""
    from mlflow.entities import Feedback

    found = []
    for trace in _of(uri, experiment_id, list(trace_ids)):
        for a in trace.info.assessments or []:
            human = a.source is not None and a.source.source_type == "HUMAN"
            if isinstance(a, Feedback) and human and a.name in names and a.valid is not False and not a.error:
                found.append(
                    Answer(
                        trace.info.trace_id,
                        a.name,
                        a.value,
                        str(a.source.source_id or ""),
                        a.rationale,
                        int(a.create_time_ms or 0),
                    )
                )
    return found


def _input(q: Question) -> Any:
    from mlflow.genai import label_schemas as ls

    if q.kind == PASS_FAIL:
        return ls.InputPassFail(positive_label=q.options[0], negative_label=q.options[1])
    if q.kind == CATEGORICAL:
        return ls.InputCategorical(options=list(q.options))
    assert q.kind == NUMERIC
    return ls.InputNumeric(min_value=q.low, max_value=q.high)


def _schema(experiment_id: str, q: Question) -> str:
    """The id of the schema asking `q`: the experiment's of that name when it asks the same, else new."""
    from mlflow.exceptions import MlflowException
    from mlflow.genai import label_schemas as ls

    wanted = _input(q)
    try:
        found = ls.get_label_schema(q.scorer, experiment_id=experiment_id)
    except MlflowException as e:
        if e.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        made = ls.create_label_schema(
            q.scorer,
            type="feedback",
            input=wanted,
            instruction=q.instruction(),
            enable_comment=True,
            experiment_id=experiment_id,
        )
        return str(made.schema_id)
    if found.input != wanted or str(found.type) != "feedback":
        raise ConfigError(
            f"the experiment already has a label schema {q.scorer!r} asking {found.input} "
            f"where {q.scorer}'s judge answers {wanted}: delete that schema, or push a run of the same scorer"
        )
    return str(found.schema_id)


def queue(uri: str, experiment_id: str, name: str, questions: Sequence[Question]) -> tuple[str, bool]:
    """(the queue's id, whether it was made now): the experiment's queue `name` asking these
    questions, made when it is new; a ConfigError when it exists and asks others."""
    from mlflow.exceptions import MlflowException
    from mlflow.genai import label_schemas as ls, review_queues as rq

    with fluent_store(uri):
        schema_ids = [_schema(experiment_id, q) for q in questions]
        try:
            found = rq.get_review_queue(name=name, experiment_id=experiment_id)
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            made = rq.create_review_queue(
                name, queue_type="custom", schema_ids=schema_ids, experiment_id=experiment_id
            )
            return made.queue_id, True
        if sorted(found.schema_ids) != sorted(schema_ids):
            asked = sorted(ls.get_label_schema(schema_id=s).name for s in found.schema_ids)
            raise ConfigError(
                f"review queue {name!r} exists with other questions ({', '.join(asked) or 'none'}; these "
                f"scorers ask {', '.join(q.scorer for q in questions)}): choose another queue= name"
            )
        return found.queue_id, False


def queued(uri: str, queue_id: str) -> dict[str, str]:
    """trace id -> its status (pending, complete, declined), every item of the queue."""
    from mlflow.genai import review_queues as rq

    found: dict[str, str] = {}
    token = None
    with fluent_store(uri):
        while True:
            page = rq.list_review_queue_items(queue_id, max_results=PAGE, page_token=token)
            found.update({item.item_id: str(item.status) for item in page})
            token = page.token
            if not token:
                return found


def add(uri: str, queue_id: str, trace_ids: Sequence[str]) -> None:
    from mlflow.genai import review_queues as rq

    with fluent_store(uri):
        for start in range(0, len(trace_ids), PAGE):
            rq.add_items_to_review_queue(queue_id, item_ids=list(trace_ids[start : start + PAGE]))


def judged_traces(uri: str, experiment: str) -> str:
    """The newest evalframe run that judged experiment `experiment`'s traces (a trace dataset's run is
    logged beside them, tagged with the dataset's name, which is the experiment's)."""
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    runs = (
        client.search_runs(
            [found.experiment_id],
            filter_string=f"tags.`evalframe.dataset` = {quoted(experiment, 'dataset.experiment')}",
            order_by=["attribute.start_time DESC"],
            max_results=1,
        )
        if found is not None
        else []
    )
    if not runs:
        raise ConfigError(
            f"no evalframe run has judged the traces of experiment {experiment!r} at {display_uri(uri)}: "
            f"judge them first (evalframe dataset=mlflow_traces dataset.experiment={experiment} scorer=...)"
        )
    return str(runs[0].info.run_id)


def tag_run(uri: str, run_id: str, queue_id: str, name: str) -> None:
    _client(uri).set_tag(run_id, QUEUE_TAG + queue_id, name)


def find_queue(uri: str, name: str) -> tuple[str, str]:
    """(experiment id, queue id) of the queue `name`; a ConfigError when none or several have it."""
    from mlflow.exceptions import MlflowException
    from mlflow.genai import review_queues as rq

    found = []
    with fluent_store(uri):
        for experiment in _client(uri).search_experiments():
            try:
                made = rq.get_review_queue(name=name, experiment_id=experiment.experiment_id)
            except MlflowException:
                continue
            found.append((experiment.experiment_id, made.queue_id))
    if not found:
        raise ConfigError(
            f"no review queue {name!r} in the MLflow store at {display_uri(uri)}: "
            "push items first (evalframe review push run_id=ID queue=NAME size=N)"
        )
    if len(found) > 1:
        raise ConfigError(f"review queue {name!r} is in several experiments: give the run as run_id=ID")
    return found[0]


def queue_in(uri: str, experiment_id: str, name: str) -> str:
    """The id of experiment `experiment_id`'s queue `name`, or a ConfigError."""
    from mlflow.exceptions import MlflowException
    from mlflow.genai import review_queues as rq

    with fluent_store(uri):
        try:
            return str(rq.get_review_queue(name=name, experiment_id=experiment_id).queue_id)
        except MlflowException:
            raise ConfigError(f"no review queue {name!r} in the run's experiment: push items first") from None


def pushed_from(uri: str, experiment_id: str, queue_id: str) -> str:
    """The newest run whose items were pushed to the queue."""
    runs = _client(uri).search_runs(
        [experiment_id],
        filter_string=f"tags.`{QUEUE_TAG}{queue_id}` != ''",
        order_by=["attribute.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise ConfigError(
            "no evaluation run was pushed to this queue by evalframe: give the run as run_id=ID"
        )
    return str(runs[0].info.run_id)


def log_figures(uri: str, run_id: str, metrics: dict[str, float]) -> None:
    """The figures as the run's metrics (NaN left out: MLflow would chart it as a value)."""
    import math
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, v, now, 0) for k, v in metrics.items() if not math.isnan(v)]
    _client(uri).log_batch(run_id, metrics=batch)
