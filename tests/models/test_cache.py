"""The judge cache: re-runs and penalty sweeps cost no calls; anything that can change a reply misses."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalframe.models.cache import Cache, Layered
from evalframe.models.llm import LLM, response_format
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message, Stats, StepResult
from evalframe.paths import PROMPTS_DIR, SAMPLE_DATASET
from evalframe.results.run_result import RunResult
from evalframe.run import pipeline
from evalframe.scorers.answer_similarity import SemanticUnits
from tests.conftest import Judge, compose, fake_model, run_cli
from tests.scripted import NAME, ScriptedModel
from tests.testserver import FakeLLMServer


def evaluate(server: Judge, tmp_path: Path, *extra: str) -> RunResult:
    overrides = ["scorer=answer_similarity", *fake_model(server), "tracking=none", "dataset.limit=8", *extra]
    return pipeline.evaluate(compose(overrides), tmp_path / "out")[0]


def scores(result: RunResult) -> list[float]:
    return [i.scores["answer_similarity"].score for i in result.items]


def test_a_rerun_makes_no_calls_and_records_no_cost(scripted: ScriptedModel, tmp_path: Path) -> None:
    first = evaluate(scripted, tmp_path)
    calls = scripted.count()
    assert calls > 0 and first.usage.cost > 0
    second = evaluate(scripted, tmp_path)
    assert scripted.count() == calls  # not one more request
    assert scores(second) == scores(first)
    assert second.usage.cost == 0 and second.usage.prompt_tokens == 0
    steps = [s for i in second.items for s in i.scores["answer_similarity"].steps]
    assert steps and all(s.cached for s in steps)


@pytest.mark.parametrize(
    ("mode", "calls_again", "stores"), [("off", True, False), ("write", True, True), ("read", False, False)]
)
def test_cache_modes(
    mode: str, calls_again: bool, stores: bool, scripted: ScriptedModel, tmp_path: Path
) -> None:
    evaluate(scripted, tmp_path, "dataset.limit=2")  # fills the cache
    scripted.reset()
    evaluate(scripted, tmp_path, f"cache.mode={mode}", "dataset.limit=3")  # one new row
    assert (scripted.count() > 3) == calls_again  # read: only the new row's 3 calls
    scripted.reset()
    evaluate(scripted, tmp_path, "dataset.limit=3")  # back to readwrite: was the new row stored?
    assert scripted.count() == (0 if stores else 3)


def test_a_new_target_pays_only_for_the_output_side(scripted: ScriptedModel, tmp_path: Path) -> None:
    evaluate(scripted, tmp_path)
    rows = [json.loads(line) for line in SAMPLE_DATASET.read_text().splitlines()[:8]]
    new = tmp_path / "new.jsonl"
    new.write_text(
        "".join(json.dumps({**r, "output": f"{r['output']} Also, water is wet."}) + "\n" for r in rows)
    )
    scripted.reset()
    evaluate(scripted, tmp_path, "dataset=jsonl", f"dataset.path={new}")
    assert scripted.count("SemanticUnits") == 8  # the new outputs; ground truths come from the cache
    assert scripted.count("Analysis") == 8
    assert scripted.count() / 8 <= 2


def test_editing_a_prompt_invalidates_exactly_that_step(scripted: ScriptedModel, tmp_path: Path) -> None:
    mine = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR / "answer_similarity", mine)
    evaluate(scripted, tmp_path, f"scorers.answer_similarity.prompt_dir={mine}")
    (mine / "analyze.j2").write_text((mine / "analyze.j2").read_text() + "\nBe strict.")
    scripted.reset()
    evaluate(scripted, tmp_path, f"scorers.answer_similarity.prompt_dir={mine}")
    assert scripted.count("SemanticUnits") == 0
    assert scripted.count("Analysis") == 8  # every row of the 8 has an output to analyse


@pytest.mark.parametrize(
    "change",
    ["model.name=openai/gpt-4o", "model.temperature=0.5", "model.max_tokens=100", "+model.extra.seed=1"],
)
def test_the_judge_model_and_its_parameters_are_part_of_the_key(
    change: str, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    evaluate(judge_server, tmp_path, "dataset.limit=2")
    calls = judge_server.count()
    evaluate(judge_server, tmp_path, "dataset.limit=2", change)
    assert judge_server.count() == 2 * calls


def test_timeout_and_retries_are_not(scripted: ScriptedModel, tmp_path: Path) -> None:
    evaluate(scripted, tmp_path, "dataset.limit=2")
    calls = scripted.count()
    evaluate(
        scripted, tmp_path, "dataset.limit=2", "model.timeout=99", "model.max_retries=5", "concurrency=1"
    )
    assert scripted.count() == calls


def test_errors_and_unparseable_replies_are_not_cached(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = lambda request: "not json"
    broken = evaluate(scripted, tmp_path, "dataset.limit=2", "model.reply_retries=0")
    assert broken.summaries["answer_similarity"].unscored == 2
    from tests.fake_judge import judge

    scripted.responder = judge
    scripted.reset()
    fixed = evaluate(scripted, tmp_path, "dataset.limit=2", "model.reply_retries=0")
    assert scripted.count() > 0 and fixed.summaries["answer_similarity"].scored == 2


@pytest.mark.slow
def test_several_processes_write_at_once(tmp_path: Path) -> None:
    writer = (
        "import sys; from evalframe.models.cache import Cache; c = Cache('readwrite', sys.argv[1]);"
        "[c.put(f'{sys.argv[2]}-{i}', {'raw': str(i)}) for i in range(300)]"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", writer, str(tmp_path), name], stderr=subprocess.PIPE, text=True
        )
        for name in "abcd"
    ]
    outcomes = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert [code for code, _ in outcomes] == [0, 0, 0, 0], outcomes
    cache = Cache("read", tmp_path)
    assert all(cache.get(f"{name}-{i}") == {"raw": str(i)} for name in "abcd" for i in range(300))


@pytest.mark.slow
def test_a_nine_point_penalty_sweep_makes_as_many_calls_as_one_run(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    common = ["scorer=answer_similarity", *fake_model(judge_server), "tracking=none"]
    (tmp_path / "one").mkdir()
    (tmp_path / "sweep").mkdir()
    one = run_cli(common, cwd=tmp_path / "one", env={"EVALFRAME_CACHE_DIR": str(tmp_path / "c1")})
    assert one.returncode == 0, one.stderr
    single = judge_server.count()
    judge_server.reset()
    sweep = run_cli(
        ["-m", *common, "penalties.missing=0.05,0.15,0.3", "penalties.contradiction=0.5,1.0,1.5"],
        cwd=tmp_path / "sweep",
        env={"EVALFRAME_CACHE_DIR": str(tmp_path / "c2")},
    )
    assert sweep.returncode == 0, sweep.stderr
    assert len(re.findall(r"^job \d: ", sweep.stdout, re.M)) == 9  # one line per job
    assert judge_server.count() == single > 0
    results = sorted((tmp_path / "sweep").glob("multirun/*/*/*/results.jsonl"))
    assert len(results) == 9


def test_a_layered_cache_serves_a_run_s_replies_first_and_asks_for_the_rest(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """`evalframe align run_id=`'s cache: a reply the run stored is served, its failure is asked again
    (the run could not use it), a request it never made goes to the model (no ReplayMiss) and into the
    disk cache; the run's replies are not copied to disk."""
    scripted.responder = lambda request: {"units": ["asked anew"]}
    asked = [{"role": "user", "content": "Units of: Paris is the capital of France."}]
    failed = [{"role": "user", "content": "Units of: something the run's judge could not answer."}]
    new = [{"role": "user", "content": "Units of: a prompt the run never sent."}]
    settings = ModelSettings(name=NAME)
    key = LLM(settings, asyncio.Semaphore(1), Cache("off"), Stats()).replies.key
    fmt = response_format(SemanticUnits)
    stored: dict[str, dict[str, Any]] = {
        key(asked, fmt): {"raw": '{"units": ["Paris is the capital"]}', "error": None},
        key(failed, fmt): {"raw": "{oops", "error": "invalid reply"},
    }
    stats = Stats()
    llm = LLM(settings, asyncio.Semaphore(1), Layered(stored, "readwrite", tmp_path / "c"), stats)

    def ask(messages: list[Message]) -> StepResult:
        return asyncio.run(llm.structured("extract", messages, SemanticUnits))

    assert ask(asked).reply == {"units": ["Paris is the capital"]} and scripted.requests == []
    assert ask(failed).reply == {"units": ["asked anew"]} and ask(new).reply == {"units": ["asked anew"]}
    assert len(scripted.requests) == stats.calls == 2 and stats.hits == 1
    disk = Cache("read", tmp_path / "c")
    assert disk.get(key(failed, fmt)) and disk.get(key(new, fmt)) and disk.get(key(asked, fmt)) is None
