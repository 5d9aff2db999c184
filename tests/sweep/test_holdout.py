"""Tuning that holds out (tune.holdout): the seeded, stratified split, the jobs scoring the tuning part
only, and the held-out check of the best settings against the defaults."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evalframe.data import rows as data, splits
from evalframe.errors import ConfigError
from evalframe.results.intervals import Interval
from evalframe.results.jobs import Holdout, best_of, read_jobs
from evalframe.results.objective import item_statistic
from evalframe.results.scores import Objective
from evalframe.run import pipeline
from evalframe.sweep import holdout
from tests import short_answer_judge
from tests.conftest import compose, fake_model
from tests.scripted import ScriptedModel


def _rows(n: int = 100) -> list[data.Row]:
    return [
        data.Row(f"r{i}", "q", "a", "a", i, human=float(i % 4 == 0) * 2 or float(i % 2)) for i in range(n)
    ]


def test_the_split_is_seeded_and_stratified_by_human_score() -> None:
    rows = _rows()
    held = splits.holdout_ids(rows, 0.3, seed=0)
    assert len(held) == 30 and splits.holdout_ids(rows, 0.3, seed=0) == held
    assert splits.holdout_ids(rows, 0.3, seed=1) != held
    everyone = Counter(r.human for r in rows)
    out = Counter(r.human for r in rows if r.id in held)
    assert all(abs(out[k] - 0.3 * n) <= 1 for k, n in everyone.items())  # each score's share held out
    whole = data.Rows.of(rows)
    whole.validate(lambda window: None)
    tuning = splits.tune_part(whole, {"holdout": 0.3})
    held_part = splits.tune_part(whole, {"holdout": 0.3, "part": "holdout"})
    assert len(tuning) == 70 and len(held_part) == 30
    assert {r.id for r in tuning} | {r.id for r in held_part} == {r.id for r in rows}
    assert {r.id for r in held_part} == held
    assert splits.tune_part(whole, {"holdout": None}) is whole


def test_a_split_that_cannot_work_says_what_to_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        splits.holdout_ids(_rows(), 1.5, 0)
    with pytest.raises(ConfigError, match="leaves a part empty"):
        splits.holdout_ids(_rows(1), 0.3, 0)
    # A score held by one row cannot be stratified: a plain seeded split, said once.
    rows = [data.Row(f"r{i}", "q", "a", "a", i, human=float(i)) for i in range(10)]
    assert len(splits.holdout_ids(rows, 0.3, 0)) == 3 and "split at random" in capsys.readouterr().err
    whole = data.Rows.of(rows)
    whole.validate(lambda window: None)
    with pytest.raises(ConfigError, match="part=test: choose tune or holdout"):
        splits.tune_part(whole, {"holdout": 0.3, "part": "test"})


def test_the_verdict_follows_the_objectives_direction() -> None:
    up = Objective("s/agreement/spearman")
    assert Holdout(up, 10, 0.6, 0.5, Interval(0.02, 0.2)).outcome == "better"
    assert Holdout(up, 10, 0.6, 0.5, Interval(-0.02, 0.2)).outcome == "unclear"
    down = Objective("s/agreement/mae", "minimize")
    assert Holdout(down, 10, 0.2, 0.3, Interval(-0.2, -0.02)).outcome == "better"
    assert Holdout(down, 10, 0.4, 0.3, Interval(0.02, 0.2)).outcome == "worse"
    assert (
        "the tuned settings beat the defaults on the held-out rows"
        in Holdout(up, 10, 0.6, 0.5, Interval(0.02, 0.2)).lines()[-1]
    )
    assert item_statistic("s/std", {}) is None and item_statistic("s/agreement/n", {}) is None
    spearman = item_statistic("s/agreement/spearman", {"dataset": {"human_range": [0, 2]}})
    assert spearman is not None and spearman([0.1, 0.5, 0.9], [0, 1, 2]) == pytest.approx(1.0)
    mean = item_statistic("s/mean", {})
    assert mean is not None and mean([0.2, math.nan, 0.4], [0, 0, 0]) == pytest.approx(0.3)


@pytest.mark.slow
def test_the_best_and_the_default_settings_score_the_held_out_rows(
    tmp_path: Path, scripted: ScriptedModel
) -> None:
    """A sweep's job scored the tuning part; the check scores the other part with its settings and the
    defaults, the second from the judge cache."""
    scripted.responder = short_answer_judge.judge
    base = [
        "scorer=answer_similarity",
        *fake_model(scripted),
        "dataset=sas_squad",
        "dataset.limit=20",
        "tracking=none",
        "tune.holdout=0.3",
        "objective.metric=answer_similarity/agreement/spearman",
    ]
    job = [*base, "penalties.missing=0.6", "penalties.contradiction=0.1"]
    sweep_dir = tmp_path / "sweep"
    tuned = pipeline.evaluate(compose(job), sweep_dir / "0", overrides=job)[0]
    assert tuned.count == 14  # the job saw the tuning part only
    objective = Objective("answer_similarity/agreement/spearman")
    jobs = read_jobs(sweep_dir)
    swept = ["penalties.missing", "penalties.contradiction"]
    best = best_of(sweep_dir, jobs, objective, swept)
    calls = scripted.count()
    found = holdout.check(OmegaConf.create({"tune": {"holdout": 0.3}}), sweep_dir, best, swept, objective)
    assert found is not None and found.rows == 6
    held = [
        json.loads(line)["id"] for line in (sweep_dir / "holdout/best/results.jsonl").read_text().splitlines()
    ]
    default = (sweep_dir / "holdout/default/results.jsonl").read_text().splitlines()
    assert len(held) == 6 and not set(held) & {i.id for i in tuned.items}
    assert {json.loads(line)["id"] for line in default} == set(held)
    best_config = json.loads((sweep_dir / "holdout/best/run.json").read_text())["config"]
    default_config = json.loads((sweep_dir / "holdout/default/run.json").read_text())["config"]
    assert best_config["penalties"]["missing"] == 0.6 and default_config["penalties"]["missing"] == 0.15
    # The default settings re-score cached replies: the held-out rows cost one run's calls.
    steps = [s for line in default for s in json.loads(line)["scores"]["answer_similarity"]["steps"]]
    assert steps and all(s["cached"] for s in steps) and scripted.count() > calls
    assert found.best != found.default and found.interval.known
    assert found.interval.low <= found.difference <= found.interval.high
    metrics = found.metrics()
    assert metrics["holdout/best/answer_similarity/agreement/spearman"] == found.best
    assert metrics["holdout/default/answer_similarity/agreement/spearman"] == found.default
    assert {"holdout/difference_ci_low", "holdout/difference_ci_high"} <= set(metrics)
    # Nothing held out, or no best job: nothing to check.
    assert (
        holdout.check(OmegaConf.create({"tune": {"holdout": None}}), sweep_dir, best, swept, objective)
        is None
    )
    assert (
        holdout.check(OmegaConf.create({"tune": {"holdout": 0.3}}), sweep_dir, None, swept, objective) is None
    )
