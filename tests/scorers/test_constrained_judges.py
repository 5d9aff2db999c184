"""A judge that follows the reply schema exactly, knowing nothing of the prompt (the local server as a
constrained decoder), scores every sample item with every judge scorer, on the first attempt of each
step, at the scorer's minimum number of calls (counted at the server)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evalframe.models.steps import StepResult
from evalframe.run import pipeline
from evalframe.scorers.answer_similarity import analysis_reply
from evalframe.scorers.ground_truth_similarity import comparisons_reply
from tests.conftest import compose, fake_model
from tests.testserver import FakeLLMServer, constrained_decoder, random_instance

SAMPLE_ROWS = 28

# A custom Judge of each output form (factuality is the choice form), as a user would configure it.
FORMS: dict[str, dict[str, Any]] = {
    "choice": {"type": "choice", "choices": {"subset": 0.4, "same": 1.0, "disagree": 0.0}},
    "number": {"type": "number", "min": 1, "max": 5},
    "verdicts": {"type": "verdicts", "verdicts": {"yes": 1.0, "no": 0.0, "unsure": 0.5}},
}
SCORERS = ["answer_similarity", "answer_relevancy", "ground_truth_similarity", "factuality"]
CASES = [*SCORERS, *(f"judge:{form}" for form in FORMS)]


def config(server: FakeLLMServer, case: str, option: str = "gpt") -> dict[str, Any]:
    scorer = "factuality" if case.startswith("judge:") else case
    cfg = compose([f"scorer={scorer}", *fake_model(server, option), "tracking=none", "concurrency=4"])
    if case.startswith("judge:"):
        cfg["scorers"]["factuality"]["output"] = FORMS[case.split(":")[1]]
    return cfg


@pytest.fixture
def decoder() -> Any:
    with FakeLLMServer(responder=constrained_decoder(seed=7)) as server:
        yield server


def asked(steps: list[StepResult]) -> int:
    return sum(s.attempts for s in steps)


@pytest.mark.parametrize("case", CASES)
def test_every_sample_item_is_scored_first_time(decoder: FakeLLMServer, case: str, tmp_path: Path) -> None:
    result, code = pipeline.evaluate(config(decoder, case), tmp_path)
    name = "factuality" if case.startswith("judge:") else case
    summary = result.summaries[name]
    assert (summary.scored, summary.unscored, code) == (SAMPLE_ROWS, 0, 0)
    steps = [s for item in result.items for s in item.scores[name].steps]
    assert all(s.attempts <= 1 for s in steps)  # no validation retry, no transport retry
    # every request the server saw is a step's first and only attempt, and no step was asked twice
    assert not any(any(m["role"] == "assistant" for m in r.messages) for r in decoder.requests)
    assert decoder.count() == asked(steps) == len({s.key for s in steps if s.attempts})


@pytest.mark.parametrize("option", ["claude", "gemini", "ollama"])
@pytest.mark.slow
def test_the_same_on_the_other_wires(decoder: FakeLLMServer, option: str, tmp_path: Path) -> None:
    for case in ("answer_similarity", "ground_truth_similarity", "answer_relevancy"):
        decoder.reset()
        result, code = pipeline.evaluate(config(decoder, case, option), tmp_path / case)
        assert (result.summaries[case].unscored, code) == (0, 0), option
        assert not any(any(m["role"] == "assistant" for m in r.messages) for r in decoder.requests)


def test_a_range_anthropic_does_not_enforce_is_still_validated(
    decoder: FakeLLMServer, tmp_path: Path
) -> None:
    """On Anthropic's wire LiteLLM moves minimum/maximum into the description, so a schema-following
    judge can answer out of range: pydantic catches it and the reply is asked again with the error."""
    result, _ = pipeline.evaluate(config(decoder, "judge:number", "claude"), tmp_path)
    corrections = [r for r in decoder.requests if any(m["role"] == "assistant" for m in r.messages)]
    assert corrections and "rating" in corrections[0].messages[-1]["content"]
    assert result.summaries["factuality"].unscored > 0  # random numbers in -1000..1000 rarely land in 1..5


def test_random_instances_are_valid_and_vary() -> None:
    rng = random.Random(0)
    for schema in (analysis_reply(3, 2).model_json_schema(), comparisons_reply(2, 4).model_json_schema()):
        instances = [random_instance(schema, schema, rng) for _ in range(50)]
        for instance in instances:
            jsonschema.validate(instance, schema)
        assert len({json.dumps(i, sort_keys=True) for i in instances}) > 40
    bounded = {
        "type": "array",
        "items": {"type": "integer", "minimum": 2, "maximum": 4},
        "minItems": 1,
        "maxItems": 3,
    }
    lists = [random_instance(bounded, bounded, rng) for _ in range(200)]
    assert {len(x) for x in lists} == {1, 2, 3} and {n for x in lists for n in x} == {2, 3, 4}
    nullable = {"anyOf": [{"type": "integer", "enum": [0, 1]}, {"type": "null"}]}
    assert {random_instance(nullable, nullable, rng) for _ in range(100)} == {0, 1, None}


@pytest.mark.slow
def test_the_readme_commands(tmp_path: Path) -> None:
    """`python -m tests.testserver --constrained --seed 7` (what bench/constrained_judges.py starts) and
    the bench itself, whose figures the README quotes (--checkout given: the README's "before" command
    runs another checkout the same way)."""
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    bench = subprocess.run(
        [sys.executable, "bench/constrained_judges.py", "--checkout", str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bench.returncode == 0, bench.stderr
    rows = {line[:26].strip(): line[26:].split() for line in bench.stdout.splitlines()[2:]}
    assert set(rows) == {
        "answer_similarity",
        "answer_relevancy",
        "ground_truth_similarity",
        "factuality (choice)",
        "judge (number)",
        "judge (verdicts)",
    }
    for name, (items, calls, per_item, retries, unscored, code) in rows.items():
        assert (items, retries, unscored, code) == ("28", "0", "0", "0"), name
        assert float(per_item) == pytest.approx(int(calls) / 28, abs=0.01)
    assert rows["factuality (choice)"][1] == "26"  # one call per item with an output (2 are empty)
