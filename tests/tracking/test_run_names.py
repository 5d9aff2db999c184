"""A run's name says what differs from the runs beside it (the overrides typed, shortened) and when it
started: before, every run of the sample with one scorer was `sample-semantic_similarity`."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from evalframe.tracking import sweeps

CONFIG = {"dataset": {"name": "sample"}, "scorers": {"answer_similarity": {}}, "tracking": {}}
AT = datetime(2026, 3, 1, 14, 3, 41).timestamp()


def test_the_name_carries_what_the_command_line_changed_and_the_time() -> None:
    typed = [
        "scorer=answer_similarity",
        "penalties.missing=0.3",
        "tracking.uri=sqlite:///x.db",
        "concurrency=4",
    ]
    assert sweeps.run_name(CONFIG, typed, AT) == "sample · answer_similarity · penalties.missing=0.3 · 14:03"
    assert sweeps.run_name(CONFIG, [], AT) == "sample · answer_similarity · 14:03"
    assert sweeps.run_name(CONFIG, []) == "sample · answer_similarity"  # no start known: no time


def test_the_overrides_are_shortened_and_secrets_left_out() -> None:
    typed = [
        "model=local",
        "model.api_base=http://127.0.0.1:8000/v1/with/a/long/path",
        "model.api_key=sk-secret-value",
        "+scorers.answer_similarity.scale=10",
        "dataset=chat_sample",
        "hydra/launcher=joblib",
        "dataset.limit=5",
        "reason=llm",
    ]
    name = sweeps.run_name(CONFIG, typed, AT)
    assert name == (
        "sample · answer_similarity · model=local model.api_base=127.0.0.1:8000/v1/with/… "
        "answer_similarity.scale=10 dataset.limit=5 +1 more · 14:03"
    )
    assert "sk-secret" not in name and "api_key" not in name


def test_a_sweep_names_its_swept_keys_even_those_that_only_say_how_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(sweeps.SWEPT, '["concurrency"]')
    assert sweeps.run_name(CONFIG, ["concurrency=4"]) == "sample · answer_similarity · concurrency=4"


def test_a_set_run_name_is_the_name() -> None:
    config = {**CONFIG, "tracking": {"run_name": "mine"}}
    assert sweeps.run_name(config, ["penalties.missing=0.3"], time.time()) == "mine"
