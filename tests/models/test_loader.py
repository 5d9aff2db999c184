"""litellm's loader beside the other heavy imports (evalframe.models.imports)."""

from __future__ import annotations

import threading

from evalframe.models import imports, loader


def test_a_loaded_litellm_is_not_held_back_by_a_background_import() -> None:
    """A run's first request asks for litellm while scipy's or matplotlib's import holds the import
    lock (queued behind preload()'s import of litellm): once litellm is in, it is handed over at once."""
    litellm = loader.lib()
    holding, release = threading.Event(), threading.Event()

    def importing() -> None:
        with imports.LOCK:
            holding.set()
            release.wait(30)

    background = threading.Thread(target=importing)
    background.start()
    got: list[object] = []
    asking = threading.Thread(target=lambda: got.append(loader._load(False)))
    try:
        assert holding.wait(30)
        asking.start()
        asking.join(5)
        assert got == [litellm]
    finally:
        release.set()
        background.join()
        asking.join()
