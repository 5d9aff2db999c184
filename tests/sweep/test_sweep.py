"""Sweeps: presets, one MLflow parent run with a child per job, jobs ranked by the objective, and
Optuna tuning the penalty weights to human scores with one run's worth of judge calls."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from evalframe.errors import ConfigError
from evalframe.paths import CONF_DIR
from evalframe.report.console import ui_command
from evalframe.results.objective import of_config
from evalframe.results.scores import Objective
from evalframe.run import pipeline
from tests import short_answer_judge
from tests.conftest import compose, fake_model, run_cli, sweep_runs
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer

slow = pytest.mark.slow


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of the end-of-sweep table, best first."""
    after = stdout[stdout.index("sweep: ") :]
    return [
        [cell.strip() for cell in line.strip("│ ").split("│")]
        for line in after.splitlines()
        if re.match(r"│ \d+ ", line)
    ]


def best_line(stdout: str) -> dict[str, str]:
    [line] = [line for line in stdout.splitlines() if line.startswith("best: ")]
    return dict(pair.split("=", 1) for pair in line.removeprefix("best: ").split())


@slow
def test_the_grid_preset_runs_its_combinations_as_child_runs_ranked_by_the_objective(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    result = run_cli(
        [
            "-m",
            "sweep=penalties_grid",
            # The same key on the command line replaces the preset's line: 2 x 2 x 1 jobs, the
            # contradiction weights (0.5, 1.0) from the preset.
            "penalties.missing=0.05,0.3",
            "penalties.extra_info=0.05",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "dataset.limit=12",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr
    assert "sweep: 4 jobs, best first by answer_similarity/mean (maximize)" in result.stdout
    # A quiet console: a line per job, the ranked table, the best values, where the report and the
    # parent run are; no per-job tables or hints, no Hydra launch lines (with escaped URLs), no INFO.
    lines = result.stdout.splitlines()
    assert len([line for line in lines if re.match(r"job \d: penalties\.", line)]) == 4
    assert len(lines) <= 4 + 11 + 2 + 2, result.stdout
    assert "[HYDRA]" not in result.stdout + result.stderr and "\\:" not in result.stdout
    assert "INFO" not in result.stdout + result.stderr and "WARNING" not in result.stdout + result.stderr
    [report] = [line.removeprefix("sweep report: ") for line in lines if line.startswith("sweep report: ")]
    assert (tmp_path / report).is_file() and report.endswith("sweep.html")

    parent, children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    page = f"#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}"
    assert lines[-1] == f"View the sweep: {ui_command(tmp_path)}  ->  http://127.0.0.1:5000/{page}"
    assert (
        parent.info.status == "FINISHED"
        and "sweep=penalties_grid" in parent.data.tags["evalframe.sweep.overrides"]
    )
    swept = {(c.data.params["penalties.missing"], c.data.params["penalties.contradiction"]) for c in children}
    # Each job's run is named after its swept values, so the UI tells the children apart.
    for child in children:
        params = child.data.params
        assert child.info.run_name.startswith("sample · answer_similarity · penalties.")
        for key in ("penalties.missing", "penalties.contradiction"):
            assert f"{key}={params[key]}" in child.info.run_name.split()
    assert swept == {(m, c) for m in ("0.05", "0.3") for c in ("0.5", "1.0")}
    assert {c.data.params["penalties.extra_info"] for c in children} == {"0.05"}
    objective = {
        (c.data.params["penalties.missing"], c.data.params["penalties.contradiction"]): c.data.metrics[
            "objective"
        ]
        for c in children
    }
    assert all(c.data.metrics["objective"] == c.data.metrics["answer_similarity/mean"] for c in children)
    assert objective[("0.05", "0.5")] > objective[("0.3", "1.0")]  # lighter penalties, higher scores

    # The table: best first, a column per swept key, then the objective.
    rows = table_rows(result.stdout)
    assert len(rows) == 4
    values = [float(row[4]) for row in rows]
    assert values == sorted(values, reverse=True)
    assert rows[0][1:4] == ["0.05", "0.5", "0.05"]
    # Each job's objective with its interval; the best marked, and the jobs it cannot be told from.
    assert all(re.fullmatch(r"\[\d\.\d{3}, \d\.\d{3}\]", row[5]) for row in rows)
    assert rows[0][6] == "best" and {row[6] for row in rows[1:]} <= {"≈ best", ""}
    assert best_line(result.stdout) == {
        "penalties.missing": "0.05",
        "penalties.contradiction": "0.5",
        "penalties.extra_info": "0.05",
    }
    assert parent.data.tags["evalframe.sweep.best.penalties.missing"] == "0.05"
    assert parent.data.tags["evalframe.sweep.objective"] == "answer_similarity/mean"
    assert parent.data.metrics["objective"] == pytest.approx(max(objective.values()))
    # run.json records the objective for the sweep's charts.
    manifest = json.loads(next(tmp_path.glob("multirun/*/*/0/run.json")).read_text())
    assert manifest["objective"]["metric"] == "answer_similarity/mean"
    assert manifest["objective"]["direction"] == "maximize"
    assert manifest["objective"]["value"] == pytest.approx(manifest["means"]["answer_similarity"])
    assert (
        manifest["objective"]["ci_low"] <= manifest["objective"]["value"] <= manifest["objective"]["ci_high"]
    )


@slow
def test_direction_minimize_ranks_the_lowest_first(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    result = run_cli(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "tracking=none",
            "dataset.limit=12",
            "objective.direction=minimize",
            "penalties.missing=0.05,0.3",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout)
    assert [row[1] for row in rows] == ["0.3", "0.05"]  # the heavier penalty scores lower: best here
    assert float(rows[0][2]) < float(rows[1][2])
    assert best_line(result.stdout) == {"penalties.missing": "0.3"}


@slow
def test_optuna_tunes_the_penalties_to_human_scores_with_one_runs_judge_calls(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    # Word units make a short answer partly right, so the weights change how the pairs rank.
    judge_server.responder = short_answer_judge.judge
    data = ["scorer=answer_similarity", *fake_model(judge_server), "dataset=sas_squad", "dataset.limit=40"]
    single = pipeline.evaluate(compose([*data, "tracking=none"]), tmp_path / "single")[0]
    one_run = judge_server.count()
    assert one_run > 0 and single.agreement["answer_similarity"]["n"] == 40
    judge_server.reset()

    result = run_cli(
        # The trials' runs, metrics and tags are what this is about, not their 168 per-item traces.
        ["-m", "sweep=tune_penalties", "hydra.sweeper.n_trials=6", "tracking.traces=false", *data],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x", "EVALFRAME_CACHE_DIR": str(tmp_path / "sweep-cache")},
    )
    assert result.returncode == 0, result.stderr
    assert judge_server.count() == one_run  # every trial after the first re-scores cached replies
    trials = sorted(tmp_path.glob("multirun/*/*/[0-9]*/results.jsonl"), key=lambda p: int(p.parent.name))
    assert len(trials) == 6
    for later in trials[1:]:
        steps = [
            s
            for line in later.read_text().splitlines()
            for s in json.loads(line)["scores"]["answer_similarity"]["steps"]
        ]
        assert steps and all(s["cached"] for s in steps)

    parent, children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(children) == 6
    spearman = {c.info.run_id: c.data.metrics["answer_similarity/agreement/spearman"] for c in children}
    assert all(c.data.metrics["objective"] == spearman[c.info.run_id] for c in children)
    assert len(set(spearman.values())) > 1  # the search is not over a flat line
    keys = ("penalties.missing", "penalties.contradiction", "penalties.extra_info")
    printed = best_line(result.stdout)
    [best_child] = [c for c in children if all(c.data.params[k] == printed[k] for k in keys)]
    best = best_child.data.metrics["objective"]
    assert best == max(spearman.values())  # (ties: Optuna names the first such trial)
    assert f"answer_similarity/agreement/spearman = {best:.4f}" in result.stdout
    assert {k: parent.data.tags[f"evalframe.sweep.best.{k}"] for k in keys} == printed
    assert parent.data.metrics["objective"] == pytest.approx(best)
    # Optuna's own record (it read the task's return values) agrees.
    from omegaconf import OmegaConf

    optuna = OmegaConf.load(next(tmp_path.glob("multirun/*/*/optimization_results.yaml")))
    assert optuna.best_value == pytest.approx(best)
    assert {k: str(v) for k, v in optuna.best_params.items()} == printed
    # tune.holdout: 0.3 (the preset's): the trials saw 28 of the 40 rows; the other 12 were scored at the
    # end with the best and the default weights, inside the one run's judge calls counted above.
    assert all(len(t.read_text().splitlines()) == 28 for t in trials)
    held = next(tmp_path.glob("multirun/*/*/holdout/best/results.jsonl")).read_text().splitlines()
    assert len(held) == 12 and not {json.loads(h)["id"] for h in held} & {
        json.loads(line)["id"] for line in trials[0].read_text().splitlines()
    }
    assert "held-out rows: 12; answer_similarity/agreement/spearman (maximize)" in result.stdout
    assert re.search(
        r"the tuned settings (beat|are worse than|do not clearly beat) the defaults", result.stdout
    )
    metric = "answer_similarity/agreement/spearman"
    for key in (f"holdout/best/{metric}", f"holdout/default/{metric}", "holdout/difference"):
        assert key in parent.data.metrics
    difference = parent.data.metrics["holdout/difference"]
    low, high = (
        parent.data.metrics["holdout/difference_ci_low"],
        parent.data.metrics["holdout/difference_ci_high"],
    )
    assert low <= difference <= high
    assert "Held-out rows" in next(tmp_path.glob("multirun/*/*/sweep.html")).read_text()


@slow
def test_a_nan_objective_is_the_worst_value_and_does_not_stop_optuna(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    judge_server.responder = lambda request: "not json"  # every item unscored: no Spearman
    result = run_cli(
        [
            "-m",
            "sweep=tune_penalties",
            "hydra.sweeper.n_trials=2",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "model.max_retries=0",
            "model.reply_retries=0",
            "dataset=sas_squad",
            "dataset.limit=2",
            "max_unscored_rate=1.0",
            "tracking=none",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("reported to the sweeper as -inf, the worst value") == 2
    assert [row[4] for row in table_rows(result.stdout)] == ["–", "–"]
    assert "best: none; no job produced a value of answer_similarity/agreement/spearman" in result.stdout


@slow
def test_a_preset_without_multirun_or_with_a_bad_objective_stops_before_any_job(tmp_path: Path) -> None:
    result = run_cli(["sweep=penalties_grid", "scorer=answer_similarity"], cwd=tmp_path)
    assert result.returncode == 2
    assert "sweep=penalties_grid is a sweep preset" in result.stderr and "add -m" in result.stderr
    # tune_penalties ranks by answer_similarity's agreement: without that scorer, no trial can count.
    result = run_cli(["-m", "sweep=tune_penalties", "dataset=sas_squad", "scorer=token_f1"], cwd=tmp_path)
    assert result.returncode == 2
    assert "scorer 'answer_similarity' is not selected" in result.stderr
    assert not list(tmp_path.glob("multirun/*/*/*/run.json"))


def test_a_single_run_with_nothing_scored_names_no_sweeper(scripted: ScriptedModel, tmp_path: Path) -> None:
    # Before: "objective ... is NaN for this run ...; reported to the sweeper as -inf", with no sweeper.
    scripted.responder = lambda request: "not json"  # every item unscored: no mean
    args = ["scorer=answer_similarity", *fake_model(scripted), "model.max_retries=0", "model.reply_retries=0"]
    done = run_cli([*args, "dataset.limit=2", "max_unscored_rate=1", "tracking=none"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "unscored" in done.stdout and "sweeper" not in done.stderr and "NaN" not in done.stderr
    assert Objective("m", "maximize").returned() == -math.inf  # what the task returns still


def test_nan_returns_the_worst_value_for_the_direction() -> None:
    assert Objective("m", "maximize", math.nan).returned() == -math.inf
    assert Objective("m", "minimize", math.nan).returned() == math.inf
    assert Objective("m", "minimize", 0.25).returned() == 0.25
    ranked = sorted([0.2, math.nan, 0.9], key=Objective("m", "minimize").rank)
    assert ranked[:2] == [0.2, 0.9] and math.isnan(ranked[2])


def test_the_objective_defaults_to_the_first_scorers_mean_and_is_checked_before_any_call() -> None:
    assert of_config(compose(["scorer=[token_f1,exact_match]"])) == Objective("token_f1/mean")
    tuned = compose(["sweep=tune_penalties", "scorer=answer_similarity", "dataset=sas_squad"])
    assert of_config(tuned) == Objective("answer_similarity/agreement/spearman", "maximize")
    errors = {
        "sweep=tune_penalties": "scorer 'answer_similarity' is not selected",
        "objective.metric=token_f1/agreement/spearman": "set dataset.human_score=COLUMN",
        "objective.metric=token_f1/median": "unknown metric",
        "objective.direction=up": "choose maximize or minimize",
    }
    for override, message in errors.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            of_config(compose(["scorer=token_f1", override]))


def test_the_optuna_preset_searches_the_penalties_in_the_objectives_direction() -> None:
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(
            "config", ["sweep=tune_penalties", "objective.direction=minimize"], return_hydra_config=True
        )
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "minimize"
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and sweeper.sampler.seed is not None
    assert set(sweeper.params) == {"penalties.missing", "penalties.contradiction", "penalties.extra_info"}
    assert all(str(v).startswith("interval(") for v in sweeper.params.values())
