"""The RAG and agent judges as a user runs them: the five scorers on the bundled RAG sample, over HTTP,
against a judge that answers anything its reply schemas allow (the test server's constrained decoder),
with every judge call counted at the server and per item."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.cli.test_rescore import KEY, mlflow_runs
from tests.conftest import fake_model, run_cli
from tests.testserver import FakeLLMServer, constrained_decoder

pytestmark = pytest.mark.slow

SCORERS = ["faithfulness", "context_precision", "context_recall", "hallucination", "tool_call_accuracy"]
# Requests one item may send per judge (a step served by the cache or shared with an identical
# request costs none): claims + one verdict call; one relevance call; ground-truth statements + one
# verdict call; no call for tool calls.
MOST_CALLS = {"faithfulness": 2, "hallucination": 2, "context_precision": 1, "context_recall": 2}


@pytest.mark.parametrize("seed", [1, 2])
def test_the_rag_sample_runs_with_no_unscored_item_and_the_calls_each_judge_is_allowed(
    server: FakeLLMServer, tmp_path: Path, seed: int
) -> None:
    server.reset()
    server.responder = constrained_decoder(seed)
    scorers = f"scorer=[{','.join(SCORERS)}]"
    done = run_cli([scorers, "dataset=rag_sample", *fake_model(server)], cwd=tmp_path, env=KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr

    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(items) == 20
    sent: Counter[str] = Counter()
    for item in items:
        for name in SCORERS:
            result = item["scores"][name]
            assert result["error"] is None, (item["id"], name, result["reason"])  # none failed
            asked = [s for s in result["steps"] if not s["cached"]]
            assert len(result["steps"]) <= MOST_CALLS.get(name, 0), (item["id"], name)
            assert all(s["attempts"] == 1 for s in asked)  # a schema-true reply is never asked again
            sent[name] += len(asked)
    # Every request the server answered is a step of one item: nothing sent that the results lack.
    assert server.count() == sum(sent.values()) > 0
    # Hallucination asks what faithfulness asks (the same prompts): beside it, it sends nothing.
    assert sent["hallucination"] == 0 and sent["tool_call_accuracy"] == 0

    [run] = mlflow_runs(tmp_path)
    for name in SCORERS:
        assert run.data.metrics[f"{name}/unscored"] == 0
    # Items with nothing to measure (an empty output, "I don't know", no contexts) are counted apart.
    assert run.data.metrics["faithfulness/not_applicable"] >= 1
    assert "hallucination (lower is better)" in done.stdout
