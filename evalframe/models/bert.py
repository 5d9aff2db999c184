"""BERT's forward pass in numpy: the vectors of a sentence-transformers BERT model (all-MiniLM-L6-v2, or
any directory with config.json, tokenizer.json and model.safetensors) without PyTorch.

Written here by hand because no installable library runs such a model offline without torch:
sentence-transformers and transformers need torch (750 MB installed, for a 90 MB model), onnxruntime
needs an ONNX export that the model's package does not ship, and fastembed downloads its models at run
time. It computes what transformers' BertModel and sentence-transformers' Pooling and Normalize do, in
fp32: word + position + token-type embeddings and a LayerNorm; then per layer, self-attention (padding
masked out) and a GELU (erf) feed-forward, each added back and LayerNorm-ed; then mean or CLS pooling
and L2 normalisation. tests/models/test_bert.py holds it to vectors recorded from sentence-transformers.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from safetensors.numpy import load_file
from threadpoolctl import threadpool_limits
from tokenizers import Encoding, Tokenizer

# Padded tokens per forward pass. Small enough that a batch's activations stay in the processor's cache
# (numpy's elementwise steps, GELU's erf and the softmax, are as costly as the matmuls once they spill),
# large enough for matmuls that keep BLAS busy: of 512 to 4,096, 1,024 took the least CPU on 2 cores.
BATCH_TOKENS = 1024
_KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")  # a Dense layer or another module: not run here
# erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7, fp32's own precision), as PyTorch's vectorised
# CPU erf computes it: numpy has no erf, and scipy.special.erf takes 20 times as long, most of a layer.
_ERF_P = np.float32(0.3275911)
_ERF_A = [np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


class Layer(NamedTuple):
    """One encoder layer; each matrix transposed once at load, so a call is `x @ W + b`."""

    qkv: np.ndarray  # query, key and value side by side: one matmul instead of three
    qkv_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    out_norm: tuple[np.ndarray, np.ndarray]
    up: np.ndarray  # the feed-forward's widening matrix (hidden -> intermediate)
    up_bias: np.ndarray
    down: np.ndarray
    down_bias: np.ndarray
    down_norm: tuple[np.ndarray, np.ndarray]


class Encoder(NamedTuple):
    whole: Tokenizer  # every token of a text, no special tokens (chunks)
    windowed: Tokenizer  # the model's input: special tokens added, cut to the window
    window: int  # max_seq_length, special tokens included
    lower: bool  # sentence_bert_config's do_lower_case: lowercase the text before tokenising
    pooling: str  # "mean" or "cls"
    heads: int
    eps: float
    embeddings: tuple[np.ndarray, np.ndarray, np.ndarray]  # word, position, token type
    norm: tuple[np.ndarray, np.ndarray]
    layers: list[Layer]


def _json(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.is_file() else default


def _pooling(path: Path) -> list[str]:
    """The pooling modes 1_Pooling/config.json turns on (mean without one, as sentence-transformers)."""
    modes = _json(path / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    on = [k.removeprefix("pooling_mode_") for k, v in modes.items() if k.startswith("pooling_mode_") and v]
    return [{"mean_tokens": "mean", "cls_token": "cls"}.get(mode, mode) for mode in on]


def refusal(path: Path) -> str | None:
    """Why the model in `path` is not one this encoder runs as its authors do (its vectors would be
    silently wrong), or None."""
    config = _json(path / "config.json", {})
    modules = [m.get("type", "").rsplit(".", 1)[-1] for m in _json(path / "modules.json", [])]
    checks = [
        (config.get("model_type") == "bert", f"model_type {config.get('model_type')!r} is not BERT"),
        (config.get("hidden_act", "gelu") == "gelu", f"hidden_act {config.get('hidden_act')!r} is not gelu"),
        (
            config.get("position_embedding_type", "absolute") == "absolute",
            f"{config.get('position_embedding_type')} position embeddings",
        ),
        (_pooling(path) in (["mean"], ["cls"]), f"pooling {_pooling(path)}, not mean or cls alone"),
        (all(m in _KNOWN_MODULES for m in modules), f"modules {modules}"),
        ((path / "model.safetensors").is_file(), "no model.safetensors"),
        ((path / "tokenizer.json").is_file(), "no tokenizer.json"),
    ]
    return next((why for ok, why in checks if not ok), None)


def load(path: Path) -> Encoder:
    """The model in `path` (refusal(path) is None), read once: sizes from config.json, the window from
    sentence_bert_config.json."""
    config = json.loads((path / "config.json").read_text())
    sentence = _json(path / "sentence_bert_config.json", {})
    positions = int(config["max_position_embeddings"])
    window = min(int(sentence.get("max_seq_length") or positions), positions)
    whole = Tokenizer.from_file(str(path / "tokenizer.json"))
    # tokenizer.json carries its own truncation and padding (MiniLM's: 128 tokens, padded to 128);
    # the model's window is max_seq_length, and padding is done per batch here.
    whole.no_truncation()
    whole.no_padding()
    windowed = Tokenizer.from_file(str(path / "tokenizer.json"))
    windowed.no_padding()
    windowed.enable_truncation(window)
    weights = load_file(str(path / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def get(key: str) -> np.ndarray:
        return np.ascontiguousarray(weights[prefix + key], dtype=np.float32)

    word, position, token_type = (
        get(f"embeddings.{e}_embeddings.weight") for e in ("word", "position", "token_type")
    )
    return Encoder(
        whole,
        windowed,
        window,
        bool(sentence.get("do_lower_case")),
        _pooling(path)[0],
        int(config["num_attention_heads"]),
        float(config.get("layer_norm_eps", 1e-12)),
        (word, position, token_type),
        (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias")),
        [_layer_weights(get, f"encoder.layer.{i}.") for i in range(int(config["num_hidden_layers"]))],
    )


def _layer_weights(get: Any, at: str) -> Layer:
    def matrix(key: str) -> np.ndarray:
        return np.ascontiguousarray(get(f"{at}{key}.weight").T)  # torch's Linear stores W as out x in

    def norm(key: str) -> tuple[np.ndarray, np.ndarray]:
        return get(f"{at}{key}.LayerNorm.weight"), get(f"{at}{key}.LayerNorm.bias")

    parts = ("query", "key", "value")
    return Layer(
        np.concatenate([matrix(f"attention.self.{p}") for p in parts], axis=1),
        np.concatenate([get(f"{at}attention.self.{p}.bias") for p in parts]),
        matrix("attention.output.dense"),
        get(f"{at}attention.output.dense.bias"),
        norm("attention.output"),
        matrix("intermediate.dense"),
        get(f"{at}intermediate.dense.bias"),
        matrix("output.dense"),
        get(f"{at}output.dense.bias"),
        norm("output"),
    )


def chunks(model: Encoder, text: str) -> list[str]:
    """`text` in pieces that each fit the window with the special tokens: the model would otherwise
    see only the text's beginning."""
    ids = model.whole.encode(text.lower() if model.lower else text, add_special_tokens=False).ids
    limit = model.window - model.whole.num_special_tokens_to_add(False)
    if len(ids) <= limit:
        return [text]
    return [model.whole.decode(ids[i : i + limit]) for i in range(0, len(ids), limit)]


def encode(model: Encoder, texts: list[str]) -> np.ndarray:
    """Unit vectors of `texts` (float32, one row each); a text past the window is cut to it."""
    encodings = model.windowed.encode_batch([t.lower() for t in texts] if model.lower else texts)
    vectors = np.zeros((len(texts), model.embeddings[0].shape[1]), dtype=np.float32)
    batches = _batches([len(e.ids) for e in encodings])

    def pooled(batch: list[int]) -> np.ndarray:
        ids, types, mask = _padded([encodings[i] for i in batch])
        return _pool(model, _forward(model, ids, types, mask), mask)

    # Batches side by side, one core each, BLAS on one thread: BLAS's own threads wait for each other
    # at every one of these small matmuls (and for any other busy process), and numpy's elementwise
    # steps, half the time, use one core anyway. numpy lets go of the GIL in both.
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(_cores()) as pool:
        for batch, vector in zip(batches, pool.map(pooled, batches), strict=True):
            vectors[batch] = vector
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def _cores() -> int:
    """The cores this process may run on (fewer than the machine's in a container or under taskset)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _batches(lengths: list[int], budget: int = BATCH_TOKENS) -> list[list[int]]:
    """Indexes in batches of similar length, each at most `budget` tokens once padded: shortest first,
    so a short text is never padded to a long one's length (that costs as much as the long one)."""
    batches: list[list[int]] = [[]]
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batches[-1] and (len(batches[-1]) + 1) * lengths[i] > budget:
            batches.append([])
        batches[-1].append(i)
    return [b for b in batches if b]


def _padded(encodings: list[Encoding]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, token types and the attention mask (1 for a token, 0 for padding), right-padded."""
    shape = (len(encodings), max(len(e.ids) for e in encodings))
    ids, types, mask = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.float32)
    for row, e in enumerate(encodings):
        n = len(e.ids)
        ids[row, :n], types[row, :n], mask[row, :n] = e.ids, e.type_ids, 1
    return ids, types, mask


def _norm(x: np.ndarray, weight_bias: tuple[np.ndarray, np.ndarray], eps: float) -> np.ndarray:
    centred = x - x.mean(axis=-1, keepdims=True)
    scale = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    return centred * scale * weight_bias[0] + weight_bias[1]


def _forward(model: Encoder, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The last layer's hidden states, batch x length x hidden."""
    word, position, token_type = model.embeddings
    batch, length = ids.shape
    x = word[ids] + position[:length] + token_type[types]
    x = _norm(x.reshape(batch * length, -1), model.norm, model.eps)  # 2-D: one matmul per weight
    # Padding gets the lowest score before the softmax, so no token attends to it (as BertModel does).
    bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
    for layer in model.layers:
        x = _layer(x, bias, layer, model.heads, model.eps)
    return x.reshape(batch, length, -1)


def _layer(x: np.ndarray, bias: np.ndarray, w: Layer, heads: int, eps: float) -> np.ndarray:
    """One encoder layer on x (batch * length) x hidden: self-attention, then the feed-forward."""
    batch, length = bias.shape[0], bias.shape[-1]
    hidden = x.shape[1]
    size = hidden // heads
    # batch x length x (q, k, v) x heads x size  ->  (q, k, v) x batch x heads x length x size
    q, k, v = (x @ w.qkv + w.qkv_bias).reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
    scores = (q * np.float32(1 / math.sqrt(size))) @ k.transpose(0, 1, 3, 2) + bias
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))  # a softmax that cannot overflow
    scores /= scores.sum(axis=-1, keepdims=True)
    context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
    x = _norm(x + context @ w.out + w.out_bias, w.out_norm, eps)
    up = x @ w.up + w.up_bias
    up = 0.5 * up * (1.0 + _erf(up * np.float32(1 / math.sqrt(2))))  # GELU, the erf form BERT uses
    return _norm(x + up @ w.down + w.down_bias, w.down_norm, eps)


def _erf(x: np.ndarray) -> np.ndarray:
    ax = np.abs(x)
    t = 1 / (1 + _ERF_P * ax)
    poly = _ERF_A[0] * t
    for a in _ERF_A[1:]:
        poly += a
        poly *= t
    return np.copysign(1 - poly * np.exp(-ax * ax), x)


def _pool(model: Encoder, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """One vector per text: the [CLS] token's, or the mean of its tokens' (padding left out)."""
    if model.pooling == "cls":
        return hidden[:, 0]
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
    return (hidden * mask[:, :, None]).sum(axis=1) / counts
