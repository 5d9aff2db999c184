"""The judge cache: model replies on disk, keyed by everything that can change a reply.

LiteLLM's own disk cache is broken in 1.106 and gone in 1.109, so this is ours: one SQLite file (WAL
mode, so several processes of a joblib sweep can read and write at once). Only validated replies are
stored, never errors or unparseable text, so a bad reply is asked again next time. Penalty weights are
not part of any prompt, so a penalty sweep re-scores from cached replies without a single model call.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError

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
    def __init__(self, mode: str = "readwrite", directory: str | Path | None = None):
        if mode not in MODES:
            raise ConfigError(f"cache mode {mode!r} is not an option; use cache={' or cache='.join(MODES)}")
        self.mode = mode
        self.path = Path(directory or default_dir()).expanduser() / "replies.sqlite"
        self._local = threading.local()
        if mode != "off":
            try:
                self._db().execute(
                    "CREATE TABLE IF NOT EXISTS replies"
                    " (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
                )
            except sqlite3.Error as e:
                raise ConfigError(
                    f"cannot open the cache at {self.path} ({e}); set cache.dir or use cache=off"
                ) from None

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
        row = self._db().execute("SELECT value FROM replies WHERE key = ?", (k,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, k: str, value: dict[str, Any]) -> None:
        if self.mode not in ("readwrite", "write"):
            return
        self._db().execute(
            "INSERT OR REPLACE INTO replies (key, value, created) VALUES (?, ?, ?)",
            (k, json.dumps(value, ensure_ascii=False), time.time()),
        )

    def before_asking(self, step: str, model: str) -> None:
        """Called when a request is about to go to the model (no stored reply served it)."""


class ReplayMiss(ConfigError):
    """A re-score needed a judge request its run never made (a changed prompt, model or reply form)."""

    def __init__(self, step: str, model: str):
        super().__init__(f"the request of step {step!r} to {model} is not among the run's stored replies")
        self.step = step
        self.model = model


class Replay(Cache):
    """The replies of a logged run, read-only, keyed exactly like the disk cache: a re-score
    (evalframe.rescore) makes the requests the run made and gets the run's replies, failures included
    (an item the run could not score stays unscored), and the cosines its embeddings gave. A request
    the run did not make raises ReplayMiss, never reaches a model, and the disk cache is neither read
    nor written."""

    def __init__(
        self,
        replies: Mapping[str, dict[str, Any]],
        cosines: Mapping[tuple[str, str, str], float] | None = None,
    ):
        super().__init__("off")
        self.replies = dict(replies)
        # Embeddings are too large to keep per run; the cosines they gave are what scores use.
        self.cosines = dict(cosines or {})

    def cosine(self, model: str, a: str, b: str) -> float:
        """The cosine the run computed with embedding `model` for two texts."""
        if (model, a, b) not in self.cosines:
            raise ReplayMiss("embed", model)
        return self.cosines[(model, a, b)]

    def get(self, k: str) -> dict[str, Any] | None:
        return self.replies.get(k)

    def put(self, k: str, value: dict[str, Any]) -> None:
        pass

    def before_asking(self, step: str, model: str) -> None:
        raise ReplayMiss(step, model)
