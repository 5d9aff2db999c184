"""`--help` on every command: its usage as the user types it (`evalframe ...`), exit code 0, nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe.cli import ui
from tests.conftest import run_cli


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", ["rescore", "log-run", "compare", "runs", "align", "ui", "review"])
def test_every_command_prints_its_usage_and_runs_nothing(tmp_path: Path, command: str, flag: str) -> None:
    """Before: ui said `config error: LexerNoViableAltException: --help`, compare `cannot read '--help'`
    (exit 2), rescore `rescore needs one run_id=...`; their usage lines said `python -m evalframe`."""
    done = run_cli([command, flag], cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith(f"usage: evalframe {command} ")
    assert "python -m" not in done.stdout
    assert list(tmp_path.iterdir()) == []  # no store, no run directory: nothing ran


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["scorer=exact_match", "-h"]])
def test_a_runs_help_is_hydras_and_names_the_command_as_typed(tmp_path: Path, args: list[str]) -> None:
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "== Configuration groups ==" in done.stdout and "== Config ==" in done.stdout
    assert "python -m evalframe" not in done.stdout
    assert (
        "Other commands (each with --help):" in done.stdout and "evalframe compare baseline=" in done.stdout
    )
    assert list(tmp_path.iterdir()) == []


def test_ui_refuses_a_flag_with_its_usage(tmp_path: Path) -> None:
    """Before: `ui --port 5001` went to Hydra's override parser: LexerNoViableAltException."""
    done = run_cli(["ui", "--port", "5001"], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: ui: cannot read '--port'",
        *ui.USAGE.splitlines(),
    ]
