"""What evalframe's command line skips of Hydra's work changes nothing a user sees: the mode still
comes from -m, or from hydra.mode when the command line sets it, and Hydra is left as it was; and
litellm is imported ahead only in a process that calls a model."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from hydra._internal.hydra import Hydra

from tests.conftest import run_cli

QUICK = ["scorer=exact_match", "tracking=none", "dataset.limit=2"]


def test_the_mode_comes_from_minus_m_or_from_hydra_mode_on_the_command_line(tmp_path: Path) -> None:
    before = Hydra.get_mode
    for name in "abc":
        (tmp_path / name).mkdir()
    single = run_cli([*QUICK], tmp_path / "a")
    swept = run_cli(["-m", *QUICK, "penalties.missing=0.1,0.2"], tmp_path / "b")
    by_key = run_cli(["hydra.mode=MULTIRUN", *QUICK, "penalties.missing=0.1,0.2"], tmp_path / "c")
    assert [r.returncode for r in (single, swept, by_key)] == [0, 0, 0], by_key.stderr
    assert list((tmp_path / "a").glob("outputs/*/*/results.jsonl"))
    for sweep in ("b", "c"):  # two jobs each, as a sweep
        assert len(list((tmp_path / sweep).glob("multirun/*/*/*/results.jsonl"))) == 2, sweep
    assert Hydra.get_mode is before  # put back after each command


def test_litellm_is_preloaded_where_the_jobs_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep on joblib's or Ray's launcher runs its jobs (a sharded run's shards) in other processes:
    # the command's own process calls no model, so it does not import litellm beside them.
    from evalframe.models import loader

    # The module (the package's attribute evalframe.cli.main is the function of that name).
    main = importlib.import_module("evalframe.cli.main")

    started: list[str] = []
    monkeypatch.setattr(loader, "preload", lambda: started.append("litellm"))
    for args, preloads in (
        (["scorer=factuality"], True),
        (["-m", "shards=2"], True),  # Hydra's basic launcher: the shards run in this process
        (["-m", "shards=2", "hydra/launcher=basic"], True),
        (["-m", "shards=2", "hydra/launcher=joblib"], False),
        (["--multirun", "penalties.missing=0.1,0.3", "hydra/launcher=ray"], False),
        (["rescore", "run_id=abc", "-m", "hydra/launcher=joblib"], False),
        (["hydra/launcher=joblib", "scorer=factuality"], True),  # no sweep: the one job runs here
        (["scorer=factuality", "--help"], False),
    ):
        started.clear()
        main._preload(args)
        assert bool(started) is preloads, args
