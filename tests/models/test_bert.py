"""The numpy BERT encoder behind `local/...`: all-MiniLM-L6-v2's vectors as sentence-transformers (torch)
gave them, recorded before it was replaced (data/minilm_reference.json); a small random BERT of other
sizes against BERT written out as plainly as possible, one text at a time; and the models it refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from evalframe.models import bert, local_embeddings

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
SENTENCE = "the capital of france is paris bananas are yellow fruit rich in potassium"
WORDS = SENTENCE.split()


@pytest.mark.slow  # loads the local embedding model
def test_minilm_vectors_are_the_ones_sentence_transformers_gave() -> None:
    """Short, empty, unicode, code and a 389-token text (cut to the 256-token window, not to the
    128 tokens tokenizer.json says), embedded in one call: batched by length, returned in order."""
    recorded = json.loads(REFERENCE.read_text())
    vectors = np.asarray(local_embeddings.encode("all-MiniLM-L6-v2", recorded["texts"]))
    wanted = np.asarray(recorded["embeddings"])
    cosines = (vectors * wanted).sum(axis=1) / np.linalg.norm(wanted, axis=1)
    assert cosines.min() >= 0.9999
    assert np.abs(vectors - wanted).max() < 1e-5  # the recording's own rounding is 5e-7
    pieces = local_embeddings.chunks("all-MiniLM-L6-v2", recorded["chunks"]["text"])
    assert pieces == recorded["chunks"]["pieces"]


def tiny_bert(path: Path, pooling: str = "cls", prefix: str = "", **config: Any) -> Path:
    """A random BERT with sizes unlike MiniLM's, a 12-token window and a tokenizer.json that (like
    MiniLM's) truncates and pads to a length of its own, which the encoder must not use."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.enable_truncation(5)
    tokenizer.enable_padding(length=20)
    path.mkdir()
    tokenizer.save(str(path / "tokenizer.json"))
    sizes = {"hidden_size": 12, "num_attention_heads": 3, "num_hidden_layers": 2, "intermediate_size": 20}
    config = {"model_type": "bert", "max_position_embeddings": 32, "type_vocab_size": 2, **sizes, **config}
    (path / "config.json").write_text(json.dumps(config))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12}))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({f"pooling_mode_{pooling}": True}))
    rng = np.random.default_rng(7)
    shapes = {
        "embeddings.word_embeddings.weight": (len(vocab), 12),
        "embeddings.position_embeddings.weight": (32, 12),
        "embeddings.token_type_embeddings.weight": (2, 12),
    }
    for i in range(2):
        at = f"encoder.layer.{i}."
        shapes |= {f"{at}attention.self.{p}.weight": (12, 12) for p in ("query", "key", "value")}
        shapes |= {f"{at}attention.output.dense.weight": (12, 12), f"{at}intermediate.dense.weight": (20, 12)}
        shapes |= {f"{at}output.dense.weight": (12, 20)}
    weights = {k: rng.normal(0, 0.5, s).astype(np.float32) for k, s in shapes.items()}
    weights |= {
        k.replace(".weight", ".bias"): rng.normal(0, 0.1, s[0]).astype(np.float32)
        for k, s in shapes.items()
        if "dense" in k or "self" in k
    }
    for norm in [
        "embeddings.LayerNorm",
        *(f"encoder.layer.{i}.{p}.LayerNorm" for i in range(2) for p in ("attention.output", "output")),
    ]:
        weights |= {
            f"{norm}.weight": rng.normal(1, 0.1, 12).astype(np.float32),
            f"{norm}.bias": rng.normal(0, 0.1, 12).astype(np.float32),
        }
    save_file({prefix + k: v for k, v in weights.items()}, str(path / "model.safetensors"))
    return path


def plain_bert(path: Path, text: str) -> np.ndarray:
    """One text through BERT as the paper writes it, in float64: a loop over heads, math.erf."""
    config = json.loads((path / "config.json").read_text())
    pooling = next(iter(json.loads((path / "1_Pooling" / "config.json").read_text())))
    weights = load_file(str(path / "model.safetensors"))
    w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in weights.items()}
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    ids = tokenizer.encode(text).ids
    ids = ids[:11] + ids[-1:] if len(ids) > 12 else ids  # the 12-token window, [SEP] kept

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
        return x * w[f"{name}.weight"] + w[f"{name}.bias"]

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: len(ids)]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    heads, size = config["num_attention_heads"], config["hidden_size"] // config["num_attention_heads"]
    for i in range(config["num_hidden_layers"]):
        at = f"encoder.layer.{i}."
        q, k, v = (linear(x, f"{at}attention.self.{p}") for p in ("query", "key", "value"))
        context = []
        for h in range(heads):
            part = slice(h * size, (h + 1) * size)
            scores = np.exp(q[:, part] @ k[:, part].T / math.sqrt(size))
            context.append(scores / scores.sum(axis=1, keepdims=True) @ v[:, part])
        x = norm(
            x + linear(np.hstack(context), f"{at}attention.output.dense"), f"{at}attention.output.LayerNorm"
        )
        up = linear(x, f"{at}intermediate.dense")
        up = up * 0.5 * (1 + np.vectorize(math.erf)(up / math.sqrt(2)))
        x = norm(x + linear(up, f"{at}output.dense"), f"{at}output.LayerNorm")
    vector = x[0] if pooling == "pooling_mode_cls_token" else x.mean(axis=0)
    return vector / np.linalg.norm(vector)


@pytest.mark.parametrize(("pooling", "prefix"), [("cls_token", ""), ("mean_tokens", "bert.")])
def test_any_bert_sizes_from_config_in_batches_match_bert_one_text_at_a_time(
    tmp_path: Path, pooling: str, prefix: str
) -> None:
    """Texts of 2 to 15 tokens in one call: sorted into batches, padded, the padding masked out of the
    attention and the mean; the longest cut to the 12-token window."""
    path = tiny_bert(tmp_path / "tiny", pooling, prefix)
    texts = ["paris", "the capital of france is paris", SENTENCE, "bananas are yellow", "", "zzz"]
    vectors = np.asarray(local_embeddings.encode(str(path), texts))
    wanted = np.asarray([plain_bert(path, text) for text in texts])
    assert vectors.shape == (6, 12)
    assert np.abs(vectors - wanted).max() < 1e-5
    assert local_embeddings.chunks(str(path), SENTENCE) == [" ".join(WORDS[:10]), " ".join(WORDS[10:])]


def test_texts_are_batched_by_length_within_the_token_budget() -> None:
    lengths = [300, 5, 40, 6, 41, 7]
    assert bert._batches(lengths, budget=100) == [[1, 3, 5], [2, 4], [0]]  # one text past the budget alone


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"model_type": "roberta"}, "model_type 'roberta' is not BERT"),
        ({"hidden_act": "gelu_new"}, "hidden_act 'gelu_new' is not gelu"),
        ({"position_embedding_type": "relative_key"}, "relative_key position embeddings"),
        ({"pooling": "max_tokens"}, "pooling ['max_tokens'], not mean or cls alone"),
        ({"modules": ["Transformer", "Pooling", "Dense"]}, "modules ['Transformer', 'Pooling', 'Dense']"),
    ],
)
def test_a_model_it_would_run_wrong_is_refused_saying_why(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    pooling = change.pop("pooling", "mean_tokens")
    modules = change.pop("modules", [])
    path = tiny_bert(tmp_path / "other", pooling, **change)
    (path / "modules.json").write_text(
        json.dumps([{"type": f"sentence_transformers.models.{m}"} for m in modules])
    )
    assert bert.refusal(path) == said
