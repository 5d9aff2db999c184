"""run.json is typed and versioned (evalframe.results.manifest): every reader goes through Manifest.read,
a record from a newer evalframe is refused in one line (never misread), and one written before records
carried their format (the same fields) still reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalframe.errors import ConfigError
from evalframe.results.journal import Journal, resume_dir
from evalframe.results.manifest import FORMAT, MANIFEST, Manifest
from tests.conftest import run_cli


def _finished(directory: Path) -> Journal:
    journal = Journal(directory)
    journal.start({"scorers": {"exact_match": {}}}, total=0)
    journal.finish({"exact_match": 1.0})
    return journal


def test_a_run_record_says_its_format_and_reads_back_by_attribute(tmp_path: Path) -> None:
    journal = _finished(tmp_path)
    journal.logged("abc")
    on_disk = json.loads((tmp_path / MANIFEST).read_text())
    assert on_disk["format"] == FORMAT and on_disk["status"] == "finished"
    manifest = Manifest.read(tmp_path)
    assert manifest.finished and manifest.means == {"exact_match": 1.0} and manifest.mlflow_run_id == "abc"
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temporary file, renamed into place


def test_a_record_written_before_formats_reads_as_format_one(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({"status": "running", "total": 3, "config": {}}))
    assert Manifest.read(tmp_path).total == 3


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", json.dumps({"status": "finished", "format": 99})])
def test_a_record_it_cannot_read_is_one_line_naming_it(text: str, tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(ConfigError, match=str(tmp_path / MANIFEST)):
        Manifest.read(tmp_path)


def test_a_run_directory_from_a_newer_evalframe_is_refused_by_every_command(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _finished(run_dir)
    record = json.loads((run_dir / MANIFEST).read_text())
    (run_dir / MANIFEST).write_text(json.dumps({**record, "format": FORMAT + 1}))
    logged = run_cli(["log-run", str(run_dir)], tmp_path)
    assert logged.returncode == 2 and "Traceback" not in logged.stderr
    [line] = logged.stderr.strip().splitlines()
    assert "written by a newer evalframe" in line and f"format {FORMAT + 1}" in line
    with pytest.raises(ConfigError, match="newer evalframe"):
        resume_dir(str(run_dir), tmp_path, {})
