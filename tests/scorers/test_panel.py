"""Panels of judges and repeated judgments (evalframe.panel): several judgments per item, aggregated,
with each judge's verdict kept, their agreement measured, and re-scoring still free."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import ConfigError
from evalframe.results.agreement import between_judges, krippendorff_alpha
from evalframe.results.results_file import read_items
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ScoreResult
from evalframe.results.table import items_table
from evalframe.run import pipeline
from evalframe.run.rescore import replayed
from evalframe.scorers.panel import Aggregate, Panel
from tests.conftest import compose, run_cli
from tests.fake_judge import fenced, judge
from tests.scorers.test_judge import ROWS, factuality_responder
from tests.scorers.test_rag_judges import chosen
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest, Fault

N = math.nan


@pytest.mark.parametrize(
    ("how", "scores", "expected"),
    [
        ("mean", [0.2, 0.4, 0.9], 0.5),
        ("median", [0.2, 0.4, 0.9], 0.4),
        ("min", [0.2, 0.4, 0.9], 0.2),
        ("max", [0.2, 0.4, 0.9], 0.9),
        ("majority", [0.5, 0.6, 0.1], 1.0),  # 2 of 3 at or above 0.5
        ("majority", [0.5, 0.4], 0.0),  # one of two is not more than half
        ("majority", [0.1, 0.4, 0.9], 0.0),
        ("consensus", [0.6, 0.8], 0.7),  # spread 0.2 = tolerance: still agreed
    ],
)
def test_aggregates(how: str, scores: list[float], expected: float) -> None:
    value, problem = Aggregate(how, tolerance=0.2)({str(i): s for i, s in enumerate(scores)})
    assert problem is None and math.isclose(value, expected)


def test_consensus_beyond_the_tolerance_is_no_score_with_the_spread() -> None:
    value, problem = Aggregate("consensus", 0.2)({"gpt": 0.3, "claude": 0.8})
    assert math.isnan(value)
    assert problem == "no consensus: spread 0.50 > tolerance 0.2 (gpt 0.30, claude 0.80)"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"aggregate": "mode"}, "aggregate='mode' is not an option; use one of mean, median"),
        ({"tolerance": 2}, "tolerance=2 must be between 0 and 1"),
        ({"repeats": 0}, "repeats=0 must be a whole number >= 1"),
        ({"models": ["gtp"]}, r"scorers.x.models\[0\]: 'gtp' is not a model preset \(claude, gemini, gpt"),
        (
            {"models": [{"name": "openai/a", "colour": 1}]},
            r"models\[0\]: unknown model setting\(s\) \['colour'\]",
        ),
    ],
)
def test_panel_mistakes_name_the_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Panel.of({"name": "openai/gpt-4o-mini"}, key="scorers.x", **options)


def test_presets_and_mappings_make_the_panel() -> None:
    panel = Panel.of(
        {"name": "ignored/when-a-panel-is-given"},
        [
            "gpt",
            "claude",
            {"name": "ollama/llama3:8b", "api_base": "http://h:11434"},
            {"name": "ollama/llama3:8b"},
        ],
    )
    assert [j.label for j in panel.judges] == ["gpt", "claude", "ollama/llama3_8b", "ollama/llama3_8b_2"]
    gpt, claude, ollama, _ = panel.models()
    assert (gpt.name, gpt.api_key_env, gpt.max_tokens) == ("openai/gpt-4o-mini", "OPENAI_API_KEY", 4096)
    assert claude.api_key_env == "ANTHROPIC_API_KEY" and ollama.api_base == "http://h:11434"


def test_krippendorffs_alpha_reproduces_his_worked_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", 4 observers x 12 units with
    # missing values: interval alpha = 0.849.
    data = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
        [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
    ]
    assert round(krippendorff_alpha(data), 3) == 0.849
    assert krippendorff_alpha([[0.1, 0.5, 0.9], [0.1, 0.5, 0.9]]) == 1.0
    assert math.isnan(krippendorff_alpha([[0.5, 0.5], [0.5, 0.5]]))  # no variation: undefined
    assert math.isnan(krippendorff_alpha([[0.5, N], [N, 0.4]]))  # no unit scored twice
    # Two judges that rank the same but on shifted scales: perfect Spearman, imperfect alpha.
    found = between_judges({"a": [0.1, 0.2, 0.3, 0.4], "b": [0.5, 0.6, 0.7, 0.8]})
    assert found["spearman"] == 1.0 and found["alpha"] < 0.5 and found["n"] == 4


# --- a panel of two judges, in process on the scripted model ---------------------------------------

A, B = "scripted/judge-a", "scripted/judge-b"


def judge_b(request: FakeRequest) -> Any:
    """A lenient second judge: every answer is the same as the expert's."""
    return {"reason": "looks the same to me", "choice": "same"}


def two_judges(request: FakeRequest) -> Any:
    return judge_b(request) if request.model == "judge-b" else factuality_responder(request)


def panel_args(*extra: str, names: tuple[str, ...] = (A, B), scorer: str = "factuality") -> list[str]:
    entries = ", ".join(
        f"{{name: {n}, label: {n.rsplit('-', 1)[1]}, api_key_env: null, max_retries: 0}}" for n in names
    )
    return [f"scorers.{scorer}.models=[{entries}]", *extra]


def factuality_run(tmp_path: Path, *extra: str) -> RunResult:
    data = tmp_path / "qa.jsonl"
    rows = [{"id": i, "input": "Question?", "ground_truth": gt, "output": out} for i, gt, out in ROWS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = compose(["scorer=factuality", "tracking=none", "dataset=jsonl", f"dataset.path={data}", *extra])
    result, _ = pipeline.evaluate(config, tmp_path / f"out{len(list(tmp_path.glob('out*')))}")
    return result


def test_a_panel_keeps_each_judges_verdict_and_aggregates_them(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = two_judges
    result = factuality_run(tmp_path, *panel_args())
    assert scripted.count() == 2 * len(ROWS)  # the whole chain once per judge and item
    scores = {i.id: i.scores["factuality"] for i in result.items}
    # a: same 1.0, disagree 0.0, subset 0.4, superset 0.6; b: 1.0 everywhere; the mean of the two.
    assert {i: s.score for i, s in scores.items()} == {
        "same": 1.0,
        "disagree": 0.5,
        "subset": 0.7,
        "superset": 0.8,
    }
    subset = scores["subset"]
    assert [(j.judge, j.repeat, j.score) for j in subset.judgments] == [("a", 0, 0.4), ("b", 0, 1.0)]
    assert subset.judgments[0].reason == "subset: the answers are subset"
    assert subset.reason.startswith(
        "mean of 2 judges 0.70 (a 0.40, b 1.00). a: subset: the answers are subset"
    )
    assert len(subset.steps) == 2  # both judges' requests, for rescore and prompts.jsonl

    metrics = result.metrics()
    assert metrics["factuality/mean"] == pytest.approx(0.75)
    assert metrics["factuality/judge/a/mean"] == pytest.approx(0.5)
    assert metrics["factuality/judge/b/mean"] == 1.0
    expected = krippendorff_alpha([[1.0, 0.0, 0.4, 0.6], [1.0, 1.0, 1.0, 1.0]])
    assert metrics["factuality/judge_agreement/alpha"] == pytest.approx(expected)
    assert "factuality/judge_agreement/spearman" not in metrics  # a constant judge has no ranks
    table = items_table(result)
    assert table["factuality/judge/a/score"] == [1.0, 0.0, 0.4, 0.6]
    assert table["factuality/judge/b/reason"][0] == "same: looks the same to me"

    # results.jsonl keeps every judgment: a run logged later (evalframe log-run) has the same metrics.
    [path] = tmp_path.glob("out*/results.jsonl")
    again = RunResult(items=read_items(path), scorers=["factuality"])
    from evalframe.results.agreement import with_agreement
    from evalframe.results.intervals import with_intervals

    with_intervals(again)
    with_agreement(again, {})
    assert again.metrics() == metrics
    assert [j.judge for j in again.items[2].scores["factuality"].judgments] == ["a", "b"]


def test_a_failing_judge_is_left_out_and_counted_and_all_failing_is_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def flaky(request: FakeRequest) -> Any:
        submission = fenced(request)["SUBMISSION"]
        if (request.model == "judge-b" and "Asia" in submission) or "Leonardo" in submission:
            return Fault(500)  # judge b fails on the subset item; both fail on the superset one
        return two_judges(request)

    scripted.responder = flaky
    result = factuality_run(tmp_path, *panel_args(), "max_unscored_rate=1")
    scores = {i.id: i.scores["factuality"] for i in result.items}
    rows = {i: out for i, _, out in ROWS}
    assert "Asia" in rows["subset"] and "Leonardo" in rows["superset"]
    assert not any(w in rows[i] for i in ("same", "disagree") for w in ("Asia", "Leonardo"))
    assert scores["subset"].score == 0.4  # judge a alone
    assert "(a 0.40; failed: b: judge: InternalServerError" in scores["subset"].reason
    assert math.isnan(scores["superset"].score)
    assert scores["superset"].error is not None and scores["superset"].error.startswith(
        "every judge failed: a: "
    )
    metrics = result.metrics()
    assert metrics["factuality/judge/b/unscored"] == 2 and metrics["factuality/judge/a/unscored"] == 1
    assert metrics["factuality/unscored"] == 1


def test_consensus_and_majority_over_judges(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = two_judges
    consensus = factuality_run(
        tmp_path, *panel_args("scorers.factuality.aggregate=consensus", "max_unscored_rate=1")
    )
    scores = {i.id: i.scores["factuality"] for i in consensus.items}
    assert scores["same"].score == 1.0 and scores["superset"].score is not None
    assert math.isnan(scores["superset"].score)  # 0.6 vs 1.0: spread 0.4 > 0.2
    assert scores["superset"].reason == "unscored: no consensus: spread 0.40 > tolerance 0.2 (a 0.60, b 1.00)"
    majority = factuality_run(tmp_path, *panel_args("scorers.factuality.aggregate=majority"))
    # two judges: a majority needs both at or above 0.5
    assert {i.id: i.scores["factuality"].score for i in majority.items} == {
        "same": 1.0,
        "disagree": 0.0,
        "subset": 0.0,
        "superset": 1.0,
    }


def test_the_python_api_takes_a_panel(scripted: ScriptedModel, tmp_path: Path) -> None:
    from evalframe import evaluate

    scripted.responder = two_judges
    rows = [{"id": i, "input": "Question?", "ground_truth": gt, "output": out} for i, gt, out in ROWS]
    judges = [{"name": A, "label": "a", "api_key_env": None}, {"name": B, "label": "b", "api_key_env": None}]
    result = evaluate(
        rows, {"factuality": {"models": judges, "aggregate": "max"}}, output_dir=tmp_path / "api"
    )
    assert result.mean("factuality") == 1.0  # judge b says "same" everywhere
    assert result.result.metrics()["factuality/judge/a/mean"] == pytest.approx(0.5)
    assert "factuality/judge/b/score" in result.items


def test_a_missing_key_of_any_judge_stops_the_run_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # gpt has its key, claude has none
    with pytest.raises(
        ConfigError,
        match=r"ANTHROPIC_API_KEY is not set, and the model anthropic/\S+ "
        r"\(scorers\.factuality\.models\[1\]\)",
    ):
        factuality_run(tmp_path, "scorers.factuality.models=[gpt,claude]")
    # A provider's typo is named where it sits in the panel (before: as model.name, a key never typed).
    with pytest.raises(
        ConfigError,
        match=r"^scorers\.factuality\.models\[1\]\.name=opnai/gpt-4o: 'opnai' is "
        r"not one of LiteLLM's providers; did you mean openai/gpt-4o\?",
    ):
        factuality_run(tmp_path, "scorers.factuality.models=[gpt,{name: opnai/gpt-4o}]")
    assert scripted.count() == 0


# --- each judgment's verdicts, in the table and the report -----------------------------------------


def strict_b(request: FakeRequest) -> Any:
    """Four statements; judge a finds them relevant at even positions, judge b none of them."""
    reply = chosen(request)
    for entry in reply.get("verdicts", {}).values() if request.model == "judge-b" else ():
        entry["verdict"] = "no"
    return reply


STATEMENTS = ["Paris is the capital.", "It is in France.", "It is blue.", "It has 3 towers."]  # chosen's
ALTERNATING, NONE = ["yes", "no", "yes", "no"], ["no"] * 4


@pytest.mark.parametrize(
    ("how", "said"),
    [
        (panel_args(scorer="answer_relevancy"), {"a": ALTERNATING, "b": NONE}),
        (
            ["model.name=scripted/judge-a", "model.api_key_env=null", "repeats=2"],
            {"repeat 1": ALTERNATING, "repeat 2": ALTERNATING},
        ),
    ],
    ids=["panel", "repeats"],
)
def test_each_judgments_verdicts_are_in_the_verdicts_table_and_the_report(
    scripted: ScriptedModel, tmp_path: Path, how: list[str], said: dict[str, list[str]]
) -> None:
    scripted.responder = strict_b
    config = compose(["scorer=answer_relevancy", "tracking=none", "dataset.limit=1", *how])
    result, _ = pipeline.evaluate(config, tmp_path)
    [verdicts] = items_table(result)["answer_relevancy/verdicts"]
    assert verdicts.splitlines() == [
        f"{name}: {i} {verdict} “{STATEMENTS[i]}”: reason {i}"
        for name, verdicts_of_one in said.items()
        for i, verdict in enumerate(verdicts_of_one)
    ]
    assert "<details><summary>8 verdicts</summary>" in (tmp_path / "report.html").read_text()


# --- re-scoring costs no call, with a panel and with repeats -------------------------------------


def partial_judge(request: FakeRequest) -> Any:
    """The literal-minded fake judge, except that every unit it finds is only a partial match."""
    reply = judge(request)
    if isinstance(reply, dict) and "matches" in reply:
        matches = reply["matches"]  # keyed by the ground-truth unit's position
        for m in matches.values() if isinstance(matches, dict) else matches:
            m["match_type"] = "partial" if m["match_type"] != "missing" else "missing"
    return reply


def as_judges(request: FakeRequest) -> Any:
    """Judge a is the literal-minded fake judge, judge b its partial-match variant."""
    return partial_judge(request) if request.model == "judge-b" else judge(request)


@pytest.mark.parametrize(
    "how",
    [
        ["scorers.answer_similarity.models=[{name: scripted/judge-a, label: a}, {name: scripted/judge-b}]"],
        ["model.name=scripted/judge-a", "model.api_key_env=null", "repeats=2"],
    ],
    ids=["panel", "repeats"],
)
@pytest.mark.slow
def test_penalty_sweeps_and_rescore_cost_no_calls(
    scripted: ScriptedModel, tmp_path: Path, how: list[str]
) -> None:
    scripted.responder = as_judges
    base = ["scorer=answer_similarity", "tracking=none", "dataset.limit=12", *how]
    first, _ = pipeline.evaluate(compose(base), tmp_path / "first")
    asked = scripted.count()
    assert asked > 0 and all(i.scores["answer_similarity"].judgments for i in first.items if i.output.strip())
    # The next job of a penalty sweep: the same requests, from the judge cache.
    second, _ = pipeline.evaluate(compose([*base, "penalties.missing=0.6"]), tmp_path / "second")
    assert scripted.count() == asked
    assert second.means["answer_similarity"] < first.means["answer_similarity"]
    # A re-score of the logged items: every request served from the stored steps, none asked.
    old = read_items(tmp_path / "first" / "results.jsonl")
    given = replayed(old, "run")
    config = compose([*base, "penalties.missing=0.6", "cache.mode=off"])
    rescored, _ = pipeline.evaluate(config, tmp_path / "rescored", given=given)
    assert scripted.count() == asked
    assert rescored.means == second.means
    assert rescored.metrics().keys() == second.metrics().keys()
    # Another way to combine the same judgments is a re-score too.
    config = compose([*base, "scorers.answer_similarity.aggregate=min", "cache.mode=off"])
    lowest, _ = pipeline.evaluate(config, tmp_path / "lowest", given=replayed(old, "run"))
    assert scripted.count() == asked
    assert lowest.means["answer_similarity"] <= first.means["answer_similarity"]


# --- repeats ---------------------------------------------------------------------------------


def test_repeats_ask_each_step_again_with_a_seed_and_report_stability(
    scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def wavering(request: FakeRequest) -> Any:
        """Sure of everything but the subset answer, which it calls the same on seed 1."""
        reply = factuality_responder(request)
        if reply["choice"] == "subset" and request.body.get("seed") == 1:
            return {"reason": "on second thought, the same", "choice": "same"}
        return reply

    scripted.responder = wavering
    args = ["model.name=scripted/judge", "model.api_key_env=null", "repeats=3"]
    result = factuality_run(tmp_path, *args)
    assert scripted.count() == 3 * len(ROWS)  # the cache and in-run sharing key each repeat apart
    assert sorted({r.body.get("seed") for r in scripted.requests}, key=str) == [1, 2, None]
    subset = next(i for i in result.items if i.id == "subset").scores["factuality"]
    assert [j.score for j in subset.judgments] == [0.4, 1.0, 0.4]
    assert subset.score == 0.6 and subset.reason.startswith("mean of 3 repeats 0.60 (0.40, 1.00, 0.40).")
    metrics = result.metrics()
    assert metrics["factuality/unstable"] == 0.25  # 1 of 4 items
    assert metrics["factuality/repeat_std"] == pytest.approx(subset.repeat_std() / 4)
    assert "factuality/judge/judge/mean" not in metrics  # one judge: no panel metrics
    out = capsys.readouterr().out
    assert "25% of items unstable; most unstable: subset (std 0.28)" in out

    scripted.reset()
    factuality_run(tmp_path, *args)
    assert scripted.count() == 0  # every repeat cached under its own key


def test_repeats_must_reach_a_users_own_judge(tmp_path: Path) -> None:
    from evalframe.config import compose as configs

    cfg = configs.compose(["scorer=factuality", "repeats=2", "~scorers.factuality.repeats"])
    with pytest.raises(
        ConfigError, match=r"scorers.factuality has no repeats key: add `repeats: \$\{repeats\}`"
    ):
        configs.resolve(cfg)


def test_semantic_similarity_takes_majority_and_consensus() -> None:
    from evalframe.models.steps import StepResult
    from evalframe.scorers.semantic_similarity import SemanticSimilarity

    steps = [StepResult("embed", [], reply={"cosine": c}) for c in (0.9, 0.4, 0.7)]
    models = ["m1", "m2", "m3"]
    majority = SemanticSimilarity(models, aggregate="majority")._one("a", "b", steps)
    assert majority.score == 1.0  # 0.9 and 0.7 of three
    agreed = SemanticSimilarity(models, aggregate="consensus", tolerance=0.5)._one("a", "b", steps)
    assert agreed.score == pytest.approx(0.6667, abs=1e-4)
    apart: ScoreResult = SemanticSimilarity(models, aggregate="consensus")._one("a", "b", steps)
    assert not apart.scored and "spread 0.50 > tolerance 0.2 (m1 0.90, m2 0.40, m3 0.70)" in apart.reason


# --- from the command line, against the local test server, logged to MLflow -----------------------


def logged(tmp_path: Path, name: str) -> tuple[dict[str, float], list[dict[str, Any]], dict[str, Any]]:
    """The newest run in tmp_path/mlflow.db: its metrics, its results.jsonl items and its items.json."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    run = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"])[0]
    folder = tmp_path / name
    items = Path(client.download_artifacts(run.info.run_id, "results.jsonl", str(folder))).read_text()
    table = json.loads(
        Path(client.download_artifacts(run.info.run_id, "items.json", str(folder))).read_text()
    )
    return run.data.metrics, [json.loads(line) for line in items.splitlines()], table


def per_judge(items: list[dict[str, Any]], scorer: str, label: str) -> list[float]:
    """Each item's score by one judge, from results.jsonl (NaN where no judge was asked)."""
    scores = []
    for item in items:
        mine = [j["score"] for j in item["scores"][scorer]["judgments"] if j["judge"] == label]
        scores.append(sum(mine) / len(mine) if mine else math.nan)
    return scores


@pytest.mark.slow
def test_a_panel_of_two_judges_on_two_servers_from_the_command_line(tmp_path: Path) -> None:
    with FakeLLMServer(responder=judge) as literal, FakeLLMServer(responder=partial_judge) as partial:
        entries = ", ".join(
            f"{{name: openai/judge, api_base: '{server.openai_base}', api_key_env: null, label: {label}}}"
            for server, label in ((literal, "literal"), (partial, "partial"))
        )
        args = ["scorer=answer_similarity", f"scorers.answer_similarity.models=[{entries}]"]
        done = run_cli(args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        asked = (literal.count(), partial.count())
        assert min(asked) > 0
        metrics, items, table = logged(tmp_path, "panel")
        # A penalty sweep over the panel: every job re-scores the cached judgments, no request.
        sweep = run_cli(["-m", *args, "penalties.missing=0.05,0.5", "tracking=none"], cwd=tmp_path)
        assert sweep.returncode == 0, sweep.stderr
        assert (literal.count(), partial.count()) == asked
    assert "answer_similarity: the judges agree with Krippendorff's alpha" in done.stdout
    mean = {label: metrics[f"answer_similarity/judge/{label}/mean"] for label in ("literal", "partial")}
    assert mean["partial"] < mean["literal"]  # partial matches earn less than exact and semantic ones
    literal_scores = per_judge(items, "answer_similarity", "literal")
    partial_scores = per_judge(items, "answer_similarity", "partial")
    assert metrics["answer_similarity/judge_agreement/alpha"] == pytest.approx(
        krippendorff_alpha([literal_scores, partial_scores])
    )
    assert -1 <= metrics["answer_similarity/judge_agreement/spearman"] <= 1
    # An empty output scores 0 with no judge asked: agreement counts the items the judges saw.
    seen = [i for i in items if i["output"].strip()]
    assert metrics["answer_similarity/judge_agreement/n"] == len(seen) < len(items)
    assert metrics["answer_similarity/mean"] == pytest.approx(
        sum(item["scores"]["answer_similarity"]["score"] for item in items) / len(items)
    )
    columns = table["columns"]
    assert (
        "answer_similarity/judge/literal/score" in columns
        and "answer_similarity/judge/partial/reason" in columns
    )


def readme_command(marker: str) -> list[str]:
    """The arguments of the README's `evalframe ...` line containing `marker`, as written."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [line] = [x for x in readme.splitlines() if x.startswith("evalframe ") and marker in x]
    return shlex.split(line)[1:]


@pytest.mark.slow
def test_the_readmes_panel_and_repeats_examples_run_as_written(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    # The presets' providers answered by the local server: LiteLLM reads their base URLs from the
    # environment, so the commands run exactly as the README writes them.
    env = {"OPENAI_BASE_URL": judge_server.openai_base, "ANTHROPIC_BASE_URL": judge_server.base_url}
    keys = {"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}
    panel = readme_command("answer_similarity.models=[gpt,claude]")

    no_claude = run_cli(panel, cwd=tmp_path, env={**env, "OPENAI_API_KEY": "sk-test"})
    assert no_claude.returncode == 2 and "ANTHROPIC_API_KEY is not set" in no_claude.stderr
    assert judge_server.count() == 0 and not list(tmp_path.glob("outputs/*/*/results.jsonl"))

    done = run_cli(panel, cwd=tmp_path, env={**env, **keys})
    assert done.returncode == 0, done.stderr
    assert {r.protocol for r in judge_server.requests} == {"openai", "anthropic"}
    metrics, _, _ = logged(tmp_path, "panel")
    assert {"answer_similarity/judge/gpt/mean", "answer_similarity/judge/claude/mean"} <= metrics.keys()
    assert metrics["answer_similarity/judge_agreement/alpha"] == 1.0  # the same fake judge behind both

    judge_server.reset()
    judge_server.responder = lambda r: factuality_responder(r) if "choice" in str(r.schema) else judge(r)
    repeated = run_cli(readme_command("repeats=3"), cwd=tmp_path, env={**env, **keys})
    assert repeated.returncode == 0, repeated.stderr
    assert {r.body.get("seed") for r in judge_server.requests} == {None, 1, 2}
    assert judge_server.count() == 3 * len({json.dumps(r.messages) for r in judge_server.requests})
    metrics, items, _ = logged(tmp_path, "repeats")
    assert metrics["factuality/repeat_std"] == 0.0 and metrics["factuality/unstable"] == 0.0
    asked = [i for i in items if i["output"].strip()]  # an empty output scores 0 without a call
    assert asked and all(len(i["scores"]["factuality"]["judgments"]) == 3 for i in asked)
    assert "0% of items unstable" in repeated.stdout


def test_model_overrides_on_the_command_line_reach_a_panels_presets(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    # Before: the presets ignored model.api_base and went to api.openai.com with the key, silently.
    args = [
        "scorer=answer_similarity",
        "scorers.answer_similarity.models=[gpt,gpt]",
        f"model.api_base={judge_server.openai_base}",
        "model.timeout=10",
        "model.max_retries=0",
        "dataset.limit=2",
        "tracking=none",
    ]
    done = run_cli(args, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stderr
    assert judge_server.count() > 0 and {r.model for r in judge_server.requests} == {"gpt-4o-mini"}
    [run] = tmp_path.glob("outputs/*/*/run.json")
    models = json.loads(run.read_text())["config"]["scorers"]["answer_similarity"]["models"]
    assert [(m["label"], m["api_base"]) for m in models] == [("gpt", judge_server.openai_base)] * 2
    items = [json.loads(line) for line in next(tmp_path.glob("outputs/*/*/results.jsonl")).open()]
    judges = {j["judge"] for i in items for j in i["scores"]["answer_similarity"]["judgments"]}
    assert judges == {"gpt", "gpt_2"}


def test_every_model_override_reaches_each_preset_but_its_name_is_refused() -> None:
    from evalframe.config import compose as configs

    panel = ["scorer=factuality", "scorers.factuality.models=[gpt,claude]"]
    overrides = [*panel, "model.temperature=0.7", "+model.extra.top_p=0.9"]
    models = configs.resolve(configs.compose(overrides), overrides)["scorers"]["factuality"]["models"]
    assert [(m["label"], m["name"], m["temperature"], m["extra"]) for m in models] == [
        ("gpt", "openai/gpt-4o-mini", 0.7, {"top_p": 0.9}),
        ("claude", models[1]["name"], 0.7, {"top_p": 0.9}),
    ]
    assert models[1]["name"].startswith("anthropic/") and models[1]["api_key_env"] == "ANTHROPIC_API_KEY"
    renamed = [*panel, "model.name=openai/gpt-4o"]
    with pytest.raises(ConfigError, match=r"model.name=openai/gpt-4o would make every preset of"):
        configs.resolve(configs.compose(renamed), renamed)
