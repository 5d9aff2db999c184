"""Semantic similarity through the real embedding door: the fake server's OpenAI embeddings endpoint
(bag-of-words vectors) and the bundled local model."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.cache import Cache
from evalframe.models.context import Context
from evalframe.models.steps import Stats
from evalframe.results.scores import ScoreResult
from evalframe.run import pipeline
from evalframe.scorers.semantic_similarity import SemanticSimilarity
from tests.conftest import compose
from tests.testserver import FakeLLMServer


def row(truth: str | None, i: int = 0) -> Row:
    return Row(id=str(i), input="q", ground_truth=truth, output=None, line=i + 1)


def score(scorer: SemanticSimilarity, pairs: Sequence[tuple[str | None, str]]) -> list[float]:
    items = [(row(truth, i), output) for i, (truth, output) in enumerate(pairs)]
    results = asyncio.run(scorer.score(items, Context(limiter=asyncio.Semaphore(4))))
    return [r.score for r in results]


def remote(server: FakeLLMServer, **options: Any) -> SemanticSimilarity:
    # Behind an api_base a model's price is unknown: priced as text-embedding-3-small is, in the config.
    return SemanticSimilarity(
        models=["openai/text-embedding-3-small"],
        api_base=server.openai_base,
        **{"input_cost_per_token": 2e-8, **options},
    )


def test_identical_texts_score_one_and_disjoint_texts_zero(judge_server: FakeLLMServer) -> None:
    scores = score(
        remote(judge_server), [("Paris is the capital", "Paris is the capital"), ("red apples", "blue sky")]
    )
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] < 0.5


def test_all_texts_are_embedded_in_few_batched_calls(judge_server: FakeLLMServer) -> None:
    pairs = [(f"truth {i}", f"output {i}") for i in range(50)]
    score(remote(judge_server, batch_size=40), pairs)
    embedding_calls = [r for r in judge_server.requests if r.protocol == "embeddings"]
    assert len(embedding_calls) == 3  # 100 distinct texts in batches of 40
    assert sum(len(r.inputs) for r in embedding_calls) == 100


def test_threshold_turns_scores_into_pass_fail(judge_server: FakeLLMServer) -> None:
    scores = score(remote(judge_server, threshold=0.8), [("a b c d", "a b c d"), ("a b c d", "a x y z")])
    assert scores == [1.0, 0.0]


def test_per_model_scores_are_kept_and_aggregated(judge_server: FakeLLMServer) -> None:
    scorer = SemanticSimilarity(
        models=["openai/text-embedding-3-small", "openai/text-embedding-3-large"],
        api_base=judge_server.openai_base,
        aggregate="min",
    )
    [result] = asyncio.run(scorer.score([(row("a b c"), "a b d")], Context(limiter=asyncio.Semaphore(2))))
    assert set(result.details["per_model"]) == {
        "openai/text-embedding-3-small",
        "openai/text-embedding-3-large",
    }
    assert result.score == pytest.approx(min(result.details["per_model"].values()), abs=1e-4)


def test_empty_output_and_missing_truth_score_zero_with_a_reason(judge_server: FakeLLMServer) -> None:
    scorer = remote(judge_server, require_ground_truth=False)
    items = [(row("truth"), "  "), (row(None, 1), "output"), (row("", 2), "output")]
    results = asyncio.run(scorer.score(items, Context(limiter=asyncio.Semaphore(2))))
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert "output is empty" in results[0].reason and "No ground truth" in results[1].reason


@pytest.mark.usefixtures("quick_retries")
def test_a_failing_embedding_model_leaves_items_unscored_not_zero() -> None:
    """Also: the request goes out 1 + model.max_retries times (3 by default). Before: 12 times, and
    8.8 s, as OpenAI's client retried each of ours twice more with its own backoff."""
    with FakeLLMServer(error_rate=1.0, error_statuses=(500,)) as broken:
        scorer = SemanticSimilarity(models=["openai/text-embedding-3-small"], api_base=broken.openai_base)
        [result] = asyncio.run(scorer.score([(row("a"), "b")], Context(limiter=asyncio.Semaphore(1))))
        assert broken.faults == 1 + 3
    assert not result.scored and result.error and "InternalServerError" in result.error


def test_what_a_failed_window_paid_for_counts(judge_server: FakeLLMServer, monkeypatch: Any) -> None:
    """One batch fails, the other was answered and billed: the items are unscored, the bill is kept."""
    from evalframe.models.loader import lib

    litellm = lib()
    real = litellm.aembedding

    async def second_batch_lost(*args: Any, **kwargs: Any) -> Any:
        if "lost" in kwargs["input"]:
            raise RuntimeError("the batch was lost")
        return await real(*args, **kwargs)

    monkeypatch.setattr(litellm, "aembedding", second_batch_lost)
    items = [(row("a b c"), "a b d"), (row("lost", 1), "x y")]
    ctx = Context(limiter=asyncio.Semaphore(2))
    results = asyncio.run(remote(judge_server, batch_size=2).score(items, ctx))
    assert not any(r.scored for r in results) and "the batch was lost" in (results[0].error or "")
    assert ctx.stats.cost > 0 and sum(r.usage.cost for r in results) == pytest.approx(ctx.stats.cost)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"models": []}, "models is empty"),
        ({"aggregate": "avg"}, "aggregate='avg'"),
        ({"threshold": 2}, "between 0 and 1"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SemanticSimilarity(**options)  # type: ignore[arg-type]


@pytest.mark.slow
def test_local_model_ranks_paraphrase_above_unrelated() -> None:
    scorer = SemanticSimilarity()  # local/all-MiniLM-L6-v2, offline
    paraphrase, unrelated = score(
        scorer,
        [
            ("The capital of France is Paris.", "Paris is France's capital city."),
            ("The capital of France is Paris.", "Bananas are rich in potassium."),
        ],
    )
    assert paraphrase > 0.8 > 0.3 > unrelated


def test_a_missing_embedding_key_is_found_before_any_call() -> None:
    scorer = SemanticSimilarity(models=["openai/text-embedding-3-small"])
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY not set.*local/all-MiniLM-L6-v2"):
        scorer.validate(row("x"))
    SemanticSimilarity().validate(row("x"))  # the local model needs nothing


@pytest.mark.slow
def test_texts_longer_than_the_window_are_chunked_and_averaged_not_truncated() -> None:
    from evalframe.models import local_embeddings
    from evalframe.models.llm import LLM
    from evalframe.models.settings import ModelSettings
    from evalframe.models.steps import Stats

    fact = "The capital of France is Paris."
    long = "Bananas are yellow fruit rich in potassium. " * 60 + fact  # 487 tokens; the window is 254
    pieces = local_embeddings.chunks("all-MiniLM-L6-v2", long)
    assert len(pieces) == 2 and "paris" in pieces[-1].lower() and "paris" not in pieces[0].lower()
    door = LLM(ModelSettings("local/all-MiniLM-L6-v2"), asyncio.Semaphore(2), Cache("off"), Stats())
    matrix = asyncio.run(door.embedder._embed([long, fact, pieces[0]], 256, {}))
    chunked, target, first_window_only = matrix
    assert chunked @ target > first_window_only @ target + 0.02  # the end of the text counts
    assert np.linalg.norm(chunked) == pytest.approx(1.0)


def test_a_rerun_embeds_nothing_and_the_embedding_cost_counts(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    """Embeddings go through the model door like judge replies: cached (vectors and each pair's
    cosine), and paid for in the run's totals, at the price the config gives."""
    pairs = [("Paris is the capital", "The capital is Paris"), ("red apples", "blue sky")]
    items = [(row(truth, i), output) for i, (truth, output) in enumerate(pairs)]
    scorer = remote(judge_server)

    def run() -> tuple[list[ScoreResult], Stats]:
        ctx = Context(limiter=asyncio.Semaphore(2), cache=Cache("readwrite", tmp_path))
        return asyncio.run(scorer.score(items, ctx)), ctx.stats

    first, paid = run()
    assert judge_server.count() == 1 and paid.calls == 1  # 4 texts, one batch
    assert paid.cost > 0 and sum(r.usage.cost for r in first) == pytest.approx(paid.cost)
    assert all(r.usage.prompt_tokens > 0 for r in first)  # each item carries its texts' share
    billed = sum(max(1, (len(t) + 3) // 4) for pair in pairs for t in pair)  # the fake's token count
    assert sum(r.usage.prompt_tokens for r in first) == billed  # the batch's tokens, none lost to rounding
    assert paid.cost == pytest.approx(billed * 2e-8, rel=1e-12)
    judge_server.reset()
    again, free = run()
    assert judge_server.count() == 0 and free.calls == 0 and free.hits == 2 and free.cost == 0
    assert [r.score for r in again] == [r.score for r in first]
    assert all(r.usage.cost == 0 and r.steps[0].cached for r in again)


def test_jobs_scoring_the_same_window_at_once_embed_it_once(tmp_path: Path) -> None:
    """Two jobs of a parallel sweep on one cache directory (two caches, as two processes hold them)
    score the same items at once: one embeds, the other waits for its cosines; no claim is left."""
    items = [(row(truth, i), output) for i, (truth, output) in enumerate([("a b c", "a b d"), ("x y", "z")])]

    async def both(scorer: SemanticSimilarity) -> tuple[list[list[ScoreResult]], list[Stats]]:
        jobs = [Context(limiter=asyncio.Semaphore(2), cache=Cache("readwrite", tmp_path)) for _ in range(2)]
        return list(await asyncio.gather(*(scorer.score(items, job) for job in jobs))), [
            j.stats for j in jobs
        ]

    with FakeLLMServer(latency=0.5) as slow:
        (first, second), stats = asyncio.run(both(remote(slow)))
        assert slow.count() == 1
    assert sorted(s.calls for s in stats) == [0, 1] and sorted(s.hits for s in stats) == [0, 2]
    assert [r.score for r in first] == [r.score for r in second]
    db = sqlite3.connect(tmp_path / "replies.sqlite")
    assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)


@pytest.mark.slow
def test_a_second_default_run_makes_no_embedding_call(tmp_path: Path) -> None:
    """`python -m evalframe` twice (the bundled sample, local embeddings): the second run embeds nothing."""
    config = compose(["tracking=none"])
    first, _ = pipeline.evaluate(config, tmp_path / "first")
    second, _ = pipeline.evaluate(config, tmp_path / "second")
    assert first.stats.calls > 0 and second.stats.calls == 0 and second.stats.hits > 0
    assert second.means == first.means


def test_each_number_is_in_the_reason_once(judge_server: FakeLLMServer) -> None:
    """Before: "Cosine similarity 0.87 (openai/text-embedding-3-small: 0.87)."."""
    items = [(row("a b c"), "a b d")]
    [one] = asyncio.run(remote(judge_server).score(items, Context(limiter=asyncio.Semaphore(2))))
    assert one.reason == f"Cosine similarity {one.score:.2f} (openai/text-embedding-3-small)."
    two = SemanticSimilarity(
        models=["openai/text-embedding-3-small", "openai/text-embedding-3-large"],
        api_base=judge_server.openai_base,
    )
    [both] = asyncio.run(two.score(items, Context(limiter=asyncio.Semaphore(2))))
    small, large = (both.details["cosine"][m] for m in two.models_)
    assert both.reason == (
        f"Cosine similarity {both.score:.2f} (mean of openai/text-embedding-3-small: {small:.2f}, "
        f"openai/text-embedding-3-large: {large:.2f})."
    )
