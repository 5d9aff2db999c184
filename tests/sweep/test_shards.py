"""One evaluation, sharded (`-m shards=N`): which rows each shard scores, how the command line becomes a
sweep of shards, and the merged whole against the same evaluation run unsharded (basic launcher, in
process, through the scripted judge). Launchers' worker processes and a killed shard:
tests/e2e/test_shards.py."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from evalframe.data.shards import selected, shard_of
from evalframe.errors import ConfigError
from evalframe.sweep.callback import parallel_jobs
from evalframe.sweep.shards import expand
from tests.conftest import fake_model, run_cli, sweep_runs
from tests.scripted import ScriptedModel

GATE = "+gate.min_score.answer_similarity=0.4"  # shard 0 alone would pass it, the whole fails it


def test_a_rows_shard_is_the_sha256_of_its_id_and_every_row_is_in_exactly_one() -> None:
    ids = [f"q{n}" for n in range(200)]
    for n in (1, 2, 3, 7):
        parts = [[i for i in ids if shard_of(i, n) == k] for k in range(n)]
        assert sorted(i for part in parts for i in part) == sorted(ids)  # each row once
        assert all(len(p) > 200 / n / 2 for p in parts)  # spread, not all in one
    expected = int.from_bytes(hashlib.sha256(b"q17").digest()[:8], "big") % 3
    assert shard_of("q17", 3) == expected  # the same in every process (Python's hash() is salted)


def test_shards_n_becomes_a_sweep_of_its_shards() -> None:
    assert expand(["-m", "shards=3", "scorer=exact_match"]) == [
        "-m",
        "shards=3",
        "scorer=exact_match",
        "shard=range(0,3)",
    ]
    assert expand(["shards=3"]) == ["shards=3"]  # no -m: the run says to add it (below)
    assert expand(["-m", "shards=2", "shard=1"]) == ["-m", "shards=2", "shard=1"]  # one shard, as given
    for bad in ("0", "two", "1.5"):
        with pytest.raises(ConfigError, match="give one whole number"):
            expand(["-m", f"shards={bad}"])
    with pytest.raises(ConfigError, match=r"does not combine with a sweep \(penalties.missing=0.1,0.2\)"):
        expand(["-m", "shards=2", "penalties.missing=0.1,0.2"])
    with pytest.raises(ConfigError, match="sweep=penalties_grid"):
        expand(["-m", "shards=2", "sweep=penalties_grid"])


def test_a_shards_setting_is_checked_before_any_work() -> None:
    assert selected({"shards": None, "shard": None}) is None
    assert selected({"shards": 1, "shard": None}) is None  # one shard: the whole, as a plain run
    assert selected({"shards": 4, "shard": 3}) == (3, 4)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"shards": 3, "shard": None}, r"add -m \(evalframe -m shards=3"),
        ({"shards": None, "shard": 1}, "say how many shards"),
        ({"shards": 2, "shard": 2}, "a number from 0 to 1"),
        ({"shards": 0, "shard": 0}, "1 or more"),
        ({"shards": 2, "shard": 0, "tune": {"holdout": 0.3}}, "tune.holdout"),
    ]
    for config, message in cases:
        with pytest.raises(ConfigError, match=message):
            selected(config)


def test_the_shards_share_the_rate_budget_like_a_sweeps_jobs() -> None:
    joblib = {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs": 8}
    hydra = {"launcher": joblib, "sweeper": {}, "overrides": {"task": expand(["-m", "shards=3"])[1:]}}
    assert parallel_jobs(OmegaConf.create({"hydra": hydra})) == 3  # model.rpm/tpm split 3 ways


def test_shards_without_multirun_is_a_usage_error(scripted: ScriptedModel, tmp_path: Path) -> None:
    result = run_cli(["shards=2", "scorer=exact_match", "tracking=none"], tmp_path)
    assert result.returncode == 2
    assert "shards=2 runs the evaluation as 2 jobs: add -m" in result.stderr
    assert "Traceback" not in result.stderr


def _scores(path: Path) -> dict[str, float | None]:
    return {
        item["id"]: item["scores"]["answer_similarity"]["score"]
        for item in map(json.loads, path.read_text().splitlines())
    }


@pytest.mark.slow
def test_a_sharded_evaluation_is_the_unsharded_one(scripted: ScriptedModel, tmp_path: Path) -> None:
    common = ["scorer=answer_similarity", *fake_model(scripted), "dataset.limit=10", GATE]
    env = {"OPENAI_API_KEY": "sk-x", "EVALFRAME_CACHE_DIR": str(tmp_path / "one")}  # each asks the judge
    (tmp_path / "one").mkdir()
    whole = run_cli(common, tmp_path / "one", env)
    assert whole.returncode == 1, whole.stderr  # the gate fails on the whole
    (tmp_path / "sharded").mkdir()
    env["EVALFRAME_CACHE_DIR"] = str(tmp_path / "sharded")
    sharded = run_cli(["-m", "shards=2", *common], tmp_path / "sharded", env)
    assert sharded.returncode == 1, sharded.stderr  # the gate over all items, not each shard's own

    # Each shard scored its own rows (by hash), and the two together are the whole, score for score.
    [sweep_dir] = (tmp_path / "sharded").glob("multirun/*/*")
    [one] = (tmp_path / "one").glob("outputs/*/*/results.jsonl")
    expected = _scores(one)
    parts = [_scores(sweep_dir / str(k) / "results.jsonl") for k in (0, 1)]
    assert all(shard_of(i, 2) == k for k in (0, 1) for i in parts[k]) and all(parts)
    assert {**parts[0], **parts[1]} == expected
    assert _scores(sweep_dir / "results.jsonl") == expected  # the merged file
    assert "job 0: shard=0" in sharded.stdout and "job 1: shard=1" in sharded.stdout
    assert "shards: 2 of 2 finished; the whole evaluation, 10 items" in sharded.stdout
    assert "gate: FAILED (exit code 1)" in sharded.stdout
    assert re.search(r"model calls: [1-9]\d*, cache hits: \d+; tokens", sharded.stdout)  # the shards' sum

    # The same mean, interval and gate: in the summary printed, in run.json and in MLflow.
    table = [line for line in whole.stdout.splitlines() if line.startswith("│ answer_similarity")]
    assert table and table == [x for x in sharded.stdout.splitlines() if x.startswith("│ answer_similarity")]
    run = json.loads(next((tmp_path / "one").glob("outputs/*/*/run.json")).read_text())
    merged = json.loads((sweep_dir / "run.json").read_text())
    assert merged["means"] == run["means"] and merged["gate"] == run["gate"]
    assert merged["gate"]["exit_code"] == 1 and merged["status"] == "finished"
    for name in ("0", "1"):  # a shard passes its own gate: the whole is gated
        assert json.loads((sweep_dir / name / "run.json").read_text())["gate"]["exit_code"] == 0
    _same_in_mlflow(tmp_path)


def _same_in_mlflow(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'one' / 'mlflow.db'}")
    [single] = client.search_runs([client.get_experiment_by_name("evalframe").experiment_id])  # type: ignore[union-attr]
    parent, children = sweep_runs(f"sqlite:///{tmp_path / 'sharded' / 'mlflow.db'}")
    assert len(children) == 2 and parent.info.status == "FINISHED"
    figures = ("mean", "mean_ci_low", "mean_ci_high", "std", "min", "max", "scored", "unscored")
    for figure in figures:
        key = f"answer_similarity/{figure}"
        assert parent.data.metrics[key] == single.data.metrics[key], key
    assert parent.data.tags["evalframe.gate"] == single.data.tags["evalframe.gate"] == "failed"
    assert parent.data.tags["evalframe.shards"] == "2"
    artifacts = {a.path for a in client_of(tmp_path).list_artifacts(parent.info.run_id)}
    assert {"results.jsonl", "items.json", "report.html"} <= artifacts
    assert sum(c.data.metrics["answer_similarity/scored"] for c in children) == 10


def client_of(tmp_path: Path) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path / 'sharded' / 'mlflow.db'}")
