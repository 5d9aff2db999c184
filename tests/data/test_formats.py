"""One table of dataset formats (evalframe.data.formats) for the command line, the Python API and the
rows reader: a .json array is read by each of them (the API picks the format by the file's suffix), and
a format that is not one is refused naming every format there is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalframe import evaluate
from evalframe.data import formats
from evalframe.data.rows import Rows
from evalframe.errors import DataError
from tests.conftest import run_cli

ROWS = [
    {"id": "a", "input": "2+2?", "ground_truth": "4", "output": "4"},
    {"id": "b", "input": "1+1?", "ground_truth": "2", "output": "3"},
]


@pytest.fixture
def qa_json(tmp_path: Path) -> Path:
    path = tmp_path / "qa.json"
    path.write_text(json.dumps(ROWS))
    return path


def test_the_python_api_reads_a_json_array(qa_json: Path, tmp_path: Path) -> None:
    result = evaluate(str(qa_json), "exact_match", output_dir=tmp_path / "run")
    assert result.means["exact_match"] == 0.5


def test_the_command_line_reads_it_as_dataset_json(qa_json: Path, tmp_path: Path) -> None:
    done = run_cli(
        ["dataset=json", f"dataset.path={qa_json}", "scorer=exact_match", "tracking=none"], tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "exact_match" in done.stdout and "0.500" in done.stdout


def test_the_named_format_reads_the_file_and_an_unknown_one_lists_them_all(qa_json: Path) -> None:
    with pytest.raises(DataError, match=r"line 1: expected a JSON object, got list"):
        list(iter(Rows.from_config({"path": str(qa_json), "format": "jsonl"})))
    with pytest.raises(DataError, match="is not a dataset format") as refused:
        list(iter(Rows.from_config({"path": str(qa_json), "format": "xlsx"})))
    assert all(f.name in str(refused.value) for f in formats.FORMATS if f.name != "records")


def test_every_file_format_has_a_dataset_option_of_its_name() -> None:
    from evalframe.paths import CONF_DIR

    assert {p.stem for p in (CONF_DIR / "dataset").glob("*.yaml")} >= {*formats.FILES, "mlflow_traces", "run"}
