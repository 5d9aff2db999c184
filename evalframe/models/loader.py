"""Importing litellm: once, on first use (or on a background thread started early), configured for a run.

litellm takes seconds to import, and `python -m evalframe --help` must not pay for it: every module of
the model door reaches it through lib(), never by importing it at the top.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

from evalframe.models import imports

# litellm fetches data files from GitHub unless told to use its bundled copies: offline that hangs
# or warns (the price map at import, Anthropic's beta headers per call), and a run must not depend on it.
for _flag in ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"):
    os.environ.setdefault(_flag, "True")

_litellm: Any = None
_importing = threading.Lock()


def lib() -> Any:
    """Import and configure litellm once (waiting for preload()'s import if it is under way)."""
    return _litellm if _litellm is not None else _load(gc.isenabled())


def preload() -> None:
    """Start importing litellm on a background thread, so that the ~1.5 s it takes overlaps with
    composing the config and reading the dataset instead of delaying the first request; the cyclic
    GC stays off until it is imported (see _load)."""
    collecting = gc.isenabled()
    gc.disable()
    threading.Thread(target=_load, args=(collecting,), name="import-litellm", daemon=True).start()


def _load(collecting: bool) -> Any:
    global _litellm
    # Whether preload() has imported it is known before the lock of the other heavy imports is asked
    # for: a run's first request must not wait behind scipy's or matplotlib's import queued there.
    with _importing:
        if _litellm is not None:
            return _litellm
        with imports.LOCK:
            return _import(collecting)


def _import(collecting: bool) -> Any:
    global _litellm
    # Importing litellm creates millions of objects: the cyclic GC would make hundreds of passes
    # over them (a third of the import time). Off while importing, then the survivors are frozen
    # so that the run's own GC passes never walk these permanent modules again.
    gc.disable()
    try:
        import litellm

        # Not the OpenAI SDK's resources (~0.3 s): an OpenAI-compatible judge at model.api_base goes
        # without the SDK (direct.py); only a model that takes it imports them, on its first request.
        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True  # providers without response_format still get the JSON spec
        # Retries are ours (retry.py: one budget, backoff, Retry-After), never the provider SDK's
        # too. Requests pass max_retries=0, but LiteLLM's OpenAI embeddings read it as
        # `max_retries or DEFAULT_MAX_RETRIES`: 0 became 2, and every failed embedding request went
        # out three times, with the SDK's own backoff between.
        litellm.DEFAULT_MAX_RETRIES = 0  # type: ignore[misc]  # Final in LiteLLM, read at each call
        from evalframe.models.local_embeddings import register

        register(litellm)
        _litellm = litellm
    finally:
        if collecting:
            gc.freeze()
            gc.enable()
    return _litellm
