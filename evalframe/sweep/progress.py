"""The whole of a sharded evaluation on one bar, in the process that runs the sweep: the items its shards
have journaled (a line of a shard's results.jsonl per finished item) against their rows (a shard's
run.json says how many once it starts). Read from the sweep directory, so the bar follows the shards
wherever the launcher runs them: in this process, in joblib's workers, on a Ray cluster's nodes sharing
the directory. Each shard's own bar is off (evalframe.run.pipeline): one evaluation, one bar."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evalframe.errors import ConfigError
from evalframe.report.console import console
from evalframe.results.journal import RESULTS
from evalframe.results.manifest import MANIFEST, Manifest


class Shards:
    """Items done and rows in all, across the shards of `sweep_dir`, read incrementally: each
    journal is read from where the last look stopped (a look costs what was appended since)."""

    def __init__(self, sweep_dir: Path, shards: int):
        self.sweep_dir = sweep_dir
        self.shards = shards
        self._read = [0] * shards  # bytes of each journal counted so far
        self._done = [0] * shards
        self._rows: list[int | None] = [None] * shards

    def look(self) -> tuple[int, int | None, int]:
        """(items done, rows of the whole evaluation or None until every shard has started, shards
        started)."""
        for k in range(self.shards):
            folder = self.sweep_dir / str(k)
            if self._rows[k] is None and (folder / MANIFEST).is_file():
                with contextlib.suppress(OSError, ConfigError):  # not readable yet
                    self._rows[k] = Manifest.read(folder).total
            try:
                with (folder / RESULTS).open("rb") as journal:
                    journal.seek(self._read[k])
                    appended = journal.read()
            except OSError:
                continue  # not started yet
            # Whole lines only: a line being written is counted once its newline is there.
            whole = appended.rfind(b"\n") + 1
            self._done[k] += appended.count(b"\n", 0, whole)
            self._read[k] += whole
        rows = [r for r in self._rows if r is not None]
        return sum(self._done), sum(rows) if len(rows) == self.shards else None, len(rows)


class WholeBar:
    """The bar, redrawn every `interval` seconds from a thread of its own while the launcher runs the
    shards; silent when not in a terminal (as a run's own bar)."""

    def __init__(self, sweep_dir: Path, shards: int, interval: float = 0.5):
        self.shards = Shards(sweep_dir, shards)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="evalframe-shards-bar", daemon=True)
        self._bar = Progress(
            TextColumn(f"[bold]scoring, {shards} shards"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[started]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self._task = self._bar.add_task("shards", total=None, started="")

    def _update(self) -> None:
        done, rows, started = self.shards.look()
        waiting = "" if rows is not None else f"{started} of {self.shards.shards} shards started"
        self._bar.update(self._task, completed=done, total=rows, started=waiting)

    def _follow(self) -> None:
        while not self._stop.wait(self.interval):
            self._update()

    def __enter__(self) -> WholeBar:
        self._bar.start()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._update()  # as the shards left it
        self._bar.stop()


# The bar being shown: the sweep callback starts it at the sweep's start and stops it at its end; the
# command stops it too when a launcher raises before the end (rich allows one live display at a time,
# and a Python process may run another command after this one).
_shown: list[WholeBar] = []


def show(sweep_dir: Path, shards: int) -> None:
    stop()
    _shown.append(WholeBar(sweep_dir, shards).__enter__())


def stop() -> None:
    while _shown:
        _shown.pop().__exit__(None, None, None)
