"""`dataset=run`: the items of an earlier evalframe run as rows, to judge its outputs again with other
scorers or judges. Each row is the item as it was scored: its id (so `evalframe compare` pairs the two
runs), input, ground truth, output, human score and record, with the list columns read through that
run's own column mapping and what its live target handed over (data.handed) put back on it. A re-score
reads a logged run's items into rows the same way (row_of).

The run is named by its MLflow id (its results.jsonl downloaded through tracking.read, as `rescore` and
`compare` read it) or by its directory or results.jsonl on disk; the file is read a line at a time,
twice (validation, then scoring), so a large run costs flat memory.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from evalframe.data import handed as handover, rows as data, traces
from evalframe.data.conversations import conversation_of
from evalframe.data.values import LISTS, as_text, lists_of
from evalframe.errors import ConfigError, DataError
from evalframe.results.journal import RESULTS
from evalframe.results.manifest import Manifest
from evalframe.results.results_file import iter_items, read_items
from evalframe.results.scores import ItemResult
from evalframe.tracking.read import fetch_run

FIX = (
    "set dataset.run_id=ID (an MLflow run's id) or dataset.path=DIR (its run directory, or DIR/results.jsonl)"
)


def row_of(
    item: ItemResult,
    columns: Mapping[str, str | None],
    line: int,
    traced: Mapping[str, traces.Selector | None] | None = None,
) -> data.Row:
    """The row `item` was scored on: its fields, its record as it was, its list columns read from the
    record through the run's `columns` (a trace dataset's record: through its selectors, `traced`, with
    the trace's ids), and what its target handed over (kept in its step's reply)."""
    where = f"item {item.id}"
    found = traces.fields(item.record, traced, where) if traced else lists_of(item.record, columns, where)
    step = item.target_step
    if step is not None and step.ok and step.reply:
        found.update(handover.fields(step.reply, where), **handover.trace_of(step.reply))
    return data.Row(
        id=item.id,
        input=item.input,
        ground_truth=item.ground_truth,
        output=item.output,
        line=line,
        extra=item.record,
        human=item.human,
        **{**_conversation(item, columns, where), **found},
    )


def _conversation(item: ItemResult, columns: Mapping[str, str | None], where: str) -> dict[str, Any]:
    """A conversation item's fields: the conversation its judges judged (kept whole on the item, so a
    re-score judges the very same turns, whichever shape or column or target it came from) and its
    expected outcome, assistant's role and scenario from the record, through the run's mapping."""
    found: dict[str, Any] = {}
    if item.conversation:
        found["messages"] = conversation_of(item.conversation, "conversation", where)
    for name in ("expected_outcome", "chatbot_role", "scenario"):
        column = columns.get(name, name)
        if column is not None and item.record.get(column) is not None:
            found[name] = as_text(item.record[column])
    return found


def rows(cfg: Mapping[str, Any]) -> data.Rows:
    """The rows of the earlier run the `dataset` config names (format: run)."""
    results, source, settings = _locate(cfg)
    columns = data.column_names(settings)
    traced = traces.selectors(settings) if settings.get("format") == "mlflow_traces" else None
    earlier_range = list(settings.get("human_range") or [0, 1])
    limit = cfg.get("limit")
    told: list[bool] = []  # the items left out are said once, though the rows are read twice
    warned: set[str] = set()

    def torn(line: str) -> None:  # a torn last line: said once too
        if line not in warned:
            warned.add(line)
            print(f"warning: dataset=run: {line}", file=sys.stderr)

    def read() -> Iterator[data.Row]:
        seen: set[str] = set()
        failed = 0
        for number, item in enumerate(iter_items(results, torn), start=1):
            if limit is not None and len(seen) >= limit:
                break
            if item.target_error is not None or item.id in seen:  # no output to judge; a repeat
                failed += item.id not in seen
                continue
            if item.human is not None and earlier_range != list(cfg.get("human_range") or [0, 1]):
                raise ConfigError(
                    f"{source}: its human scores are on the scale {earlier_range}, and "
                    f"dataset.human_range is {list(cfg.get('human_range') or [0, 1])}: set "
                    f"dataset.human_range={json.dumps(earlier_range).replace(' ', '')}"
                )
            seen.add(item.id)
            row = row_of(item, columns, number, traced)
            # Its list fields under their own names too: a run of these rows is read back (dataset=run
            # again, rescore) through the default mapping.
            lists = {name: getattr(row, name) for name in LISTS if getattr(row, name) is not None}
            yield handover.onto(row, lists)
        if failed and not told:
            told.append(True)
            print(
                f"dataset=run: {failed} item(s) of {source} had no output (its target failed on them) "
                "and are left out",
                file=sys.stderr,
            )

    return data.Rows(read, source)


def stored(cfg: Mapping[str, Any]) -> list[ItemResult]:
    """The earlier run's items as it stored them, every scorer's steps with their cache keys and
    replies: what `evalframe align` reads the judge's verdicts from (run.align_calls)."""
    results, _, _ = _locate(cfg)
    return read_items(results)


def _locate(cfg: Mapping[str, Any]) -> tuple[Path, str, dict[str, Any]]:
    """The earlier run's results.jsonl, how errors name it, and its dataset settings (column mapping,
    human_range): from its run.json on disk, or from its MLflow params."""
    run_id, path = cfg.get("run_id"), cfg.get("path")
    if bool(run_id) == bool(path):
        raise ConfigError(f"dataset=run reads one earlier run: {FIX}" + (", not both" if run_id else ""))
    if path:
        results = Path(str(path)).expanduser()
        results = results / RESULTS if results.is_dir() else results
        if not results.is_file():
            raise DataError(f"dataset.path={path}: no {RESULTS} there; {FIX}")
        config = Manifest.read(results.parent).config  # beside it in a run directory: its resolved config
        return results, str(results), dict(config.get("dataset") or {})
    # The run's own store, else tracking=mlflow's default (this run may log nowhere: tracking=none).
    uri = cfg.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    scratch = Path(tempfile.mkdtemp(prefix="evalframe-run-"))
    atexit.register(shutil.rmtree, scratch, True)
    try:
        logged = fetch_run(str(uri), str(run_id), scratch)
    except ConfigError as e:
        raise ConfigError(f"dataset=run: {e}") from None
    return logged.results_file, f"run {run_id} ({RESULTS})", _settings(logged.params)


def _settings(params: Mapping[str, str]) -> dict[str, Any]:
    """A logged run's dataset settings from its params (log.params: flat keys, lists as JSON; a null
    is not logged, and a column then reads as its field's own name)."""
    prefix = "dataset.columns."
    columns = {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}
    human_range = json.loads(params.get("dataset.human_range") or "[0, 1]")
    return {"columns": columns, "human_range": human_range}
