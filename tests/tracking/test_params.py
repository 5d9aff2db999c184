"""The params a run logs to MLflow are the settings it ran with: the judge's (`model.*`) only when a
scorer asked a judge. Real runs, logged to MLflow on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalframe.run import pipeline
from evalframe.tracking.log import params
from tests.conftest import compose, fake_model
from tests.scripted import NAME, ScriptedModel


@pytest.mark.slow
def test_a_run_whose_scorers_call_no_model_logs_no_model_params(
    tmp_path: Path, scripted: ScriptedModel
) -> None:
    """Before: an offline run logged model.name=openai/gpt-4o-mini and model.api_key_env=OPENAI_API_KEY."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logged = {}
    for name, overrides in (
        ("offline", ["scorer=[exact_match,token_f1]"]),
        ("judged", ["scorer=[answer_similarity,token_f1]", *fake_model(scripted)]),
    ):
        config = compose([*overrides, "dataset.limit=2", f"tracking.uri={uri}", "tracking.traces=false"])
        result, code = pipeline.evaluate(config, tmp_path / name)
        assert code == 0 and result.run_id
        logged[name] = MlflowClient(uri).get_run(result.run_id).data.params
    assert not [k for k in logged["offline"] if k.startswith("model.")], logged["offline"]
    assert logged["offline"]["scorers.exact_match.require_ground_truth"] == "True"  # the rest as before
    assert scripted.count() > 0 and logged["judged"]["model.name"] == NAME


@pytest.mark.parametrize(
    ("scorers", "judged"),
    [
        ("scorer=semantic_similarity", False),  # embedding models: its own `models`, no judge
        ("scorer=[semantic_similarity,factuality]", True),
        ("scorers.factuality.models=[gpt,claude]", False),  # a panel: each judge's settings are its own
    ],
)
def test_the_judge_is_logged_when_a_scorer_asks_it(scorers: str, judged: bool) -> None:
    overrides = ["scorer=factuality", scorers] if scorers.startswith("scorers.") else [scorers]
    assert ("model.name" in params(compose(overrides))) is judged
