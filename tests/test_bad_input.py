"""Bad input and config get one clear line and exit code 2 before any model call, never a traceback
or a hang: invalid numbers, byte-order marks, hostile rows, prompts and cache rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe import config as configs
from evalframe import pipeline
from evalframe.errors import EvalframeError
from tests.conftest import fake_model
from tests.scripted import ScriptedModel


def usage_error(overrides: list[str], out: Path) -> str:
    """The message of the usage error (exit code 2) a run with `overrides` stops with, composed and
    resolved as the command line does it."""
    with pytest.raises(EvalframeError) as raised:
        pipeline.evaluate(configs.resolve(configs.compose(overrides)), out)
    assert raised.value.exit_code == 2
    return str(raised.value)


def judged(scripted: ScriptedModel, *extra: str) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "dataset.limit=3", *extra]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("concurrency=0", "concurrency=0: it should be greater than 0"),  # waited forever
        ("concurrency=-1", "concurrency=-1: it should be greater than 0"),  # a traceback
        ("max_unscored_rate=abc", "max_unscored_rate='abc': it should be a valid number"),
        ("max_unscored_rate=1.5", "max_unscored_rate=1.5: it should be less than or equal to 1"),
        ("gate.pass_threshold=abc", "gate.pass_threshold='abc': it should be a valid number"),
        ("gate.pass_threshold={answer_similarity: x}", "gate.pass_threshold.answer_similarity='x'"),
        ("+gate.min_score.answer_similarity=high", "gate.min_score.answer_similarity='high'"),
        ("penalties.contradiction=-1", "penalties.contradiction=-1: it should be greater than or equal to 0"),
        ("penalties.missing=-0.1", "penalties.missing=-0.1: it should be greater than or equal to 0"),
        (
            "scorers.answer_similarity.scale=-1",
            "scorers.answer_similarity.scale=-1: it should be greater than 0",
        ),
        ("model.max_retries=-1", "model.max_retries=-1: it should be greater than or equal to 0"),
        ("model.reply_retries=-1", "model.reply_retries=-1"),
        ("model.timeout=-5", "model.timeout=-5: it should be greater than 0"),
        ("model.timeout=0", "model.timeout=0: it should be greater than 0"),
    ],
)
def test_bad_numbers_stop_the_run_before_any_call(
    override: str, message: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    assert message in usage_error(judged(scripted, override), tmp_path)
    assert scripted.count() == 0


def test_target_numbers_are_checked_too(scripted: ScriptedModel, tmp_path: Path) -> None:
    error = usage_error(
        judged(scripted, "target=http", "target.url=http://127.0.0.1:9/x", "target.max_retries=-3"), tmp_path
    )
    assert "target.max_retries=-3" in error
    assert scripted.count() == 0


def test_good_numbers_pass(scripted: ScriptedModel) -> None:
    configs.resolve(
        configs.compose(judged(scripted, "concurrency=1", "penalties.missing=0", "max_unscored_rate=1"))
    )
