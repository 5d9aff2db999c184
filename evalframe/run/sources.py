"""Where a run's rows come from, by `dataset.format`: a JSONL or CSV file (evalframe.data.rows). Readers
of other sources (MLflow traces, an earlier run's results) live in the package that owns the source and
are chosen here, the one place that knows them all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.data import rows as data
from evalframe.run import earlier
from evalframe.tracking import trace_reader


def trace_backed(cfg: Mapping[str, Any]) -> bool:
    """Whether the rows are traces, which may carry this run's verdicts already (evalframe.run.reuse)."""
    return cfg.get("format") == "mlflow_traces"


def rows(
    cfg: Mapping[str, Any],
    tracking: Mapping[str, Any] | None = None,
    started: float | None = None,
    set_aside: bool = False,
) -> data.Rows:
    """The rows of the `dataset` config group, as a stream; `tracking` (the run's) says where the run's
    own MLflow store is, which a trace dataset reads by default, and `started` (seconds since the
    epoch; None: now) the instant its time window counts from; `set_aside`: a trace that cannot be read
    as a row is one saying why (a watch tick's), not an error."""
    if cfg.get("format") == "mlflow_traces":
        return trace_reader.rows(cfg, tracking, started, set_aside)
    if cfg.get("format") == "run":
        return earlier.rows(cfg)
    return data.Rows.from_config(cfg)
