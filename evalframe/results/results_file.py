"""A run's results.jsonl, line by line: `encode` an item as the journal appends it
(evalframe.results.journal), `item_from_json` it back. Read back, each line is one finished item; an
id journaled twice (redone on resume) counts as its last line. A last line torn by a kill mid-write (no
newline at its end) is skipped, saying so; any other line that is no item (not JSON, null, a number, an
object without an id) is a DataError naming the file and the line: a results file is read whole or not
at all, never with items silently missing. A large run's file is read a line at a time, never held whole."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from evalframe.errors import DataError
from evalframe.models.steps import StepResult, Usage
from evalframe.results.scores import ItemResult, Judgment, ScoreResult

Torn = Callable[[str], None]  # told the one line saying a torn last line was skipped


def say(line: str) -> None:
    """A torn last line's warning, on stderr (the default)."""
    print(f"warning: {line}", file=sys.stderr)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses to plain JSON values; NaN becomes null so the output is strict JSON.

    Walks the fields directly: dataclasses.asdict deep-copies everything first, which made writing
    10,000 items take seconds.
    """
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields is not None:
        return {name: to_jsonable(getattr(obj, name)) for name in fields}
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


def encode(item: ItemResult) -> str:
    """An item as its line of results.jsonl (strict JSON, non-ASCII kept as it is, a newline at its end)."""
    return json.dumps(to_jsonable(item), ensure_ascii=False) + "\n"


def _step(d: dict[str, Any]) -> StepResult:
    usage = d.get("usage") or {}
    if "cost" in usage and usage["cost"] is None:  # stored as null: unknown (a model without a price)
        usage = {**usage, "cost": math.nan}
    return StepResult(**{**d, "usage": Usage(**usage)})


def item_from_json(d: dict[str, Any]) -> ItemResult:
    scores = {
        name: ScoreResult(
            score=float("nan") if r["score"] is None else r["score"],
            reason=r["reason"],
            steps=[_step(s) for s in r.get("steps", [])],
            details=r.get("details") or {},
            error=r.get("error"),
            judgments=[
                Judgment(**{**j, "score": float("nan") if j["score"] is None else j["score"]})
                for j in r.get("judgments") or []
            ],
            not_applicable=bool(r.get("not_applicable")),
        )
        for name, r in d.get("scores", {}).items()
    }
    target = d.get("target_step")
    return ItemResult(
        id=d["id"],
        input=d["input"],
        ground_truth=d.get("ground_truth"),
        output=d["output"],
        scores=scores,
        target_step=_step(target) if target else None,
        target_error=d.get("target_error"),
        human=d.get("human"),
        record=d.get("record") or {},
        trace_id=d.get("trace_id"),
        retriever_span_id=d.get("retriever_span_id"),
        conversation=d.get("conversation"),
    )


def read_items(path: Path) -> list[ItemResult]:
    """Finished items of a results file: each id's last (an item redone on resume replaces the
    earlier), in the order the ids first appear; a line torn by a kill mid-write is ignored (it is
    redone)."""
    return list({item.id: item for item in iter_items(path)}.values())


def latest_items(path: Path) -> Iterator[ItemResult]:
    """read_items one item at a time, for a file too large to hold: a first pass notes where each
    id's last line starts, the second reads those lines (`evalframe log-run` of a 100,000-item run
    held 914 MiB with every item read at once)."""
    last = _last_lines(path)
    if not last:
        return
    with path.open("rb") as lines:
        for start, _ in last.values():
            yield _item_at(lines, start)


def _item_at(lines: BinaryIO, start: int) -> ItemResult:
    """The item on the line that starts at byte `start`."""
    lines.seek(start)
    return item_from_json(json.loads(lines.readline()))


def _last_lines(path: Path) -> dict[str, tuple[int, frozenset[str]]]:
    """Where each id's last finished line starts and the scorers it has, the ids in the order they
    first came."""
    return {item.id: (start, frozenset(item.scores)) for item, _, start in _entries(path)}


class Finished:
    """The items a resumed run finished by every scorer, by id, each read from the journal when its
    row comes (`pop`): a run resumed after 90,000 of 100,000 items no longer holds those 90,000
    items, only where their lines start."""

    def __init__(self, path: Path | None = None, scorers: Collection[str] = ()) -> None:
        self.path = path
        wanted = frozenset(scorers)
        last = _last_lines(path) if path else {}
        self._at = {id_: start for id_, (start, has) in last.items() if has == wanted}

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._at

    def pop(self, id_: str) -> ItemResult:
        assert self.path is not None  # an id is only found in a journal that was read
        with self.path.open("rb") as lines:
            return _item_at(lines, self._at.pop(id_))


def iter_items(path: Path, torn: Torn = say) -> Iterator[ItemResult]:
    """The finished items of a results file in its order, read a line at a time (a large run's file is
    never held whole); a last line torn by a kill mid-write is skipped, `torn` told."""
    return (item for item, _, _ in _entries(path, torn))


def iter_lines(path: Path) -> Iterator[tuple[ItemResult, str]]:
    """iter_items with each item's line as written (a merge copies it as it is)."""
    return ((item, line) for item, line, _ in _entries(path))


def _entries(path: Path, torn: Torn = say) -> Iterator[tuple[ItemResult, str, int]]:
    """Each finished item with its line and the line's byte offset (read in binary: a text file's
    position is not known while it is iterated). A blank line is passed over."""
    if not path.is_file():
        return
    with path.open("rb") as lines:
        end = 0
        for number, raw in enumerate(lines, start=1):
            start, end = end, end + len(raw)
            if not raw.strip():
                continue
            try:
                line, item = _line(raw)
            except ValueError as e:
                if not raw.endswith(b"\n"):  # the last line, cut by a kill mid-write: its item is not done
                    torn(f"{path}:{number}: the last line is cut short (a run killed mid-write); skipped")
                    return
                raise DataError(f"{path}:{number}: {e}; fix or delete that line") from None
            yield item, line, start


def _line(raw: bytes) -> tuple[str, ItemResult]:
    """A line's text and the item it holds; a ValueError says what the line is instead."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start + 1})") from None
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{json.dumps(value)[:40]} is no item (a JSON object with an id, input, output, scores)"
        )
    try:
        return line, item_from_json(value)
    except KeyError as e:
        raise ValueError(f"an item without {e.args[0]!r}") from None
    except (TypeError, AttributeError, ValueError) as e:
        raise ValueError(f"not an item of a results file ({type(e).__name__}: {str(e)[:100]})") from None
