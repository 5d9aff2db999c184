"""The watcher's one MLflow run (watch mode): found again by its config's key, so a restarted watcher
with the same config continues the same run and step; its checkpoint kept in the run's tags; each tick's
figures logged at the tick's step; and the store asked how many traces ended in a window.

The checkpoint lives in the run's tags, not in a file: it is found wherever and on whatever machine the
watcher starts again, and it cannot disagree with the run it describes. `evalframe.watch.done_ms`: every
trace ending before it is judged; `evalframe.watch.step`: the ticks logged; `evalframe.watch.tick`: the
tick under way ({dir, to_ms}), cleared when it ends, so a watcher killed mid-tick resumes that tick
from its journal.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalframe.data.judged import taken
from evalframe.data.trace_query import Query
from evalframe.data.traces import sampled
from evalframe.errors import TrackingError
from evalframe.redaction import scrub_text
from evalframe.tracking import read
from evalframe.tracking.log import params
from evalframe.tracking.store import display_uri, fluent_store, holder, store_uri, unavailable
from evalframe.tracking.trace_reader import ORDER, _experiment, run_store
from evalframe.tracking.trace_records import record

KEY, DONE, STEP, TICK = (
    "evalframe.watch",
    "evalframe.watch.done_ms",
    "evalframe.watch.step",
    "evalframe.watch.tick",
)


@dataclass
class Checkpoint:
    done_ms: int = 0  # every trace that ended before this is judged (0: none yet)
    step: int = 0  # ticks logged so far: the next tick's step
    tick: dict[str, Any] = field(default_factory=dict)  # the tick under way: {"dir", "from_ms", "to_ms"}


@dataclass
class WatcherRun:
    uri: str
    experiment_id: str
    run_id: str
    checkpoint: Checkpoint
    continued: bool  # an earlier watcher's run, found by the key

    def save(self) -> None:
        """The checkpoint into the run's tags (one request)."""
        from mlflow.entities import RunTag

        c = self.checkpoint
        tags = {DONE: str(c.done_ms), STEP: str(c.step), TICK: json.dumps(c.tick) if c.tick else ""}
        _client(self.uri).log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_tick(self, step: int, metrics: Mapping[str, float]) -> None:
        """One tick's figures at its step (NaN left out, as a run's are)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(k, float(v), now, step) for k, v in metrics.items() if not math.isnan(float(v))]
        if points:
            _client(self.uri).log_batch(self.run_id, metrics=points)

    def stop(self) -> None:
        """The run ended by a clean stop: FINISHED until a watcher with the same config continues it."""
        _client(self.uri).set_terminated(self.run_id, status="FINISHED")


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def open_run(config: Mapping[str, Any], key: str, name: str) -> WatcherRun:
    """The watcher's run for the config whose key is `key`: the newest one carrying it (RUNNING again,
    its checkpoint read back), else a new one with the config's params."""
    import mlflow

    tracking = config["tracking"]
    uri = store_uri(str(tracking["uri"]))
    problem = unavailable(uri)  # within seconds, where MLflow would retry a database for minutes
    if problem is not None:
        raise TrackingError(f"{problem} (tracking.uri: where the watcher's run and checkpoint are)")
    with fluent_store(uri):
        experiment_id = mlflow.set_experiment(str(tracking["experiment"])).experiment_id
    client = _client(uri)
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{KEY}` = '{key}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if found:
        run = found[0]
        client.update_run(run.info.run_id, status="RUNNING")
        for tag, value in holder().items():  # this process holds it now (a dead one's run is reaped)
            client.set_tag(run.info.run_id, tag, value)
        tags = run.data.tags
        checkpoint = Checkpoint(
            int(tags.get(DONE) or 0),
            int(tags.get(STEP) or 0),
            json.loads(tags[TICK]) if tags.get(TICK) else {},
        )
        return WatcherRun(uri, experiment_id, run.info.run_id, checkpoint, continued=True)
    tags = {KEY: key, "evalframe.dataset": str(config["dataset"].get("name")), **holder()}
    run = client.create_run(experiment_id, tags={k: scrub_text(v) for k, v in tags.items()}, run_name=name)
    from mlflow.entities import Param

    client.log_batch(run.info.run_id, params=[Param(k, v[:6000]) for k, v in params(config).items()])
    watcher = WatcherRun(uri, experiment_id, run.info.run_id, Checkpoint(), continued=False)
    watcher.save()
    return watcher


def ended(cfg: Mapping[str, Any], tracking: Mapping[str, Any], from_ms: int, to_ms: int) -> int:
    """How many traces the dataset config selects (before its sample and limit) ended in [from, to)."""
    return sum(1 for _ in _ended(cfg, tracking, from_ms, to_ms))


def earliest_unjudged(
    cfg: Mapping[str, Any], tracking: Mapping[str, Any], from_ms: int, to_ms: int, digests: Mapping[str, str]
) -> int | None:
    """The earliest end time (ms) of a trace the dataset config selects (its sample too) that ended in
    [from, to) and carries no verdict of some scorer under its digest in `digests`, decided or not (an
    unscored verdict says the trace was taken: only a trace never taken is looked for); None: none."""
    sample = cfg.get("sample") or {}
    rate, salt = sample.get("rate"), str(sample.get("salt") or "")
    earliest: int | None = None
    for trace in _ended(cfg, tracking, from_ms, to_ms):  # oldest start first
        start = int(trace.info.request_time)
        if earliest is not None and start >= earliest:  # it and every later one end after `earliest`
            break
        if rate is not None and not sampled(trace.info.trace_id, float(rate), salt):
            continue
        found = record(trace)["assessments"]
        if all(taken(found, name, digest) for name, digest in digests.items()):
            continue
        end = start + int(trace.info.execution_duration or 0)
        earliest = end if earliest is None else min(earliest, end)
    return earliest


def _ended(cfg: Mapping[str, Any], tracking: Mapping[str, Any], from_ms: int, to_ms: int) -> Iterator[Any]:
    """Each trace the dataset config selects (before its sample and limit) that ended in [from, to),
    without its spans, oldest start first: one search, a page at a time."""
    query = Query.of(cfg, time.time())
    uri = store_uri(query.tracking_uri or run_store(tracking))
    client = read._client(uri)
    experiment_id, _ = _experiment(client, query.experiment, uri)
    wanted = f"{query.filter_string()} AND {bounds(from_ms, to_ms)}"
    token = None
    while True:
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=wanted,
            max_results=1000,
            include_spans=False,
            order_by=ORDER,
            page_token=token,
        )
        yield from (trace for trace in page if query.keeps(trace.info.tags or {}))  # a tag by pattern
        token = page.token
        if not token:
            return


def bounds(from_ms: int, to_ms: int) -> str:
    """MLflow's trace filter for the traces that ended in [from, to) (end: start plus execution time)."""
    return f"trace.end_time_ms >= {from_ms} AND trace.end_time_ms < {to_ms}"


def where(watcher: WatcherRun) -> str:
    """The run's store, fit to print."""
    return display_uri(watcher.uri)
