"""What evalframe's command line skips of Hydra's work changes nothing a user sees: the mode still
comes from -m, or from hydra.mode when the command line sets it, and Hydra is left as it was."""

from __future__ import annotations

from pathlib import Path

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
