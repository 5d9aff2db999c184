"""Watch mode's settings (the `watch` config node), checked once before anything is read, and its
window arithmetic. Pure: the loop that ticks is evalframe.run.watch.

A trace is ready once `settle` has passed since its end as MLflow stores it (`trace.end_time_ms`, its
start plus its execution time): the store holds a trace only once its root span has ended, and a trace
that gained no span for `settle` is taken as finished. A tick judges the traces that ended in
[checkpoint, now - settle), and from further back when a trace that ended within `lookback` of now
has no verdict of the tick's settings yet: one stored late (an exporter retrying, a client's clock
behind) is judged on the next tick, not left behind the checkpoint."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.errors import ConfigError

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FORMAT = "mlflow_traces"  # the only dataset a watcher reads: one that grows while it runs


@dataclass(frozen=True)
class Watch:
    """How often to tick, how long a trace must be quiet, how many ticks to run (None: until stopped),
    and how far back a tick looks for traces stored late (seconds; 0: not at all)."""

    every: float
    settle: float
    ticks: int | None = None
    lookback: float = 0.0

    def window(self, checkpoint_ms: int, now: float) -> tuple[int, int]:
        """The end times [from, to) in milliseconds that a tick at `now` judges: from the checkpoint
        to the newest end that has settled (never before the checkpoint)."""
        ready = int(now * 1000) - int(self.settle * 1000)
        return checkpoint_ms, max(checkpoint_ms, ready)

    def late(self, checkpoint_ms: int, now: float) -> tuple[int, int] | None:
        """The end times [from, to) in milliseconds, before the checkpoint and within `lookback` of
        `now`, where a tick looks for traces stored after it passed them; None: nowhere (no
        checkpoint yet, or no lookback)."""
        start = max(0, int(now * 1000) - int(self.lookback * 1000))
        return (start, checkpoint_ms) if checkpoint_ms and start < checkpoint_ms else None


def duration(value: Any, key: str) -> float:
    """`30s`, `5m`, `1h`, `1d` (or 2.5m) in seconds."""
    found = _DURATION.fullmatch(str(value).strip()) if not isinstance(value, bool) else None
    if found is None:
        raise ConfigError(f"{key}={value!r} is not a duration; write one like 30s, 5m or 1h")
    return float(found.group(1)) * _SECONDS[found.group(2)]


def of(config: Mapping[str, Any]) -> Watch | None:
    """The config's watch settings, checked; None when watch mode is off (`watch.every: null`)."""
    cfg = config.get("watch") or {}
    settle = duration(cfg.get("settle") if cfg.get("settle") is not None else "0s", "watch.settle")
    lookback = duration(cfg.get("lookback") if cfg.get("lookback") is not None else "0s", "watch.lookback")
    ticks = cfg.get("ticks")
    if ticks is not None and (isinstance(ticks, bool) or not isinstance(ticks, int) or ticks < 1):
        raise ConfigError(
            f"watch.ticks={ticks!r}: a whole number of ticks from 1, or null to run until stopped"
        )
    if cfg.get("every") in (None, ""):
        return None
    every = duration(cfg["every"], "watch.every")
    if every <= 0:
        raise ConfigError(f"watch.every={cfg['every']!r}: the time between ticks must be above 0, e.g. 60s")
    dataset = config.get("dataset") or {}
    if dataset.get("format") != FORMAT:
        raise ConfigError(
            f"watch mode judges traces as they arrive: it needs dataset=mlflow_traces, not "
            f"dataset={dataset.get('name') or dataset.get('format')}; drop watch.every or choose "
            "dataset=mlflow_traces"
        )
    if dataset.get("sessions"):
        raise ConfigError(
            "watch mode judges each trace as it ends, and a session is judged whole once it has ended: "
            "drop watch.every (a run judges the sessions that have ended) or dataset.sessions"
        )
    if not (config.get("tracking") or {}).get("enabled"):
        raise ConfigError(
            "watch mode logs each tick to one MLflow run and keeps its checkpoint there: choose "
            "tracking=mlflow (tracking=none has no run)"
        )
    return Watch(every, settle, ticks, lookback)
