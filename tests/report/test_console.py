"""What the console shows fits the terminal it is shown on, and ends saying where to look."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from evalframe.report import console as report
from evalframe.results.summary import COLUMNS
from tests.conftest import run_cli

NAMES = ("answer_similarity", "answer_relevancy", "ground_truth_similarity", "exact_match")


def test_the_summary_fits_80_columns_without_cutting_a_scorer_name() -> None:
    rows = [[name, "0.399", "0.366", "0.000", "1.000", "28", "0", "0.0054"] for name in NAMES]
    console = Console(width=80, record=True)
    console.print(report._table("evalframe: 28 items", COLUMNS, rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # nothing cut: a long name folds onto the next line
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    for name in NAMES:
        assert name in first_column
    assert "0.0054" in text and "unscored" in text


@pytest.mark.slow
def test_a_finished_run_ends_with_its_files_and_a_view_command_the_shell_runs(tmp_path: Path) -> None:
    """Before: `results: PATH` at the end of the totals line, report.html never named, and
    `View: evalframe ui` also where `evalframe` is not on the PATH (make does not activate the venv)."""
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "evalframe").write_text("#!/bin/sh\n")
    (on_path / "evalframe").chmod(0o755)
    script = Path(sys.executable).parent / "evalframe"  # this installation's: a venv's bin/evalframe
    not_found = f"{script} ui" if script.is_file() else f"{sys.executable} -m evalframe ui"
    for path, command in ((os.defpath, not_found), (f"{on_path}{os.pathsep}{os.defpath}", "evalframe ui")):
        done = run_cli(["scorer=exact_match", "dataset.limit=3"], cwd=tmp_path, env={"PATH": path})
        assert done.returncode == 0, done.stderr
        report_line, results_line, view = done.stdout.splitlines()[-3:]
        [run_dir] = [
            d
            for d in tmp_path.glob("outputs/*/*")
            if report_line == f"report: {d.relative_to(tmp_path)}/report.html"
        ]
        # (compared whole: two runs in one second get DIR and DIR-1, and DIR is a prefix of DIR-1)
        assert report_line == f"report: {run_dir.relative_to(tmp_path)}/report.html"
        assert results_line == f"results: {run_dir.relative_to(tmp_path)}/results.jsonl"
        assert (run_dir / "report.html").is_file() and len(
            (run_dir / "results.jsonl").read_text().splitlines()
        ) == 3
        assert re.fullmatch(
            rf"View: {re.escape(command)}  ->  http://127\.0\.0\.1:5000/#/experiments/\d+/runs/\w+", view
        ), view
