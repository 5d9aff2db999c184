"""Heavy imports (litellm, numpy and tokenizers for the local embedding model, scipy.stats, matplotlib)
one at a time.

A run starts some of them on background threads so they overlap with its work. Two threads importing
packages that import each other can hand one of them a partially initialised module (Python breaks the
import-lock cycle that way: seen as "partially initialized module 'torch'" and "scipy.stats has no
attribute 'quantile'"), so every such import takes this lock, and a background one is a thread that
holds it while it imports.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

LOCK = threading.RLock()


def in_background(name: str, target: Callable[[], Any] | None = None) -> None:
    """Import module `name` (or run `target`, which imports) on a daemon thread, under the lock."""

    def run() -> None:
        with LOCK:
            target() if target else importlib.import_module(name)

    threading.Thread(target=run, name=f"import-{name}", daemon=True).start()
