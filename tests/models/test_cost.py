"""What a run cost: at the price the config gives, else LiteLLM's for a model it knows on its provider's
own endpoint; unknown ("—", no MLflow metric) for a model behind an api_base or without a price, never
a guessed figure. Real HTTP to the fake server, real SQLite MLflow, real report.html."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from evalframe import redaction
from evalframe.errors import ConfigError
from evalframe.models import pricing
from evalframe.models.cache import Cache
from evalframe.models.llm import LLM
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Stats, StepResult, Usage
from evalframe.results.journal import RESULTS
from evalframe.results.results_file import item_from_json, read_items, to_jsonable
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, Objective, ScoreResult
from evalframe.results.summary import Summary, fmt_cost
from evalframe.run import pipeline
from evalframe.scorers.semantic_similarity import SemanticSimilarity
from tests.conftest import PRICE, compose, fake_model
from tests.scripted import NAME, ScriptedModel
from tests.testserver import FakeLLMServer

SCORERS = "scorer=[answer_similarity,token_f1]"


def _run(tmp_path: Path, *overrides: str) -> tuple[RunResult, Any]:
    """A 4-item run logged to MLflow on SQLite in tmp_path; the result and its MLflow run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = compose([*overrides, "dataset.limit=4", f"tracking.uri={uri}", "tracking.traces=false"])
    result, code = pipeline.evaluate(config, tmp_path / "run")
    assert code == 0 and result.run_id
    return result, MlflowClient(uri).get_run(result.run_id)


def _paid(steps: list[StepResult], input_price: float, output_price: float) -> float:
    """The steps' tokens at the given prices: what the run must report."""
    return sum(s.usage.prompt_tokens * input_price + s.usage.completion_tokens * output_price for s in steps)


def _judged(result: RunResult) -> list[StepResult]:
    return [s for i in result.items for r in i.scores.values() for s in r.steps]


def _unpriced(server: FakeLLMServer) -> list[str]:
    """The judge behind the server's api_base, without the price the tests' fake_model gives it."""
    return [o for o in fake_model(server) if o not in PRICE]


@pytest.mark.slow
def test_a_judge_behind_an_api_base_without_a_price_costs_unknown_everywhere(
    judge_server: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, run = _run(tmp_path, SCORERS, *_unpriced(judge_server))
    assert judge_server.count() > 0 and result.stats.calls > 0
    summaries = result.summaries
    assert math.isnan(result.usage.cost) and math.isnan(summaries["answer_similarity"].cost)
    assert summaries["token_f1"].cost == 0.0  # no model call: known, and nothing
    assert result.stats.unpriced == {"openai/gpt-4o-mini"}

    out = capsys.readouterr().out
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ ")}
    assert rows["answer_similarity"].rstrip("│ ").endswith("—")  # the "cost" column
    assert rows["token_f1"].rstrip("│ ").endswith("$0")
    said = " ".join(out.split())  # the line as said, wherever the console wrapped it
    assert (
        "cost — (openai/gpt-4o-mini at a custom api_base, whose price LiteLLM cannot know: set its "
        "input_cost_per_token, output_cost_per_token, 0 for a free local server)" in said
    )
    assert "$nan" not in out and "nan" not in Summary.of(result).text()

    html = (tmp_path / "run" / "report.html").read_text()
    cells = re.findall(r"<tr><td>(\w+)</td>.*?</tr>", html)
    assert cells[:2] == ["answer_similarity", "token_f1"]
    first_row = re.search(r"<tr><td>answer_similarity</td>(.*?)</tr>", html)
    assert first_row and first_row.group(1).endswith('<td class="num">—</td>')

    metrics = run.data.metrics
    assert "usage/cost" not in metrics and "answer_similarity/cost" not in metrics  # no NaN, no guess
    assert metrics["token_f1/cost"] == 0.0 and metrics["usage/prompt_tokens"] > 0

    # results.jsonl keeps the unknown as null, and a resumed run reads it back as unknown
    assert '"cost": null' in (tmp_path / "run" / RESULTS).read_text()
    journaled = read_items(tmp_path / "run" / RESULTS)
    costs = [s.usage.cost for i in journaled for s in i.scores["answer_similarity"].steps if not s.cached]
    assert costs and all(math.isnan(c) for c in costs)


def test_a_price_in_the_model_config_costs_the_tokens_at_that_price(
    judge_server: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = ["model.input_cost_per_token=2e-6", "model.output_cost_per_token=1e-5"]  # not gpt-4o-mini's
    result, run = _run(tmp_path, "scorer=answer_similarity", *_unpriced(judge_server), *prices)
    paid = _paid(_judged(result), 2e-6, 1e-5)
    assert paid > 0 and result.usage.cost == pytest.approx(paid, rel=1e-12)
    assert result.summaries["answer_similarity"].cost == pytest.approx(paid, rel=1e-12)
    assert run.data.metrics["usage/cost"] == pytest.approx(paid, rel=1e-12)
    # A price per token is a setting, not a secret: logged as given, never blanked from a text
    params = run.data.params
    assert (params["model.input_cost_per_token"], params["model.output_cost_per_token"]) == ("2e-06", "1e-05")
    assert redaction.scrub_text("at 2e-06 per token") == "at 2e-06 per token"
    assert f"cost {fmt_cost(paid)} report: " in " ".join(capsys.readouterr().out.split())


def test_the_scripted_model_stays_priced_by_litellm(scripted: ScriptedModel, tmp_path: Path) -> None:
    """A model LiteLLM has a price for, on its provider's own endpoint, is priced by LiteLLM."""
    config = compose(["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "dataset.limit=4"])
    result, _ = pipeline.evaluate(config, tmp_path)
    paid = _paid(_judged(result), 1.5e-7, 6e-7)  # as tests/scripted.py registers it
    assert paid > 0 and result.usage.cost == pytest.approx(paid, rel=1e-9)
    assert not result.stats.unpriced


def test_an_unknown_cost_says_whether_a_custom_api_base_is_why(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """Before: `no price for scripted/judge` also when the judge was served at a custom api_base, where
    no name tells the price. The scripted judge answers whatever the api_base; another scripted name
    has no price in LiteLLM."""
    said = {}
    for name, overrides in (
        ("api_base", ["model.api_base=http://127.0.0.1:9/v1"]),
        ("no_price", ["model.name=scripted/unpriced"]),
    ):
        config = compose(
            [
                "scorer=answer_similarity",
                *fake_model(scripted),
                *overrides,
                "tracking=none",
                "dataset.limit=2",
            ]
        )
        result, _ = pipeline.evaluate(config, tmp_path / name)
        assert result.stats.calls > 0 and math.isnan(result.usage.cost)
        said[name] = Summary.of(result).totals()
    assert said["api_base"].endswith(
        "cost — (scripted/judge at a custom api_base, whose price LiteLLM cannot know: set its "
        "input_cost_per_token, output_cost_per_token, 0 for a free local server)"
    )
    assert said["no_price"].endswith(
        "cost — (no price for scripted/unpriced: set its input_cost_per_token, output_cost_per_token)"
    )


def test_a_priced_judge_keeps_its_cost_when_the_target_has_none(
    judge_server: FakeLLMServer, scripted: ScriptedModel, tmp_path: Path
) -> None:
    """A run's total with an unknown part is unknown; a scorer whose judge is priced still says its cost."""
    target = ["target=llm", *[o.replace("model.", "target.model.", 1) for o in _unpriced(judge_server)]]
    config = compose(
        ["scorer=answer_similarity", *fake_model(scripted), *target, "tracking=none", "dataset.limit=3"]
    )
    result, _ = pipeline.evaluate(config, tmp_path)
    assert all(i.target_step and i.target_step.ok for i in result.items)
    assert math.isnan(result.usage.cost) and result.stats.unpriced == {"openai/gpt-4o-mini"}
    judged = result.summaries["answer_similarity"].cost
    assert judged > 0 and judged == pytest.approx(_paid(_judged(result), 1.5e-7, 6e-7), rel=1e-9)
    assert "cost —" in Summary.of(result).totals() and Summary.of(result).rows()[0][-1] == fmt_cost(judged)


@pytest.mark.slow  # loads the local embedding model
def test_local_embeddings_are_free(tmp_path: Path) -> None:
    llm = LLM(ModelSettings("local/all-MiniLM-L6-v2"), asyncio.Semaphore(2), Cache("off"), Stats())
    [step] = asyncio.run(llm.cosines([("Paris is the capital", "The capital is Paris")]))
    assert step.ok and step.usage.prompt_tokens > 0 and step.usage.cost == 0.0
    assert llm.stats.cost == 0.0 and not llm.stats.unpriced


@pytest.mark.parametrize(
    ("settings", "priced"),
    [
        ({"name": "openai/gpt-4o-mini"}, True),  # LiteLLM's price, OpenAI's endpoint
        ({"name": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:8000/v1"}, False),
        ({"name": "openai/my-fine-tune"}, False),  # LiteLLM has no price for it
        ({"name": "ollama_chat/llama3.1", "api_base": "http://localhost:11434"}, False),
        (
            {"name": "ollama_chat/llama3.1", "api_base": "http://localhost:11434", "input_cost_per_token": 0},
            True,
        ),
        ({"name": "openai/gpt-4o-mini", "api_base": "http://x/v1", "output_cost_per_token": 1e-6}, True),
        ({"name": NAME}, True),  # registered with LiteLLM by tests/scripted.py
        ({"name": "local/all-MiniLM-L6-v2"}, True),  # free
    ],
)
def test_which_models_have_a_known_price(
    scripted: ScriptedModel, settings: dict[str, Any], priced: bool
) -> None:
    assert pricing.known(ModelSettings.from_config(settings)) is priced


@pytest.mark.parametrize("value", [-1e-7, "cheap", True])
def test_a_bad_price_is_a_config_error_naming_its_key(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"^model.input_cost_per_token=.*give USD per token"):
        ModelSettings.from_config({"name": "openai/gpt-4o-mini", "input_cost_per_token": value})
    with pytest.raises(
        ConfigError, match=r"^scorers.semantic_similarity.input_cost_per_token=.*USD per token"
    ):
        SemanticSimilarity(input_cost_per_token=value)


def test_an_unknown_cost_is_stored_as_null_and_read_back_as_unknown() -> None:
    """results.jsonl is strict JSON: an unknown cost is null there, NaN again when a run resumes."""
    step = StepResult("extract", [], reply={"units": []}, raw="{}", usage=Usage(3, 2, math.nan))
    item = ItemResult("q1", "input", "truth", "output", {"s": ScoreResult(1.0, "ok", [step])})
    stored = to_jsonable(item)
    assert stored["scores"]["s"]["steps"][0]["usage"]["cost"] is None
    assert math.isnan(item_from_json(stored).scores["s"].usage.cost)


def test_the_progress_line_says_unknown_once_an_unpriced_model_answered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalframe.report import console as report

    monkeypatch.setattr(report.console, "_force_terminal", True)  # the bar shows only in a terminal

    def shown(*costs: float) -> str:
        stats = Stats()
        with report.progress(len(costs), stats) as advance:
            for cost in costs:
                stats.add_cost(cost, "a model")
                advance()
        return capsys.readouterr().out  # the bar as it was left: the run's cost so far

    assert "cost $0.0013" in shown(0.00125)
    assert "cost —" in (last := shown(0.00125, math.nan)) and "nan" not in last


def test_a_sweep_ranking_by_an_unknown_cost_says_why() -> None:
    assert Objective("usage/cost", "minimize").returned() == math.inf  # the worst: steered away from
    assert "a model without a known price answered" in str(Objective("usage/cost", "minimize").why_worst())


@pytest.mark.parametrize(
    ("cost", "shown"),
    [
        (math.nan, "—"),
        (0.0, "$0"),
        (3.4e-5, "$0.000034"),  # never "$0.0000", which reads as free
        (0.00049, "$0.00049"),
        (0.00125, "$0.0013"),
        (1.5, "$1.5000"),
    ],
)
def test_a_cost_is_written_one_way(cost: float, shown: str) -> None:
    assert fmt_cost(cost) == shown


def test_every_rendering_of_a_small_cost_shows_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The summary's table and totals, a sweep's job lines, table, best line, page and held-out
    lines: a cost of a few calls to a cheap model reads the same everywhere, never as nothing."""
    from evalframe.report import console as report
    from evalframe.report.sweep_html import sweep_report
    from evalframe.results.intervals import NONE
    from evalframe.results.jobs import Best, Holdout, Job

    cheap, cheaper = 3.4e-5, 2.1e-5
    result = RunResult([], ["judge"])
    step = StepResult("judge", [], reply={}, raw="{}", usage=Usage(10, 2, cheap))
    result.add(ItemResult("q1", "input", "truth", "output", {"judge": ScoreResult(1.0, "ok", [step])}))
    result.stats.add_cost(cheap, NAME)
    summary = Summary.of(result)
    assert summary.rows()[0][-1] == "$0.000034"
    assert "cost $0.000034" in summary.totals() and "$0.000034" in summary.text()

    objective = Objective("usage/cost", "minimize", cheaper)
    jobs = [Job(str(n), {"k": str(n)}, {}, cost, objective.metric) for n, cost in enumerate((cheap, cheaper))]
    report.job(1, "k=1", objective, 0)
    report.sweep(jobs, ["k"], objective)
    report.best(Best({"k": "1"}, cheaper, jobs[1]), objective)
    out = " ".join(capsys.readouterr().out.split())
    assert "usage/cost $0.000021 exit 0" in out and "$0.000034" in out
    assert "usage/cost = $0.000021 (minimize, job 1)" in out and "0.000 " not in out
    assert '<td class="num">$0.000021</td>' in sweep_report(jobs, objective, ["k"], "sweep").html
    held_out = Holdout(objective, 4, cheaper, cheap, NONE).lines()
    assert held_out[1:4] == [
        "  best settings     $0.000021",
        "  default settings  $0.000034",
        "  difference        -$0.000013 95% CI –",
    ]
