"""Where a run's rows come from, by `dataset.format`: a JSONL or CSV file (evalframe.data.rows). Readers
of other sources (MLflow traces, an earlier run's results) live in the package that owns the source and
are chosen here, the one place that knows them all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.data import rows as data
from evalframe.results.review_questions import question
from evalframe.run import earlier
from evalframe.tracking import trace_reader


def trace_backed(cfg: Mapping[str, Any]) -> bool:
    """Whether the rows are traces, which may carry this run's verdicts already (evalframe.run.reuse)."""
    return cfg.get("format") == "mlflow_traces"


def label_values(cfg: Mapping[str, Any], scorers: Mapping[str, Any]) -> dict[str, float] | None:
    """A trace dataset's human score named after a scorer whose judge chooses (`evalframe review`'s
    question for it: people answered with the judge's own choices, `same` or `disagree`): each choice's
    number, as the judge's reply would score; None for any other human score (numbers already)."""
    name = cfg.get("human_score")
    if not isinstance(name, str) or name not in scorers:
        return None
    asked = question(name, scorers[name])
    return {o: v * asked.scale for o, v in zip(asked.options, asked.values, strict=True)} or None


def rows(
    cfg: Mapping[str, Any],
    tracking: Mapping[str, Any] | None = None,
    started: float | None = None,
    set_aside: bool = False,
    scorers: Mapping[str, Any] | None = None,
) -> data.Rows:
    """The rows of the `dataset` config group, as a stream; `tracking` (the run's) says where the run's
    own MLflow store is, which a trace dataset reads by default, and `started` (seconds since the
    epoch; None: now) the instant its time window counts from; `set_aside`: a trace that cannot be read
    as a row is one saying why (a watch tick's), not an error; `scorers`: the run's scorers' config."""
    if cfg.get("format") == "mlflow_traces":
        return trace_reader.rows(cfg, tracking, started, set_aside, label_values(cfg, scorers or {}))
    if cfg.get("format") == "run":
        return earlier.rows(cfg)
    return data.Rows.from_config(cfg)
