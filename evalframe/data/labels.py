"""People's labels as the human score of a file dataset's rows: `dataset.labels=PATH` joins the
labels.jsonl that `evalframe review pull` writes to the rows by id. A row's human score is the mean of
its reviewers' values (each on the scorer's scale); a row nobody labelled has none (left out of the
agreement figures). The file holds one scorer's labels: a row has one human score. Their comments are
what `evalframe align` teaches a judge from (`comments`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from evalframe.errors import DataError


def _read(path: str) -> list[dict[str, Any]]:
    """The labels of a labels.jsonl, each checked (item_id, scorer, value), all of one scorer; a
    DataError naming a bad line or the file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"dataset.labels={path}: no such file (evalframe review pull writes labels.jsonl)")
    found = []
    for number, text in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            label = json.loads(text)
            item, value, scorer = str(label["item_id"]), float(label["value"]), str(label["scorer"])
            found.append({**label, "item_id": item, "value": value, "scorer": scorer})
        except (ValueError, KeyError, TypeError):
            raise DataError(
                f"{path}:{number}: not a label (item_id, scorer, value) of labels.jsonl"
            ) from None
    scorers = {label["scorer"] for label in found}
    if len(scorers) > 1:
        raise DataError(
            f"dataset.labels={path} holds labels of {len(scorers)} scorers ({', '.join(sorted(scorers))}): "
            "a row has one human score; keep one scorer's lines"
        )
    return found


def people(path: str) -> dict[str, float]:
    """Item id -> the mean of its labels' values, from a labels.jsonl; a DataError naming a bad line."""
    values: dict[str, list[float]] = defaultdict(list)
    for label in _read(path):
        values[label["item_id"]].append(label["value"])
    return {item: sum(found) / len(found) for item, found in values.items()}


def comments(path: str) -> dict[str, str]:
    """Item id -> its reviewers' comments (`comment` of labels.jsonl, each once, in the file's order),
    for the items any reviewer commented on."""
    found: dict[str, list[str]] = defaultdict(list)
    for label in _read(path):
        said = str(label.get("comment") or "").strip()
        if said and said not in found[label["item_id"]]:
            found[label["item_id"]].append(said)
    return {item: " / ".join(said) for item, said in found.items()}
