"""MLflow logging: the only module that imports mlflow.

One run per invocation, logged in a handful of batched calls (params, metrics, one table, a few
artifacts) rather than one call per item: 1,000 single log_metric calls take seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.errors import EXIT_OK, EXIT_TRACKING, ConfigError
from evalframe.models.cache import alive
from evalframe.models.calls import cut
from evalframe.redaction import REDACTED, redact, redact_overrides, scrub_text
from evalframe.report import console as report, html as html_report
from evalframe.results import summary
from evalframe.results.comparison import Comparison
from evalframe.results.jobs import Best
from evalframe.results.nouns import RAW_REPLY_LIMIT, ItemResult, Objective, RunResult

# MLflow retries an unreachable server 7 times with doubling waits (minutes); fail within seconds instead:
# the results are already on disk, and `evalframe log-run DIR` logs them later.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar for one small download
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # not "Creating initial MLflow database tables..."
# Not MLflow's two "View run ... / View experiment ..." lines per run on a tracking server: the run
# prints its own one `View:` line, and a sweep one line per job.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

# How long a tracking server gets to answer one probe before the run is logged as failed: MLflow's own
# client would wait minutes on a server that accepts connections and never answers.
PROBE_TIMEOUT = 5.0

# Items traced per run unless tracking.max_traces says otherwise: MLflow's store takes 45-70 ms per
# trace on SQLite (bench/bench_report.py), so 200 add 10-15 s to a run; items.json holds every item.
MAX_TRACES = 200
RESULTS_ARTIFACT = "results.jsonl"  # every item with every step result, as the run's journal wrote it
OVERRIDES_TAG = "evalframe.overrides"  # the run's command line: rescore composes its config again from it
# A sweep hands its jobs, through the environment (joblib's workers inherit it), the parent run's id
# (each job's run is its child) and the keys it varies (each job's run is named after its values).
PARENT_RUN = "EVALFRAME_PARENT_RUN_ID"
SWEPT = "EVALFRAME_SWEPT_KEYS"
# Which process holds a run open: a RUNNING run whose process is gone (SIGKILL, power loss) is stale.
HOST_TAG, PID_TAG = "evalframe.host", "evalframe.pid"


def store_uri(uri: str) -> str:
    """`uri` with a relative SQLite path made absolute: MLflow keeps one store per URI string for the
    life of the process, so `sqlite:///mlflow.db` would go on writing to the database of the first
    working directory it was used in (the Python API and tests change directory between runs)."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    return uri


@contextmanager
def fluent_store(uri: str) -> Iterator[None]:
    """MLflow's fluent API (set_experiment, start_run, log_*) on `uri` for one block. Its
    set_tracking_uri also exports MLFLOW_TRACKING_URI, which the next run in this process (the Python
    API, a test) would take for its own default store: what was exported before is put back."""
    import mlflow

    exported = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(store_uri(uri))
    try:
        yield
    finally:
        mlflow.set_tracking_uri(exported)  # type: ignore[arg-type]  # None: unset, as before


def _holder() -> dict[str, str]:
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}


def reap(client: Any, experiment_id: str) -> None:
    """Mark KILLED the runs of the experiment left RUNNING by a process of this machine that is gone,
    so the UI does not show a killed run or sweep as running forever. Runs of other machines cannot be
    checked and stay as they are."""
    try:
        running = client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'")
        for run in running:
            tags = run.data.tags
            pid = tags.get(PID_TAG, "")
            if tags.get(HOST_TAG) == socket.gethostname() and pid.isdigit() and not alive(int(pid)):
                client.set_terminated(run.info.run_id, status="KILLED")
    except Exception as e:  # housekeeping: never the reason a run is not logged
        print(f"warning: could not check for killed MLflow runs ({type(e).__name__}: {e})", file=sys.stderr)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> {"model.name": "openai/gpt-4o-mini", ...}; no entry for a null value or an
    empty mapping (a placeholder, not a setting)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif value is not None:
            flat[name] = json.dumps(value) if isinstance(value, list) else str(value)
    return flat


def params(config: Mapping[str, Any]) -> dict[str, str]:
    """The run's settings as MLflow params, each value once and no secret. A scorer's key equal to the
    root key of the same name (`penalties`, `model`, `reason`: the scorer files take them by
    interpolation) is the root's, logged once under the root's name, so a swept `penalties.missing` is
    one column in the compare view and one axis of its parallel-coordinates chart."""
    safe = redact(config)
    scorers = {
        name: {k: v for k, v in spec.items() if not (k in safe and safe[k] == v)}
        if isinstance(spec, Mapping)
        else spec
        for name, spec in (safe.get("scorers") or {}).items()
    }
    return flatten({**safe, "scorers": scorers})


def prompts_log(result: RunResult, limit: int = RAW_REPLY_LIMIT) -> str:
    """Every rendered prompt and raw reply, one JSON object per model call; a message longer than
    `limit` characters (raw_reply_limit) is cut to its head: results.jsonl holds it whole."""
    records = []
    for item in result.items:
        steps = [("target", item.target_step)] if item.target_step else []
        steps += [(name, s) for name, r in item.scores.items() for s in r.steps]
        for scorer, step in steps:
            if step.messages:
                records.append(
                    json.dumps(
                        {
                            "item": item.id,
                            "scorer": scorer,
                            "step": step.step,
                            "messages": [
                                {**m, "content": cut(m["content"], limit, "message")} for m in step.messages
                            ],
                            "raw": step.raw,
                            "error": step.error,
                        },
                        ensure_ascii=False,
                    )
                )
    return "\n".join(records) + "\n"


def log_run(
    result: RunResult,
    config: Mapping[str, Any],
    *,
    uri: str,
    experiment: str,
    run_name: str,
    tags: Mapping[str, str],
    results_file: Path,
) -> tuple[str, str]:
    """Log one evaluation run. Returns (experiment id, run id).

    `results_file` is the run's results.jsonl (every item with every step), logged as it is rather
    than serialised a second time.
    """
    import mlflow

    safe = redact(config)
    with fluent_store(uri):
        experiment_id = mlflow.set_experiment(experiment).experiment_id
        reap(mlflow.MlflowClient(store_uri(uri)), experiment_id)
        parent = os.environ.get(PARENT_RUN)
        # In a sweep each job is a child of the sweep's run: the UI nests them, and its compare view and
        # parallel-coordinates chart show swept params against scores.
        nesting = {"mlflow.parentRunId": parent} if parent else {}
        metrics = result.metrics()
        objective = result.objective
        if objective is not None:
            # One name in every run, whatever it measures: the UI's parallel-coordinates chart and
            # sort-by-column work across sweeps; the tag says which metric it is.
            tags = {**tags, "evalframe.objective": f"{objective.metric} ({objective.direction})"}
            if not math.isnan(objective.value):  # left out, like every other NaN metric
                metrics["objective"] = objective.value
        with mlflow.start_run(run_name=run_name, tags={**nesting, **_holder()}) as run:
            mlflow.set_tags(dict(tags))
            if len(result.items) < result.count:
                # A large run's table, reasons.md and prompts.jsonl show its first items (keep_items);
                # results.jsonl, logged below, holds every one.
                mlflow.set_tag("evalframe.items_shown", f"{len(result.items)} of {result.count}")
            mlflow.log_params(params(config))
            mlflow.log_metrics(metrics)
            log_limits(result, run.info.run_id)
            mlflow.log_table(data=result.table(), artifact_file="items.json")
            mlflow.log_dict(safe, "config.yaml")
            limit = int(config.get("raw_reply_limit") or RAW_REPLY_LIMIT)
            mlflow.log_text(prompts_log(result, limit), "prompts.jsonl")
            mlflow.log_text(summary.reasons(result), "reasons.md")
            mlflow.log_artifact(str(results_file))
            log_report(result, results_file.parent, run_name)
            tracking = config.get("tracking") or {}
            if tracking.get("traces", True):
                try:
                    log_traces(result, config, tracking.get("max_traces", MAX_TRACES))
                except Exception as e:  # the run, its table and its report are logged: say what is missing
                    print(
                        f"warning: per-item MLflow traces were not logged "
                        f"({type(e).__name__}: {str(e)[:300]}); "
                        "items.json has every item. tracking.traces=false turns them off",
                        file=sys.stderr,
                    )
            return run.info.experiment_id, run.info.run_id


def log_limits(result: RunResult, run_id: str) -> None:
    """Each model's in-flight limit over the run as a metric with steps, `usage/in_flight_limit/<model>`
    (step: milliseconds since the run's first request to it), in one batch."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    points = [
        Metric(
            "usage/in_flight_limit/" + re.sub(r"[^\w./ :-]", "_", name),
            float(limit),
            int((limits.begun + seconds) * 1000),
            int(seconds * 1000),
        )
        for name, limits in result.stats.limits.items()
        for seconds, limit in limits.history
    ]
    if points:
        MlflowClient().log_batch(run_id, metrics=points)


def log_report(result: RunResult, run_dir: Path, title: str) -> None:
    """report.html and plots/ of the active run. The run normally wrote them into its directory
    already; a run logged later (`evalframe log-run DIR`) from an older directory gets them built here."""
    import mlflow

    if not (run_dir / html_report.REPORT).is_file():
        html_report.write_run_report(result, run_dir, title)
    mlflow.log_artifact(str(run_dir / html_report.REPORT))
    if (run_dir / html_report.PLOTS).is_dir():
        mlflow.log_artifacts(str(run_dir / html_report.PLOTS), html_report.PLOTS)


def _sources(config: Mapping[str, Any]) -> dict[str, Any]:
    """Who gave each scorer's verdict: the judge model(s) for LLM scorers, evalframe's code otherwise."""
    from mlflow.entities import AssessmentSource, AssessmentSourceType

    sources = {}
    for name, spec in (config.get("scorers") or {}).items():
        model = ",".join(summary.scorer_judges(spec))
        sources[name] = (
            AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id=str(model))
            if model
            else AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=f"evalframe.{name}")
        )
    return sources


def _assessments(item: ItemResult, sources: Mapping[str, Any]) -> list[Any]:
    """An item's verdicts as MLflow assessments: one feedback per scorer (score and reason; an
    unscored item is a feedback with an error, not a 0), the ground truth and a person's score as
    expectations."""
    from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Expectation, Feedback

    dataset = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="dataset")
    out: list[Any] = []
    if item.ground_truth is not None:
        out.append(Expectation(name="ground_truth", value=item.ground_truth, source=dataset))
    if item.human is not None:
        out.append(Expectation(name="human_score", value=item.human, source=dataset))
    for name, r in item.scores.items():
        source = sources.get(name) or AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=name)
        if r.scored:
            out.append(Feedback(name=name, value=r.score, rationale=r.reason, source=source))
        else:
            code = "NOT_APPLICABLE" if r.not_applicable else "UNSCORED"
            error = AssessmentError(error_code=code, error_message=r.error or r.reason)
            out.append(Feedback(name=name, error=error, rationale=r.reason, source=source))
    return out


def log_traces(result: RunResult, config: Mapping[str, Any], limit: int | None) -> int:
    """One MLflow trace per item, linked to the active run, carrying its scores and reasons as
    assessments: MLflow's "Evaluation runs" page then shows, for each input, the verdicts of two
    runs side by side. Returns how many items were traced (the first `limit`; None = all).

    Each trace goes out as one span batch and one trace record with its assessments attached, on
    MLflow's background export queue; logging each assessment with mlflow.log_feedback instead
    would add one request per scorer and item. Attaching them relies on MLflow's in-memory trace
    manager (mlflow is pinned exactly, and the UI test reads the assessments back).
    """
    import mlflow
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    manager = InMemoryTraceManager.get_instance()
    sources = _sources(config)
    items = result.items if limit is None else result.items[: int(limit)]
    for item in items:
        with mlflow.start_span(name="evalframe.item", span_type="EVALUATOR") as span:
            # The row's id first (a long input's preview is cut at its end): MLflow's "Evaluation runs"
            # view pairs two runs' items by their request, and several rows may ask the same question.
            span.set_inputs({"id": item.id, "input": item.input})
            span.set_outputs(item.output)
            with manager.get_trace(span.trace_id) as trace:
                if trace is not None:
                    trace.info.tags["evalframe.item_id"] = item.id
                    trace.info.assessments.extend(_assessments(item, sources))
    mlflow.flush_trace_async_logging()  # before the run ends, and so a later read sees every trace
    if len(items) < len(result.items):
        print(
            f"MLflow traces: the first {len(items)} of {len(result.items)} items "
            "(tracking.max_traces; every item is in items.json)",
            file=sys.stderr,
        )
    return len(items)


def log_files(uri: str, run_id: str, base: Path, files: list[Path]) -> None:
    """Log files to an existing run (the sweep's parent), keeping their paths relative to `base`."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    for path in files:
        folder = path.parent.relative_to(base).as_posix()
        client.log_artifact(run_id, str(path), None if folder == "." else folder)


@dataclass
class LoggedRun:
    """A run as MLflow holds it, with its results.jsonl downloaded (what `rescore` starts from)."""

    run_id: str
    name: str
    experiment_id: str
    tags: dict[str, str]
    metrics: dict[str, float]
    results_file: Path


def _client(uri: str) -> Any:
    """A client for reading an existing store: never one that creates an empty store on the way."""
    from mlflow.tracking import MlflowClient

    database = uri.removeprefix("sqlite:///") if uri.startswith("sqlite:///") else None
    if database is not None and not Path(database).is_file():
        raise ConfigError(
            f"no MLflow database at {Path(database).resolve()}: check tracking.uri ({uri}), or run from "
            "the directory that holds the run's mlflow.db"
        )
    return MlflowClient(tracking_uri=store_uri(uri))


def last_run(uri: str, experiment: str) -> tuple[str, str] | None:
    """(experiment id, run id) of the newest run in `experiment`, or None when there is none yet."""
    try:
        client = _client(uri)
    except ConfigError:  # no database yet: the UI starts on an empty store
        return None
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], order_by=["attribute.start_time DESC"], max_results=1)
    return (found.experiment_id, runs[0].info.run_id) if runs else None


def display_uri(uri: str) -> str:
    """A tracking URI fit to print: credentials in it (https://user:token@host) are blanked."""
    return re.sub(r"(?<=://)[^/@]+@", f"{REDACTED}@", uri)


def _get_run(client: Any, uri: str, run_id: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise ConfigError(
                f"run_id={run_id}: no such run in the MLflow store at {uri}; copy the id from the run's "
                "page (Overview: Run ID), or point at the store it was logged to with tracking.uri=..."
            ) from None
        raise ConfigError(
            f"cannot read run {run_id} from MLflow at {uri}; check tracking.uri and that the server is up "
            f"({str(e)[:300]})"
        ) from None
    except Exception as e:  # a server that is down, a database file that cannot be opened
        raise ConfigError(
            f"cannot reach MLflow at {uri} ({type(e).__name__}: {str(e)[:300]}); check tracking.uri"
        ) from None


def fetch_run(uri: str, run_id: str, directory: Path, require_tag: str | None = None) -> LoggedRun:
    """A logged run's tags, metrics and results.jsonl (downloaded into `directory`).

    Every failure is a ConfigError naming what to check: the id, the store, the tag, or the artifact.
    """
    client = _client(uri)
    run = _get_run(client, uri, run_id)
    if require_tag and require_tag not in run.data.tags:
        raise ConfigError(
            f"run {run_id} was logged without its command line (tag {require_tag}; an older evalframe "
            "logged it), so its config cannot be composed again: run it again normally, then rescore that run"
        )
    names = {a.path for a in client.list_artifacts(run_id)}
    if RESULTS_ARTIFACT not in names:
        raise ConfigError(
            f"run {run_id} has no {RESULTS_ARTIFACT} artifact (it was not logged by evalframe, or its "
            "artifacts were deleted): it has no stored judge replies to re-score; run it again normally"
        )
    directory.mkdir(parents=True, exist_ok=True)
    local = client.download_artifacts(run_id, RESULTS_ARTIFACT, str(directory))
    return LoggedRun(
        run_id=run.info.run_id,
        name=run.info.run_name or run_id,
        experiment_id=run.info.experiment_id,
        tags=dict(run.data.tags),
        metrics=dict(run.data.metrics),
        results_file=Path(local),
    )


def sweep_children(uri: str, run_id: str) -> list[str]:
    """The child runs of a sweep's parent run, in launch order; [] for a run that is no sweep. An
    unknown id or an unreachable store is a ConfigError."""
    client = _client(uri)
    run = _get_run(client, uri, run_id)
    if run.data.tags.get("evalframe.sweep") != "true":
        return []
    children = client.search_runs(
        [run.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{run_id}'",
        order_by=["attributes.start_time ASC"],
    )
    return [child.info.run_id for child in children]


def log_comparison(uri: str, experiment_id: str, comparison: Comparison, files: list[Path]) -> str:
    """A comparison as a run of its own in the baseline's experiment, tagged with both run ids, its
    figures as metrics and compare.html as an artifact. Returns its run id."""
    import time

    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    tags = {
        "evalframe.compare.baseline": comparison.baseline,
        "evalframe.compare.candidate": comparison.candidate,
        "evalframe.compare.verdict": "worse" if comparison.worse else "not worse",
        "mlflow.note.content": f"{comparison.title()}. {comparison.counts()}.",
    }
    run = client.create_run(
        experiment_id, run_name=f"compare {comparison.candidate[:8]} vs {comparison.baseline[:8]}"
    )
    run_id = str(run.info.run_id)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in comparison.metrics().items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    for path in files:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
    return run_id


def unavailable(uri: str) -> str | None:
    """Why the store at `uri` cannot take a run, found within seconds; None when it can (or when it
    is no kind we can check). MLflow itself waits minutes on a server that accepts connections and
    never answers, and retries a database it cannot write for 100 s, then prints SQLAlchemy's traceback."""
    import sqlite3

    if uri.startswith(("http://", "https://")):
        import requests

        try:
            requests.get(f"{uri.rstrip('/')}/health", timeout=PROBE_TIMEOUT)  # any answer will do
        except requests.Timeout:
            return f"the tracking server at {uri} did not answer within {PROBE_TIMEOUT:g} s"
        except requests.RequestException as e:
            return f"cannot reach the tracking server at {uri} ({type(e).__name__})"
        return None
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0]).absolute()
    hint = "set tracking.uri=sqlite:///PATH/mlflow.db to a directory you can write"
    if not path.exists():
        if not path.parent.is_dir():
            return f"cannot create the MLflow database {path}: {path.parent} is not a directory; {hint}"
        if not os.access(path.parent, os.W_OK):
            return f"cannot create the MLflow database {path}: {path.parent} is read-only; {hint}"
        return None
    try:  # a write that is rolled back: what MLflow will need, without touching its tables
        db = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, timeout=PROBE_TIMEOUT)
        db.isolation_level = None  # explicit BEGIN/ROLLBACK: Python would commit the DDL itself
        try:
            db.execute("BEGIN")
            db.execute("CREATE TABLE evalframe_write_check (x)")
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.Error as e:
        if "locked" not in str(e):  # another job of a sweep is writing: MLflow waits for it
            return f"cannot write the MLflow database {path} ({e}); {hint}"
    return None


def start_parent(uri: str, experiment: str, name: str, overrides: list[str]) -> str | None:
    """Open the sweep's parent run (closed by end_parent when the sweep ends) for its jobs to nest in;
    returns its id, or None when the store cannot take it (each job then says so and keeps its results)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    problem = unavailable(uri)
    if problem:  # each job then says so and keeps its results for log-run
        print(f"warning: the sweep is not logged to MLflow: {problem}", file=sys.stderr)
        return None
    with fluent_store(uri):
        experiment_id = mlflow.set_experiment(experiment).experiment_id
    client = MlflowClient(store_uri(uri))
    reap(client, experiment_id)
    safe = redact_overrides(overrides)
    run = client.create_run(
        experiment_id,
        run_name=name,
        tags={"evalframe.sweep": "true", "evalframe.sweep.overrides": " ".join(safe), **_holder()},
    )
    os.environ[PARENT_RUN] = str(run.info.run_id)
    return str(run.info.run_id)


def reopen_parent(uri: str, run_id: str) -> bool:
    """Continue a killed sweep's parent run (`-m ... resume=true`): running again, held by this process.
    False if the store no longer has it (a new parent is started instead)."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store_uri(uri))
    try:
        client.get_run(run_id)
    except Exception:
        return False
    client.update_run(run_id, status="RUNNING")
    client.log_batch(run_id, tags=[RunTag(k, v) for k, v in _holder().items()])
    os.environ[PARENT_RUN] = run_id
    return True


def end_parent(
    uri: str,
    best: Best | None,
    objective: Objective,
    base: Path,
    files: list[Path],
    extra: Mapping[str, float] | None = None,
) -> None:
    """Close the sweep's parent run, if one is open: tagged with the best job's values and objective,
    with the sweep's report and `extra` metrics (the held-out check's), and say where it is. A tracking
    outage here must not fail a finished sweep: its files are on disk."""
    import time

    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    run_id = os.environ.pop(PARENT_RUN, None)
    if not run_id:
        return
    tags = {"evalframe.sweep.objective": objective.metric, "evalframe.sweep.direction": objective.direction}
    metrics = dict(extra or {})
    if best is not None:
        tags["evalframe.sweep.best"] = " ".join(f"{k}={v}" for k, v in best.params.items())
        tags.update({f"evalframe.sweep.best.{k}": v for k, v in best.params.items()})
        if best.job is not None:
            tags["evalframe.sweep.best_job"] = best.job.name
        metrics["objective"] = best.value
    client = MlflowClient(store_uri(uri))
    try:
        log_files(uri, run_id, base, files)
    except Exception as e:
        print(
            f"warning: could not log {', '.join(p.name for p in files)} to MLflow ({type(e).__name__}: {e})",
            file=sys.stderr,
        )
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
        tags=[RunTag(k, scrub_text(str(v))) for k, v in tags.items()],
    )
    client.set_terminated(run_id)
    experiment_id = client.get_run(run_id).info.experiment_id
    report.where_to_look(uri, display_uri(uri), experiment_id, run_id, what="View the sweep")


def job_label() -> str:
    """`penalties.missing=0.05 penalties.contradiction=1.0` for a sweep's job (its swept values), so
    the jobs' MLflow runs are told apart by name; "" outside a sweep."""
    from hydra.core.hydra_config import HydraConfig

    keys = json.loads(os.environ.get(SWEPT) or "[]")
    if not keys or not HydraConfig.initialized():
        return ""
    values = dict(o.lstrip("+~").split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    return " ".join(f"{k}={values[k]}" for k in keys if k in values)


def sweep_job() -> int | None:
    """The job's number when this run is a job of a sweep (`-m`), else None."""
    from hydra.core.hydra_config import HydraConfig

    if SWEPT not in os.environ or not HydraConfig.initialized():
        return None
    return int(HydraConfig.get().job.num)


def run_name(config: Mapping[str, Any]) -> str:
    tracking = config.get("tracking") or {}
    if tracking.get("run_name"):
        return str(tracking["run_name"])
    dataset = str(config["dataset"].get("name", "dataset"))
    if "/" in dataset or dataset.endswith((".jsonl", ".csv")):  # a file of yours: its name, not its path
        dataset = Path(dataset).stem
    name = f"{dataset}-{'+'.join(config['scorers'])}"
    return f"{name} {job_label()}".strip()  # a sweep's jobs are told apart by their swept values


def log(
    result: RunResult,
    config: Mapping[str, Any],
    results_file: Path,
    overrides: list[str] | None = None,
    extra_tags: Mapping[str, str] | None = None,
) -> int:
    """Log a finished run to MLflow, if tracking is on; if that fails the results stay on disk and we
    say how to retry. Returns the exit code. `overrides` (the command line) is kept as a tag."""
    tracking = config.get("tracking") or {}
    if not tracking.get("enabled"):
        return EXIT_OK
    command = json.dumps(redact_overrides(overrides)) if overrides is not None else ""
    verdict = result.verdict
    tags = {
        "evalframe.dataset": str(config["dataset"].get("name")),
        "evalframe.scorers": ",".join(config.get("scorers") or {}),
        "evalframe.model": summary.judges(config),
        # The gate's verdict, so a failed run is findable in MLflow (a run that failed its gate still
        # finished: MLflow's own status says nothing of it).
        **({"evalframe.gate": verdict.word, "evalframe.exit_code": str(verdict.code)} if verdict else {}),
        **({"evalframe.gate.failed": "; ".join(verdict.failed)[:5000]} if verdict and verdict.failed else {}),
        # MLflow refuses tags over 8,000 characters: such a run logs, and rescore says why it cannot.
        **({OVERRIDES_TAG: command} if 0 < len(command) <= 8000 else {}),
        **(extra_tags or {}),
    }
    tags = {k: scrub_text(v) for k, v in tags.items()}  # a sweep's job may vary a secret
    name = scrub_text(run_name(config))
    problem = unavailable(tracking["uri"])  # within seconds, where MLflow would take minutes
    if problem is None:
        try:
            experiment_id, run_id = log_run(
                result,
                config,
                uri=tracking["uri"],
                experiment=tracking["experiment"],
                run_name=name,
                tags=tags,
                results_file=results_file,
            )
        except Exception as e:
            problem = f"{type(e).__name__}: {str(e)[:300]}"
    if problem:
        print(
            f"error: could not log to MLflow at {tracking['uri']} ({problem}). "
            f"The results are safe in {results_file}; log them later with: "
            f"evalframe log-run {results_file.parent}",
            file=sys.stderr,
        )
        return EXIT_TRACKING
    result.run_id = run_id
    if sweep_job() is None:  # a sweep says where its parent run is, once, at the end
        report.where_to_look(tracking["uri"], display_uri(tracking["uri"]), experiment_id, run_id)
    return EXIT_OK
