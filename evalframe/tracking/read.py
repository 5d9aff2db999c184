"""Runs read back from MLflow: a logged run with its results.jsonl (what rescore and compare start
from), the newest run of an experiment (`evalframe ui`), a sweep's child runs. Reading never creates
a store, and every failure is a ConfigError naming what to check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError, TrackingError
from evalframe.tracking.store import sqlite_path, store_uri, unavailable

RESULTS_ARTIFACT = "results.jsonl"  # every item with every step result, as the run's journal wrote it


@dataclass
class LoggedRun:
    """A run as MLflow holds it, with its results.jsonl downloaded (what `rescore` starts from)."""

    run_id: str
    name: str
    experiment_id: str
    tags: dict[str, str]
    metrics: dict[str, float]
    results_file: Path
    params: dict[str, str]  # its settings as logged (log.params): `dataset=run` reads its column mapping


def _existing(uri: str) -> None:
    """A ConfigError when `uri` is an SQLite database that is not there: MLflow would create it."""
    database = sqlite_path(uri)
    if database is not None and not database.is_file():
        here = "" if database.is_absolute() else ", or run from the directory your runs were made in"
        raise ConfigError(
            f"no MLflow database at {database.resolve()}: check tracking.uri ({uri}){here}; no runs "
            "yet? run an evaluation first (`evalframe` makes the database)"
        )


def _client(uri: str) -> Any:
    """A client for reading an existing store: never one that creates an empty store on the way."""
    from mlflow.tracking import MlflowClient

    _existing(uri)
    return MlflowClient(tracking_uri=store_uri(uri))


def check_store(uri: str, hint: str) -> None:
    """For a command that reads runs and writes (compare, ui), before anything else: a ConfigError when no
    store is there, a TrackingError when it does not answer within seconds or cannot be written (with
    `hint`: why the command writes, and so what to do). MLflow alone would create an empty store, wait
    minutes on a server that never answers, or fail at the end with SQLAlchemy's traceback."""
    _existing(uri)
    problem = unavailable(uri, hint)
    if problem:
        raise TrackingError(problem)


def last_run(uri: str, experiment: str) -> tuple[str, str] | None:
    """(experiment id, run id) of the newest run in `experiment`, or None when there is none yet."""
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], order_by=["attribute.start_time DESC"], max_results=1)
    return (found.experiment_id, runs[0].info.run_id) if runs else None


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


def get_run(uri: str, run_id: str) -> Any:
    """MLflow's record of a run (info, tags, metrics; not its artifacts), or a ConfigError naming what
    to check."""
    return _get_run(_client(uri), uri, run_id)


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
            "artifacts were deleted): it has no stored items and judge replies to read; run it again normally"
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
        params=dict(run.data.params),
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


@dataclass
class RunLine:
    """One evalframe run as `evalframe runs` lists it."""

    run_id: str
    name: str
    logged: float  # when MLflow's run started (seconds since the epoch): a run is logged as it ends
    status: str
    scorers: list[str]
    means: dict[str, float]  # <scorer>/mean of each scorer that has one


# Every evaluation run logged by evalframe carries this tag (tracking.log): comparisons, sweep parents
# and runs of other tools do not.
_EVALFRAME_RUN = "tags.`evalframe.scorers` LIKE '%'"
_SEARCHED = 1000  # runs a name prefix is looked for among, newest first
_HEX = frozenset("0123456789abcdef")


def recent_runs(uri: str, experiment: str, n: int) -> list[RunLine]:
    """The newest `n` evalframe runs of `experiment`, newest first; a ConfigError when the experiment is
    not there (naming the ones that are)."""
    client = _client(uri)
    return [_line(run) for run in _searched(client, uri, experiment, n)]


def _searched(client: Any, uri: str, experiment: str, n: int) -> list[Any]:
    try:
        found = client.get_experiment_by_name(experiment)
        names = [] if found else [e.name for e in client.search_experiments(max_results=20)]
        if found is None:
            raise ConfigError(
                f"no experiment {experiment!r} in the MLflow store at {uri}"
                + (f"; it has {', '.join(names)} (experiment=NAME)" if names else "")
            )
        return list(
            client.search_runs(
                [found.experiment_id],
                filter_string=_EVALFRAME_RUN,
                order_by=["attributes.start_time DESC"],
                max_results=n,
            )
        )
    except ConfigError:
        raise
    except Exception as e:  # a server that is down, a database file that cannot be opened
        raise ConfigError(
            f"cannot reach MLflow at {uri} ({type(e).__name__}: {str(e)[:300]}); check tracking.uri"
        ) from None


def _line(run: Any) -> RunLine:
    scorers = [s for s in run.data.tags.get("evalframe.scorers", "").split(",") if s]
    metrics = run.data.metrics
    return RunLine(
        run_id=run.info.run_id,
        name=run.info.run_name or "",
        logged=run.info.start_time / 1000,
        status=run.info.status,
        scorers=scorers,
        means={s: metrics[f"{s}/mean"] for s in scorers if f"{s}/mean" in metrics},
    )


def resolve(uri: str, experiment: str, ref: str, role: str = "run_id") -> str:
    """The run id `ref` names: a 32-character id as it is; `last` (the newest evalframe run of
    `experiment`), `last~1` (the one before it), ...; else the one run whose name or id starts with
    `ref`. A ConfigError (`role`: the argument, e.g. baseline) when none does, or which runs matched
    when several do."""
    if len(ref) == 32 and set(ref) <= _HEX:
        return ref
    client = _client(uri)
    where = f"experiment {experiment!r} at {uri}"
    if ref == "last" or ref.startswith("last~"):
        back = ref.removeprefix("last").removeprefix("~") or "0"
        if not back.isdigit():
            raise ConfigError(
                f"{role}={ref}: write last, last~1, last~2, ... (the newest run, the one before)"
            )
        runs = _searched(client, uri, experiment, int(back) + 1)
        if len(runs) <= int(back):
            raise ConfigError(
                f"{role}={ref}: {where} has {len(runs)} evalframe run(s); `evalframe runs` lists them"
            )
        return str(runs[int(back)].info.run_id)
    matched = [
        r
        for r in _searched(client, uri, experiment, _SEARCHED)
        if (r.info.run_name or "").startswith(ref) or r.info.run_id.startswith(ref)
    ]
    if len(matched) == 1:
        return str(matched[0].info.run_id)
    if not matched:
        raise ConfigError(
            f"{role}={ref}: no run of {where} has a name or id starting with {ref!r}; give a run id, "
            "last, last~1, or the start of a name (`evalframe runs` lists them)"
        )
    listed = "; ".join(f"{r.info.run_id} {r.info.run_name!r}" for r in matched[:5])
    more = f" and {len(matched) - 5} more" if len(matched) > 5 else ""
    raise ConfigError(
        f"{role}={ref} matches {len(matched)} runs of {where}: {listed}{more}; give more of the name, "
        "or the run id"
    )
