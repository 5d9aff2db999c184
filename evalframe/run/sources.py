"""Where a run's rows come from, by `dataset.format`: a JSONL or CSV file (evalframe.data.rows), an
earlier run's items (run: evalframe.run.earlier). Readers of other sources (MLflow traces) live in the
package that owns the source and are chosen here, the one place that knows them all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.data import rows as data
from evalframe.run import earlier


def rows(cfg: Mapping[str, Any]) -> data.Rows:
    """The rows of the `dataset` config group, as a stream."""
    if cfg.get("format") == "run":
        return earlier.rows(cfg)
    return data.Rows.from_config(cfg)
