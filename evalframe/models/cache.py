"""The judge cache: model replies on disk, keyed by everything that can change a reply.

LiteLLM's own disk cache is broken in 1.106 and gone in 1.109, so this is ours: one SQLite file (WAL
mode, so several processes of a joblib sweep can read and write at once). Only validated replies are
stored, never errors or unparseable text, so a bad reply is asked again next time. Penalty weights are
not part of any prompt, so a penalty sweep re-scores from cached replies without a single model call.

Parallel sweeps (`hydra/launcher=joblib`) start several jobs at once on the same requests. So that
each request is still asked once, a process claims a request before asking (a row in `pending`,
inserted with INSERT OR IGNORE: exactly one process wins); the others wait for the reply to land.
A claim whose process died (same host, pid gone) or that is older than the caller's patience is
taken over, so a killed job never blocks the others.

The cache only saves calls: a cache that cannot be written (a full disk) warns once and the run goes
on without storing, and a damaged row is a miss, asked again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.redaction import scrub_text

MODES = ("readwrite", "read", "write", "off")


def default_dir() -> Path:
    if os.environ.get("EVALFRAME_CACHE_DIR"):
        return Path(os.environ["EVALFRAME_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalframe"


def key(payload: dict[str, Any]) -> str:
    """A stable hash of a request: model, parameters, messages and response schema."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    asks_models = True  # a miss goes to the model (a Replay's never does)

    def __init__(self, mode: str = "readwrite", directory: str | Path | None = None):
        if mode not in MODES:
            raise ConfigError(f"cache.mode={mode!r} is not an option; use one of {', '.join(MODES)}")
        self.mode = mode
        self.path = Path(directory or default_dir()).expanduser() / "replies.sqlite"
        self._local = threading.local()
        self.host = socket.gethostname()
        self._warned: set[str] = set()
        if mode != "off":
            try:
                db = self._db()
                db.execute(
                    "CREATE TABLE IF NOT EXISTS replies"
                    " (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
                )
                db.execute(
                    "CREATE TABLE IF NOT EXISTS pending"
                    " (key TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, claimed REAL NOT NULL)"
                )
            except (sqlite3.Error, OSError) as e:  # a full disk, a folder it may not write
                self._give_up("open", e, "off")

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)  # autocommit
            # Switching to WAL takes an exclusive lock, and SQLite does not wait for it when several
            # processes open a new cache at the same moment: retry briefly instead of failing.
            for attempt in range(50):
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError:
                    if attempt == 49:
                        raise
                    time.sleep(0.05 + random.random() * 0.1)
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def get(self, k: str) -> dict[str, Any] | None:
        if self.mode not in ("readwrite", "read"):
            return None
        try:
            row = self._db().execute("SELECT value FROM replies WHERE key = ?", (k,)).fetchone()
        except (sqlite3.Error, OSError) as e:
            self._give_up("read", e, "off")
            return None
        if not row:
            return None
        try:
            value = json.loads(row[0])
        except (ValueError, RecursionError, TypeError):
            value = None
        if not (isinstance(value, dict) and isinstance(value.get("raw"), str)) or "error" in value:
            # A damaged or tampered row is a miss: the request is asked again and its row replaced.
            self._warn("entry", f"warning: ignoring an unreadable entry of the judge cache {self.path}")
            return None
        return {"raw": value["raw"]}  # the disk cache stores replies, never errors

    def put(self, k: str, value: dict[str, Any]) -> None:
        if self.mode not in ("readwrite", "write"):
            return
        stored = self._write(
            "INSERT OR REPLACE INTO replies (key, value, created) VALUES (?, ?, ?)",
            # A key that the model echoed back into its reply is never stored.
            (k, scrub_text(json.dumps(value, ensure_ascii=False)), time.time()),
        )
        if stored and self.mode == "readwrite":
            self.release(k)  # after the reply: a waiter never sees neither

    def _write(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor | None:
        """One write; if it fails (a full disk) the run goes on without storing anything more."""
        try:
            return self._db().execute(sql, args)
        except (sqlite3.Error, OSError) as e:
            self._give_up("write", e, "read" if self.mode == "readwrite" else "off")
            return None

    def _give_up(self, what: str, error: Exception, mode: str) -> None:
        """The cache failed (disk full, unreadable file): warn once and go on without that part of it."""
        self._warn(
            what,
            f"warning: cannot {what} the judge cache {self.path} ({error}); the run goes on without "
            f"{'storing replies' if what == 'write' else 'the cache'} (cache.dir sets another folder)",
        )
        self.mode = mode

    def _warn(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            print(message, file=sys.stderr)

    async def claim(self, k: str, patience: float) -> dict[str, Any] | None:
        """Before asking the model for `k`: None if this process should ask (it then holds the claim
        until put() or release()), or the reply another process got while this one waited.

        Only `cache.mode=readwrite` shares replies between processes; other modes always ask. A claim
        older than `patience` seconds, or held by a process that no longer exists, is taken over.
        """
        if self.mode != "readwrite":
            return None
        delay = 0.02
        while self.mode == "readwrite":  # a failed write (disk full) turns claims off: then just ask
            if self._try_claim(k):
                hit = self.get(k)  # it may have landed between the caller's miss and the claim
                if hit is not None:
                    self.release(k)
                return hit
            hit = self.get(k)
            if hit is not None:
                return hit
            self._drop_stale(k, patience)
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        return None

    def release(self, k: str) -> None:
        """Give up this process's claim on `k` (the request failed, or its reply is stored)."""
        if self.mode == "readwrite":
            self._write(
                "DELETE FROM pending WHERE key = ? AND host = ? AND pid = ?", (k, self.host, os.getpid())
            )

    def _try_claim(self, k: str) -> bool:
        cursor = self._write(
            "INSERT OR IGNORE INTO pending (key, host, pid, claimed) VALUES (?, ?, ?, ?)",
            (k, self.host, os.getpid(), time.time()),
        )
        return cursor is None or cursor.rowcount == 1  # None: claims are off, this process asks itself

    def _drop_stale(self, k: str, patience: float) -> None:
        row = self._db().execute("SELECT host, pid, claimed FROM pending WHERE key = ?", (k,)).fetchone()
        if row is None:
            return
        host, pid, claimed = row
        dead = host == self.host and not alive(pid)
        if dead or time.time() - claimed > patience:
            # Only that very claim: if another waiter took over meanwhile, its claim stands.
            self._write(
                "DELETE FROM pending WHERE key = ? AND host = ? AND pid = ? AND claimed = ?",
                (k, host, pid, claimed),
            )

    def before_asking(self, step: str, model: str) -> None:
        """Called when a request is about to go to the model (no stored reply served it)."""


def alive(pid: int) -> bool:
    """Whether a process of this machine still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


class ReplayMiss(ConfigError):
    """A re-score needed a judge request its run never made (a changed prompt, model or reply form)."""

    def __init__(self, step: str, model: str):
        super().__init__(f"the request of step {step!r} to {model} is not among the run's stored replies")
        self.step = step
        self.model = model


class Replay(Cache):
    """The stored steps of a logged run, read-only, keyed exactly like the disk cache: a re-score
    (evalframe.rescore) makes the requests the run made and gets the run's replies (judge replies,
    the cosines of embedding pairs), failures included (an item the run could not score stays
    unscored). A request the run did not make raises ReplayMiss, never reaches a model, and the disk
    cache is neither read nor written."""

    def __init__(self, replies: Mapping[str, dict[str, Any]]):
        super().__init__("off")
        self.asks_models = False
        self.replies = dict(replies)

    def get(self, k: str) -> dict[str, Any] | None:
        return self.replies.get(k)

    def put(self, k: str, value: dict[str, Any]) -> None:
        pass

    def before_asking(self, step: str, model: str) -> None:
        raise ReplayMiss(step, model)


class Layered(Cache):
    """A logged run's replies first, then the disk cache (`mode`, `directory`) as usual: `evalframe
    align run_id=` scores that run's items with the judge as it was, whose requests the run made
    already (its steps keep their keys and replies), so the judge's verdicts are read rather than bought
    again, on any machine and with any cache. Unlike a Replay, a request the run did not make (another
    judge model, an edited prompt, an item the run could not score) goes to the model through the disk
    cache: only the run's usable replies are served, never its failures, and none is written to disk."""

    def __init__(
        self,
        replies: Mapping[str, dict[str, Any]],
        mode: str = "readwrite",
        directory: str | Path | None = None,
    ):
        super().__init__(mode, directory)
        self.replies = {
            k: {"raw": v["raw"]} for k, v in replies.items() if not v.get("error") and v.get("raw")
        }

    def get(self, k: str) -> dict[str, Any] | None:
        return self.replies.get(k) or super().get(k)
