"""Shards of one evaluation (`evalframe -m shards=N ...`): which rows job `shard` of N scores. A row's
shard is a stable hash of its id (sha256, not Python's hash(), which is salted per process), so every
job, on any machine and in any process, agrees on it without talking to the others, and a resumed job
finds the same rows it started with."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from evalframe.data.rows import Row, Rows
from evalframe.errors import ConfigError


def shard_of(row_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) the row with this id belongs to."""
    digest = hashlib.sha256(str(row_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def selected(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """(shard, shards) when the run scores one shard of the rows; None when it scores all of them.
    Bad values stop the run before any model call, saying what to give."""
    shards, shard = config.get("shards"), config.get("shard")
    if shards is None and shard is None:
        return None
    if shards is None:
        raise ConfigError(f"shard={shard}: say how many shards there are, e.g. -m shards=4 (it sets shard)")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards={shards}: give a whole number of shards, 1 or more, e.g. -m shards=2")
    if shard is None:
        if shards == 1:
            return None
        raise ConfigError(
            f"shards={shards} runs the evaluation as {shards} jobs: add -m (evalframe -m shards={shards} ...)"
        )
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
        raise ConfigError(f"shard={shard}: a shard of {shards} is a number from 0 to {shards - 1}")
    if (config.get("tune") or {}).get("holdout"):
        raise ConfigError("shards=N with tune.holdout: a held-out check needs a sweep of settings; drop one")
    return shard, shards


class Counter:
    """Counts the rows of one shard while the whole dataset is validated (Rows.validate's `check`), so
    the shard's size is known without reading the source a third time."""

    def __init__(self, shard: int, shards: int):
        self.shard, self.shards, self.count = shard, shards, 0

    def mine(self, row: Row) -> bool:
        return shard_of(row.id, self.shards) == self.shard

    def counting(self, check: Callable[[list[Row]], None]) -> Callable[[list[Row]], None]:
        def counted(window: list[Row]) -> None:
            check(window)
            self.count += sum(map(self.mine, window))

        return counted

    def part(self, rows: Rows) -> Rows:
        """This shard's rows of the validated `rows`, as a stream of their own (read again, filtered)."""
        part = Rows(lambda: (row for row in rows if self.mine(row)), rows.source)
        part.count, part.digest = self.count, rows.digest
        return part
