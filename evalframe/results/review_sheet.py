"""The review as a file, for teams that label without MLflow's Review tab: `review push format=jsonl`
writes one line per chosen item and scorer (the item, the question, and empty `label`, `reviewer`,
`comment` fields for a person to fill in, in any editor or spreadsheet that keeps JSON lines), and
`review pull labels=PATH` reads the filled-in lines back with the checks a queue's answers get (a
label on the scorer's scale, a reviewer named, one answer per reviewer, item and scorer). Several
reviewers of one item: copy its line once per reviewer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.results.review_labels import Label
from evalframe.results.review_questions import Question
from evalframe.results.review_selection import Candidate
from evalframe.results.scores import ItemResult

EMPTY = {"label": None, "reviewer": None, "comment": None}  # what a person fills in


def lines(
    run_id: str,
    chosen: Sequence[Candidate],
    items: Mapping[str, ItemResult],
    questions: Mapping[str, Question],
) -> list[dict[str, Any]]:
    """One line per chosen item and scorer, the fields to fill in empty."""
    found = []
    for candidate in chosen:
        item = items[candidate.id]
        for name, question in questions.items():
            asked = {k: v for k, v in asdict(question).items() if k not in ("scorer", "values", "scale")}
            found.append(
                {
                    "run_id": run_id,
                    "item_id": item.id,
                    "trace_id": candidate.trace_id or None,
                    "scorer": name,
                    "input": item.input,
                    "output": item.output,
                    "ground_truth": item.ground_truth,
                    "question": {**asked, "instruction": question.instruction()},
                    **EMPTY,
                }
            )
    return found


def read(path: Path) -> list[dict[str, Any]]:
    """The lines of a review file; a ConfigError naming the first line that is not a review line."""
    if not path.is_file():
        raise ConfigError(
            f"labels={path}: no such file; write one with evalframe review push ... format=jsonl"
        )
    found = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"{path}:{number}: not JSON ({e.msg}); each line is one item's review"
            ) from None
        if not isinstance(line, dict) or not {"run_id", "item_id", "scorer", "label"} <= set(line):
            raise ConfigError(f"{path}:{number}: not a review line (run_id, item_id, scorer, label)")
        found.append(line)
    return found


def write(path: Path, found: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in found), encoding="utf-8"
    )
    partial.replace(path)


def labels(path: Path, found: Sequence[Mapping[str, Any]], questions: Mapping[str, Question]) -> list[Label]:
    """The filled-in lines as labels (the file's time for each); a ConfigError naming a bad line."""
    when = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    out = []
    for number, line in enumerate(found, 1):
        if line["label"] is None:
            continue
        where = f"{path}: line {number} (item {line['item_id']})"
        if line["scorer"] not in questions:
            raise ConfigError(f"{where}: the run has no scorer {line['scorer']!r}")
        if not line.get("reviewer"):
            raise ConfigError(f'{where}: labelled, but no reviewer named: fill in "reviewer"')
        try:
            value = questions[line["scorer"]].score(line["label"])
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        trace = str(line.get("trace_id") or "")
        reviewer, comment = str(line["reviewer"]), line.get("comment")
        out.append(
            Label(str(line["item_id"]), trace, line["scorer"], line["label"], value, reviewer, comment, when)
        )
    return out
