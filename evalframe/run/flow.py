"""How a run's rows flow through scoring: a bounded number of items in flight, continuously.

The next rows start as soon as items are journaled, never waiting for the slowest item of a window:
the progress bar moves from the first finished item, and memory holds the items in flight plus the
run's aggregates, whatever the dataset's size.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar, cast

from evalframe.data.rows import Row
from evalframe.results.results_file import Finished
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult

Score = Callable[[list[Row], Callable[[ItemResult], None]], Awaitable[None]]


def sizes(window: int, concurrency: int, chunks: list[int]) -> tuple[int, int]:
    """(rows started together, most items in flight). Rows start one by one, or in the chunks a
    scorer or target works best with (embedding batches); about twice `concurrency` items are in
    flight, so the limiter always has requests waiting while each item's steps follow one another
    closely (the first items finish within a few latencies, not after every row's first step), and
    never more than `window` (memory)."""
    chunk = min(window, max(chunks))
    return chunk, min(window, max(2 * concurrency, 2 * chunk))


class Room:
    """Places for items in flight: `take(n)` waits until n are free, `give()` frees one (an item
    journaled), `fail(e)` makes the waiting (and any later) `take` raise e. One taker: the loop that
    reads the rows."""

    def __init__(self, size: int):
        self.free = size
        self.error: BaseException | None = None
        self._wanted: tuple[int, asyncio.Future[None]] | None = None

    async def take(self, n: int) -> None:
        if self.error is None and self.free < n:
            freed = asyncio.get_running_loop().create_future()
            self._wanted = (n, freed)
            await freed
        if self.error is not None:
            raise self.error
        self.free -= n

    def give(self) -> None:
        self.free += 1
        if self._wanted and self.free >= self._wanted[0]:
            self._wake()

    def fail(self, error: BaseException) -> None:
        self.error = self.error or error
        self._wake()

    def _wake(self) -> None:
        if self._wanted and not self._wanted[1].done():
            self._wanted[1].set_result(None)
        self._wanted = None


async def run(
    rows: Iterable[Row],
    score: Score,
    result: RunResult,
    finished: Finished,
    chunk: int,
    most: int,
) -> None:
    """Read `rows` once and `score` them, `chunk` rows at a time with at most `most` items in flight;
    each scored item is added to `result` (`score` calls back as each is journaled). Rows already
    `finished` (resume) are added, not scored. The first failure (a rejected key) ends the run."""
    room = Room(most)
    tasks: set[asyncio.Task[None]] = set()
    # Items finish in any order; the ones the result keeps are put back in the rows' order. Only the
    # first `keep + most` rows can be among them (at most `most` items are in flight).
    order: dict[str, int] = {}

    def add(item: ItemResult) -> None:
        result.add(item)
        room.give()

    def ended(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            room.fail(cast(BaseException, task.exception()))

    async def start(todo: list[Row]) -> None:
        await room.take(len(todo))
        task = asyncio.ensure_future(score(todo, add))
        tasks.add(task)
        task.add_done_callback(ended)

    try:
        todo: list[Row] = []
        for n, row in enumerate(rows):
            if result.keep is None or n < result.keep + most:
                order[row.id] = n
            if row.id in finished:
                result.add(finished.pop(row.id))
                continue
            todo.append(row)
            if len(todo) == chunk:
                await start(todo)
                todo = []
        if todo:
            await start(todo)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    result.items.sort(key=lambda item: order.get(item.id, len(order)))
    for listed in result.unscored.values():
        listed.sort(key=lambda u: order.get(u.id, len(order)))


T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run the event loop, on uvloop where available: it cuts the per-request CPU of the model
    door by about a quarter, and a large run is CPU-bound on that, not on the network."""
    # A connection attempt of httpx's (anyio's happy eyeballs, through httpcore: the OpenAI SDK's batch
    # files, an HTTP target) that a cancelled request left unstarted is dropped with a "never awaited"
    # warning whenever the GC next runs, which since the end's imports run during the run
    # (run/warmup.py) can be mid-run, on the user's console: nothing was lost, nothing to say.
    warnings.filterwarnings("ignore", "coroutine 'connect_tcp.<locals>.try_connect' was never awaited")
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
