"""`from evalframe import evaluate`: the Python API runs the CLI's pipeline on in-memory data and code."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalframe import Evaluation, evaluate, evaluate_async
from evalframe.data.rows import Row
from evalframe.errors import ConfigError, DataError
from evalframe.models.context import Context
from evalframe.results.scores import ScoreResult
from evalframe.run import pipeline
from evalframe.scorers.base import ItemScorer
from evalframe.scorers.reference import ExactMatch
from tests.conftest import Judge, compose, fake_model
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer

ROWS = [
    {"id": "fr", "input": "What is the capital of France?", "ground_truth": "Paris"},
    {"id": "de", "input": "What is the capital of Germany?", "ground_truth": "Berlin"},
    {"id": "it", "input": "What is the capital of Italy?", "ground_truth": "Rome"},
    {"id": "es", "input": "What is the capital of Spain?", "ground_truth": "Madrid"},
]
CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome"}


def capital(question: str) -> str:
    return next((city for country, city in CAPITALS.items() if country in question), "I do not know")


def judge(server: Judge) -> dict[str, Any]:
    """The `model=` argument for the fake judge: the scripted model in process, or the gpt preset's
    model over HTTP to the local server."""
    if isinstance(server, FakeLLMServer):
        return {"name": "openai/gpt-4o-mini", "api_base": server.openai_base, "timeout": 10}
    return {"name": "scripted/judge", "api_key_env": None, "timeout": 10}


class Counting:
    """A target that counts its calls and the most calls in flight at once."""

    def __init__(self, delay: float = 0.0):
        self.calls, self.active, self.peak, self.delay = 0, 0, 0, delay
        self.lock = threading.Lock()

    def __call__(self, question: str) -> str:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        return capital(question)


# --- data, target, results -------------------------------------------------------------------------


@pytest.mark.slow
def test_list_of_dicts_and_a_function(tmp_path: Path) -> None:
    result = evaluate(ROWS, ["exact_match", "token_f1"], target=capital, output_dir=tmp_path / "run")
    assert isinstance(result, Evaluation)
    assert result.means == {"exact_match": 0.75, "token_f1": 0.75}
    assert result.mean("exact_match") == 0.75
    assert result.summaries["exact_match"].scored == 4
    items = result.items
    assert list(items["id"]) == ["fr", "de", "it", "es"]
    assert list(items["output"]) == ["Paris", "Berlin", "Rome", "I do not know"]
    assert {"input", "ground_truth", "exact_match/score", "exact_match/reason", "token_f1/error"} <= {*items}
    assert list(items["exact_match/score"]) == [1.0, 1.0, 1.0, 0.0]
    assert result.run_id is None and result.exit_code == 0
    # Every item is journaled in the run directory, as the CLI's runs are.
    assert result.run_dir == tmp_path / "run"
    assert len(result.results_file.read_text().splitlines()) == 4
    manifest = json.loads((result.run_dir / "run.json").read_text())
    assert manifest["status"] == "finished" and manifest["config"]["target"]["fn"].endswith(":capital")
    changed = [*ROWS[:3], {**ROWS[3], "ground_truth": "Madrid, Spain"}]
    other = evaluate(changed, "exact_match", target=capital, output_dir=tmp_path / "other")
    assert other.config["dataset"]["digest"] != result.config["dataset"]["digest"]  # never resumes this run
    text = str(result)
    assert "exact_match" in text and "0.750" in text and str(result.results_file) in text
    assert repr(result) == text
    with pytest.raises(KeyError, match="it ran exact_match, token_f1"):
        result.mean("answer_similarity")


@pytest.mark.slow
def test_the_api_prints_nothing_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = evaluate(ROWS, "exact_match", target=capital, output_dir=tmp_path / "quiet")
    assert capsys.readouterr().out == ""
    print(result)  # the summary, once
    assert capsys.readouterr().out.count("exact_match") == 1
    evaluate(ROWS, "exact_match", target=capital, output_dir=tmp_path / "loud", verbose=True)
    out = capsys.readouterr().out
    assert "evalframe: 4 items" in out and "exact_match" in out


def test_dataframe_with_a_column_mapping(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "question": ["What is 6 x 7?", "Capital of France?", "Unknown?"],
            "expected": [42, None, None],
            "answer": ["42", "Paris", "no idea"],
        }
    )
    result = evaluate(
        frame,
        {"exact_match": {"require_ground_truth": False}},
        columns={"input": "question", "ground_truth": "expected", "output": "answer"},
        output_dir=tmp_path,
    )
    items = result.items
    assert list(items["id"]) == ["1", "2", "3"]  # no id column: the record number, as a file's line
    assert items["ground_truth"][0] == "42" and items["ground_truth"].isna()[1]  # number -> text, NaN -> none
    assert list(items["exact_match/score"]) == [1.0, 0.0, 0.0]
    assert "No ground truth" in items["exact_match/reason"][1]
    assert result.config["dataset"]["columns"]["input"] == "question"


def test_recorded_outputs_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({**r, "output": capital(r["input"])}) + "\n" for r in ROWS))
    result = evaluate(str(path), "exact_match", output_dir=tmp_path / "run", limit=3)
    assert result.mean("exact_match") == 1.0 and len(result.items) == 3
    assert result.config["dataset"]["path"] == str(path) and result.config["dataset"]["format"] == "jsonl"


def test_the_bundled_sample_and_cli_overrides(tmp_path: Path) -> None:
    result = evaluate(None, "token_f1", overrides=["dataset.limit=5"], output_dir=tmp_path)
    assert len(result.items) == 5 and result.config["dataset"]["name"] == "sample"


def test_async_target_under_the_concurrency_limit(tmp_path: Path) -> None:
    active = peak = 0

    async def agent(question: str) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return capital(question)

    rows = [{**r, "id": f"{r['id']}{n}"} for n in range(3) for r in ROWS]
    result = evaluate(rows, "exact_match", target=agent, concurrency=3, output_dir=tmp_path)
    assert peak == 3
    assert result.summaries["exact_match"].scored == 12 and result.mean("exact_match") == 0.75


def test_sync_target_runs_in_threads_under_the_concurrency_limit(tmp_path: Path) -> None:
    agent = Counting(delay=0.02)
    rows = [{**r, "id": f"{r['id']}{n}"} for n in range(3) for r in ROWS]
    evaluate(rows, "exact_match", target=agent, concurrency=4, output_dir=tmp_path)
    assert agent.calls == 12 and agent.peak == 4


class Brevity(ItemScorer):
    """A user's own scorer: 1.0 for answers of at most `words` words."""

    require_ground_truth = False

    def __init__(self, words: int = 3):
        self.words = words

    async def score_item(self, row: Row, output: str, ctx: Context) -> ScoreResult:
        n = len(output.split())
        return ScoreResult(float(n <= self.words), f"{n} words (limit {self.words})")


def test_scorer_objects_beside_scorer_names(tmp_path: Path) -> None:
    result = evaluate(
        ROWS,
        ["token_f1", Brevity(words=2), ExactMatch()],
        target=capital,
        output_dir=tmp_path,
    )
    assert result.means == {"token_f1": 0.75, "brevity": 0.75, "exact_match": 0.75}
    assert result.items["brevity/reason"][3] == "4 words (limit 2)"
    assert result.config["scorers"]["brevity"] == {"_target_": "tests.api.test_api.Brevity", "words": 2}
    scorers = {"short": Brevity(words=9), "token_f1": {}}
    named = evaluate(ROWS, scorers, target=capital, output_dir=tmp_path / "2")
    assert named.means == {"token_f1": 0.75, "short": 1.0}
    alone = evaluate(ROWS, Brevity(), target=capital, output_dir=tmp_path / "3")
    assert alone.means == {"brevity": 0.75} and list(alone.config["scorers"]) == ["brevity"]
    with pytest.raises(ConfigError, match="two scorers are called 'exact_match'"):
        evaluate(ROWS, ["exact_match", ExactMatch()], target=capital)


def test_resume_finishes_a_run_without_redoing_items(tmp_path: Path) -> None:
    def agent() -> Counting:  # the same agent in both runs (a changed function's code is not resumed)
        counting = Counting()
        counting.__module__, counting.__qualname__ = capital.__module__, capital.__qualname__  # type: ignore[attr-defined]
        return counting

    first = evaluate(ROWS, "exact_match", target=agent(), output_dir=tmp_path / "run")
    # As if the run had been killed after two items.
    lines = first.results_file.read_text().splitlines()
    first.results_file.write_text("\n".join(lines[:2]) + "\n")
    manifest = json.loads((first.run_dir / "run.json").read_text())
    (first.run_dir / "run.json").write_text(json.dumps({**manifest, "status": "running"}))
    second = agent()
    resumed = evaluate(ROWS, "exact_match", target=second, resume=first.run_dir)
    assert second.calls == 2 and resumed.run_dir == first.run_dir
    assert resumed.mean("exact_match") == 0.75 and len(resumed.results_file.read_text().splitlines()) == 4


@pytest.mark.slow
def test_default_run_directory_is_outputs_date_time_and_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    a = evaluate(ROWS, "exact_match", target=capital)
    b = evaluate(ROWS, "exact_match", target=capital)
    assert a.run_dir != b.run_dir
    assert a.run_dir.parent.parent == tmp_path / "outputs"
    assert a.results_file.is_file() and b.results_file.is_file()
    assert not (tmp_path / "mlflow.db").exists()  # tracking is off unless asked for


# --- bad input: a clear error before any call ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"input": "a"}, {"question": "b"}], r"data, record 2: no 'input' field .*columns=.*found: questi"),
        ([{"input": "a"}, {"input": "  "}], r"data, record 2: the input \('input'\) is empty"),
        ([{"id": 1, "input": "a"}, {"id": 1, "input": "b"}], r"record 2: id '1' repeats the id of record 1"),
        ([{"input": "a"}, "b"], r"data, record 2: expected a dict \(one per row\), got str"),
        (pd.DataFrame({"input": ["a", None]}), r"DataFrame, record 2: the input \('input'\) is empty"),
        ({"input": ["a"]}, r"data is a dict; pass a list of dicts"),
        ([], r"data has no rows"),
    ],
)
def test_bad_data_is_reported_before_the_target_runs(data: Any, message: str) -> None:
    agent = Counting()
    with pytest.raises(DataError, match=message):
        evaluate(data, "exact_match", target=agent)
    assert agent.calls == 0


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown scorer 'answer_similarty'; choose from .*answer_simi"):
        evaluate(ROWS, "answer_similarty", target=capital)
    preset = r"model='gtp' is neither a preset \(claude, gemini, gpt, local, ollama"
    with pytest.raises(ConfigError, match=preset):
        evaluate(ROWS, "answer_similarity", target=capital, model="gtp")
    with pytest.raises(ConfigError, match=r"penalties='harsh'; choose from default, lenient, strict"):
        evaluate(ROWS, "answer_similarity", target=capital, penalties="harsh")
    with pytest.raises(ConfigError, match=r"target is a int; pass a function"):
        evaluate(ROWS, "exact_match", target=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"config error: .*no_such_key"):
        evaluate(ROWS, "exact_match", target=capital, overrides=["no_such_key=1"])


def test_missing_ground_truth_and_key_stop_before_any_call(scripted: ScriptedModel) -> None:
    agent = Counting()
    rows = [*ROWS, {"id": "xx", "input": "What is the capital of Peru?"}]
    with pytest.raises(DataError, match=r"data, line 5 \(id xx\): no ground_truth, which scorer answer_s"):
        evaluate(rows, "answer_similarity", target=agent, model=judge(scripted))
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        evaluate(ROWS, "answer_similarity", target=agent, model="gpt")
    assert agent.calls == 0 and scripted.count() == 0


# --- the judge: the CLI's config and scores ---------------------------------------------------------


def test_the_api_composes_the_config_the_cli_would(scripted: ScriptedModel, tmp_path: Path) -> None:
    api = evaluate(
        None,
        {"answer_similarity": {"scale": 1.0}},
        model=judge(scripted),
        penalties={"missing": 0.3},
        limit=4,
        output_dir=tmp_path / "api",
    )
    cli = compose(
        [
            "scorer=answer_similarity",
            *fake_model(scripted),
            "tracking=none",
            "penalties.missing=0.3",
            "dataset.limit=4",
            "scorers.answer_similarity.scale=1.0",
        ]
    )
    assert api.config == cli
    cli_result, _ = pipeline.evaluate(cli, tmp_path / "cli")
    assert list(api.items["answer_similarity/score"]) == [
        i.scores["answer_similarity"].score for i in cli_result.items
    ]
    assert api.config["scorers"]["answer_similarity"]["penalties"]["missing"] == 0.3


def test_penalties_and_a_function_under_an_llm_judge(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the runs go to ./outputs/DATE/TIME
    data = [
        {"input": "Capital of France?", "ground_truth": "Paris is the capital of France. It is in Europe."},
        {"input": "Largest planet?", "ground_truth": "Jupiter is the largest planet. It is a gas giant."},
        {"input": "Water boils at?", "ground_truth": "Water boils at 100 °C at sea level."},
    ]
    answers = {
        "Capital of France?": "Paris is the capital of France.",
        "Largest planet?": "Jupiter is the largest planet. It is a gas giant. It has many moons.",
        "Water boils at?": "Water boils at 100 °C at sea level.",
    }

    def agent(question: str) -> str:
        return answers[question]

    means = {
        p: evaluate(data, "answer_similarity", target=agent, model=judge(scripted), penalties=p).mean(
            "answer_similarity"
        )
        for p in ("strict", "default", "lenient")
    }
    assert means["strict"] < means["default"] < means["lenient"]
    calls = scripted.count()
    weighted = evaluate(
        data, "answer_similarity", target=agent, model=judge(scripted), penalties={"missing": 1.0}
    )
    assert weighted.mean("answer_similarity") < means["default"]
    assert scripted.count() == calls  # weights are not in any prompt: every reply came from the cache


@pytest.mark.slow
def test_tracking_logs_to_mlflow_and_returns_the_run_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # MLflow puts a SQLite store's artifacts in ./mlruns
    uri = f"sqlite:///{tmp_path / 'given.db'}"
    result = evaluate(ROWS, "exact_match", target=capital, tracking=uri, experiment="api", run_name="caps")
    assert result.run_id is not None and result.run_id in str(result)
    run_ = MlflowClient(uri).get_run(result.run_id)
    assert run_.data.metrics["exact_match/mean"] == 0.75 and run_.info.run_name == "caps"
    assert run_.data.params["target.fn"] == "tests.api.test_api:capital"
    assert MlflowClient(uri).get_experiment(run_.info.experiment_id).name == "api"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'env.db'}")
    default = evaluate(ROWS, "exact_match", target=capital, tracking=True, output_dir=tmp_path / "run")
    assert default.run_id is not None
    assert MlflowClient(f"sqlite:///{tmp_path / 'env.db'}").get_run(default.run_id).info.status == "FINISHED"


# --- event loops and Hydra apps ---------------------------------------------------------------------


def test_sync_evaluate_works_where_a_loop_is_running(tmp_path: Path) -> None:
    async def notebook_cell() -> Evaluation:
        return evaluate(ROWS, "exact_match", target=capital, output_dir=tmp_path)

    assert asyncio.run(notebook_cell()).mean("exact_match") == 0.75


def test_evaluate_async_keeps_the_loop_free_and_runs_the_target_on_it(tmp_path: Path) -> None:
    loops: set[asyncio.AbstractEventLoop] = set()

    async def agent(question: str) -> str:
        loops.add(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        return capital(question)

    async def app() -> tuple[Evaluation, asyncio.AbstractEventLoop, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        result = await evaluate_async(ROWS, "exact_match", target=agent, output_dir=tmp_path)
        task.cancel()
        return result, asyncio.get_running_loop(), ticks

    result, loop, ticks = asyncio.run(app())
    assert result.mean("exact_match") == 0.75
    assert loops == {loop}  # the user's coroutines ran on the user's loop
    assert ticks > 5  # which went on serving other tasks during the run


HYDRA_APP = """
import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from evalframe import evaluate


@hydra.main(config_path="conf", config_name="app", version_base="1.3")
def main(cfg: DictConfig) -> None:
    result = evaluate([{"input": "2+2?", "ground_truth": "4"}], "exact_match", target=lambda q: "4")
    print("mean", result.mean("exact_match"))
    print("greeting", cfg.greeting)
    print("hydra job", HydraConfig.get().job.name)
    from hydra import compose
    print("compose", compose(config_name="app", overrides=["greeting=bye"]).greeting)


main()
"""


@pytest.mark.slow
def test_evaluate_inside_a_hydra_app(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "app.yaml").write_text("greeting: hello\n")
    (tmp_path / "app.py").write_text(HYDRA_APP)
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "mean 1.0" in lines and "greeting hello" in lines
    assert "hydra job app" in lines and "compose bye" in lines  # the app's own Hydra still works after


def test_the_readmes_first_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    [saved] = tmp_path.glob("outputs/*/*/results.jsonl")
    assert len(saved.read_text().splitlines()) == 2
