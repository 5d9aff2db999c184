"""dataset=mlflow_traces: the traces of an MLflow experiment read as rows. The store is asked for one
page of traces at a time, oldest first, so memory holds a page, never the experiment; every read asks
again (the pipeline reads its rows twice: to validate them, then to score them) with the time window
pinned when the run started, so both reads give the same traces (and so does a resumed run's)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from evalframe.data import rows as data, sessions, traces
from evalframe.data.trace_query import Query, equals, quoted
from evalframe.errors import ConfigError, TrackingError
from evalframe.tracking import databases, read
from evalframe.tracking.store import display_uri, locked, locked_line, sqlite_path, store_uri, unavailable
from evalframe.tracking.trace_records import SESSION, record

# Oldest first; traces of the same millisecond in the order of their ids, so pages never overlap.
ORDER = ["timestamp_ms ASC", "request_id ASC"]
# The run's store when tracking is off (tracking=none): where tracking=mlflow would log it.
DEFAULT_STORE = "sqlite:///mlflow.db"
SHOWN = 20  # experiments named in the error for one that is not there
IN_LIST = 100  # trace ids in one `trace.request_id IN (...)` search: a page of them


def rows(
    cfg: Mapping[str, Any],
    tracking: Mapping[str, Any] | None = None,
    now: float | None = None,
    set_aside: bool = False,
    labels: Mapping[str, float] | None = None,
) -> data.Rows:
    """The traces the `dataset` config selects, as a stream of rows; its time window counts from `now`
    (seconds since the epoch; None: the present); with `set_aside`, a trace that cannot be read as a row
    is one saying why (data.traces.unjudgeable); `labels`: a categorical human score's numbers. The
    store and the experiment are checked here, at once; the traces are read when the rows are."""
    query = Query.of(cfg, time.time() if now is None else now)
    traces.selectors(cfg)  # a typo in dataset.columns stops the run before the store is asked
    sessions.check(cfg)
    uri = store_uri(query.tracking_uri or run_store(tracking or {}))
    _check(uri)
    try:
        client = read._client(uri)  # never one that creates an empty store on the way
        experiment_id, name = _experiment(client, query.experiment, uri)
    except Exception as e:  # locked again since the check: MLflow waited as long, then 98 lines
        if locked(e):
            raise TrackingError(locked_line(uri)) from None
        raise
    source = f"MLflow experiment {name!r}"
    if cfg.get("sessions"):
        return _sessions(client, experiment_id, query, uri, cfg, source)

    def traces_read() -> Iterator[data.Row]:
        return traces.rows(_records(client, experiment_id, query, uri), cfg, source, set_aside, labels)

    return data.Rows(traces_read, source)


def _check(uri: str) -> None:
    """The traces' store can be read, found within seconds, before MLflow is given it (which would
    retry a database server for minutes, and meets a bad URI with a traceback)."""
    where = "dataset.tracking_uri (or tracking.uri): the store your application's traces are in"
    problem = databases.unsupported(uri, display_uri(uri))
    if problem:
        raise ConfigError(f"{problem}; check {where}")
    database = sqlite_path(uri)
    if database is not None and not database.is_file():
        raise ConfigError(f"dataset=mlflow_traces: no MLflow database at {database}; set {where}")
    problem = unavailable(uri, write=False)
    if problem:
        raise TrackingError(f"{problem} (read as dataset.tracking_uri, or tracking.uri)")


def run_store(tracking: Mapping[str, Any]) -> str:
    """The store the run logs to (tracking.uri), else where it would: $MLFLOW_TRACKING_URI or ./mlflow.db."""
    return str(tracking.get("uri") or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE)


def _experiment(client: Any, wanted: str | None, uri: str) -> tuple[str, str]:
    """(id, name) of the experiment named or numbered `wanted`; a ConfigError lists the store's."""
    from mlflow.exceptions import MlflowException

    found = None
    if wanted is not None:
        found = client.get_experiment_by_name(wanted)
        if found is None and wanted.isdigit():
            try:
                found = client.get_experiment(wanted)
            except MlflowException:
                found = None
    if found is not None and found.lifecycle_stage == "active":
        return str(found.experiment_id), str(found.name)
    names = [e.name for e in client.search_experiments(max_results=SHOWN + 1)]
    listed = ", ".join(repr(n) for n in names[:SHOWN]) + (", ..." if len(names) > SHOWN else "")
    problem = (
        "dataset.experiment is not set" if wanted is None else f"dataset.experiment={wanted!r} is not there"
    )
    raise ConfigError(
        f"{problem}: name the experiment whose traces to read (its name or id). The MLflow store at "
        f"{display_uri(uri)} has {listed or 'no experiment'}"
    )


def _records(client: Any, experiment_id: str, query: Query, uri: str) -> Iterator[dict[str, Any]]:
    """Every trace the query selects, as records, one page of `query.page_size` in memory at a time."""
    for trace in _search(client, experiment_id, uri, query.filter_string(), query.page_size):
        if query.keeps(trace.info.tags or {}):
            yield record(trace)


def _sessions(
    client: Any, experiment_id: str, query: Query, uri: str, cfg: Mapping[str, Any], source: str
) -> data.Rows:
    """dataset.sessions=true: the sessions with a trace the query selects, in the order of that trace
    (data.sessions says which are taken). The query's traces are paged through without their spans,
    for their session ids only; each session's traces are then listed by its id (a search without
    spans), and the traces of a batch of sessions read with their spans together: memory holds a page
    of ids and a batch of sessions."""

    def ids() -> Iterator[str]:
        for trace in _search(client, experiment_id, uri, query.filter_string(), query.page_size, spans=False):
            found = (trace.info.trace_metadata or {}).get(SESSION)
            if found and query.keeps(trace.info.tags or {}):
                yield str(found)

    def fetch(batch: list[str]) -> dict[str, list[dict[str, Any]]]:
        listed = {
            session: [
                t.info.trace_id
                for t in _search(
                    client, experiment_id, uri, _of_session(session), query.page_size, spans=False
                )
                if (t.info.trace_metadata or {}).get(SESSION) == session  # a pattern may find others
            ]
            for session in batch
        }
        every = [trace_id for ids in listed.values() for trace_id in ids]
        full: dict[str, dict[str, Any]] = {}
        for start in range(0, len(every), IN_LIST):
            wanted = ", ".join(quoted(i, f"trace {i!r}") for i in every[start : start + IN_LIST])
            for trace in _search(client, experiment_id, uri, f"trace.request_id IN ({wanted})", IN_LIST):
                full[trace.info.trace_id] = record(trace)
        return {session: [full[i] for i in ids if i in full] for session, ids in listed.items()}

    window = (query.since_ms, query.until_ms)
    return data.Rows(lambda: sessions.rows(ids(), fetch, cfg, window, source), source)


def _of_session(session: str) -> str:
    """The session's traces, whatever its id holds (both quote marks, say: data.trace_query.equals)."""
    return equals(f"metadata.`{SESSION}`", session)


def _search(
    client: Any, experiment_id: str, uri: str, wanted: str, page_size: int, spans: bool = True
) -> Iterator[Any]:
    """The experiment's traces `wanted` selects (an MLflow filter), oldest first, a page at a time."""
    from mlflow.exceptions import MlflowException

    token = None
    while True:
        try:
            page = client.search_traces(
                locations=[experiment_id],
                filter_string=wanted,
                max_results=page_size,
                order_by=ORDER,
                page_token=token,
                include_spans=spans,
            )
        except MlflowException as e:
            if locked(e):
                raise TrackingError(locked_line(uri)) from None
            raise ConfigError(
                f"the MLflow store at {display_uri(uri)} refused the trace search {wanted!r} "
                f"({e.message}); check dataset.filter and dataset.tags"
            ) from None
        yield from page
        token = page.token
        if not token:
            return
