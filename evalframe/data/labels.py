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

from evalframe.errors import DataError


def people(path: str) -> dict[str, float]:
    """Item id -> the mean of its labels' values, from a labels.jsonl; a DataError naming a bad line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"dataset.labels={path}: no such file (evalframe review pull writes labels.jsonl)")
    values: dict[str, list[float]] = defaultdict(list)
    scorers = set()
    for number, text in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            label = json.loads(text)
            values[str(label["item_id"])].append(float(label["value"]))
            scorers.add(str(label["scorer"]))
        except (ValueError, KeyError, TypeError):
            raise DataError(
                f"{path}:{number}: not a label (item_id, scorer, value) of labels.jsonl"
            ) from None
    if len(scorers) > 1:
        raise DataError(
            f"dataset.labels={path} holds labels of {len(scorers)} scorers ({', '.join(sorted(scorers))}): "
            "a row has one human score; keep one scorer's lines"
        )
    return {item: sum(found) / len(found) for item, found in values.items()}


def comments(path: str) -> dict[str, str]:
    """Item id -> its reviewers' comments (`comment` of labels.jsonl, each once, in the file's order),
    for the items any reviewer commented on; the file was read by `people` already (a bad line named)."""
    found: dict[str, list[str]] = defaultdict(list)
    for text in Path(path).expanduser().read_text(encoding="utf-8").splitlines():
        label = json.loads(text) if text.strip() else {}
        said = str(label.get("comment") or "").strip()
        if said and said not in found[str(label["item_id"])]:
            found[str(label["item_id"])].append(said)
    return {item: " / ".join(said) for item, said in found.items() if said}
