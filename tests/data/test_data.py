"""Datasets: column mapping, JSON serialisation of non-string values, errors that name file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalframe.data.rows import load_rows, require
from evalframe.errors import DataError
from evalframe.paths import SAMPLE_DATASET


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_sample_covers_every_case_the_docs_promise() -> None:
    rows = load_rows({"path": None})
    assert len(rows) >= 24
    categories = {row.extra["category"] for row in rows}
    for needed in (
        "exact",
        "paraphrase",
        "partial",
        "missing",
        "contradiction",
        "extra information",
        "empty output",
        "non-string ground truth",
    ):
        assert needed in categories
    assert sum(c.startswith("seed") for c in categories) >= 3
    assert len({r.id for r in rows}) == len(rows)
    assert SAMPLE_DATASET.is_file()


def test_non_string_ground_truth_becomes_json_text() -> None:
    rows = {r.id: r for r in load_rows({"path": None})}
    assert rows["nonstring-number"].ground_truth == "8"
    assert rows["nonstring-list"].ground_truth == '["red", "green", "blue"]'
    assert json.loads(rows["nonstring-object"].ground_truth or "") == {"product": "iPhone", "year": 2007}


def test_column_mapping_and_line_numbers_as_ids(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", ['{"q": "a", "ref": "b"}', "", '{"q": "c", "ref": "d"}'])
    rows = load_rows({"path": str(path), "columns": {"input": "q", "ground_truth": "ref"}})
    assert [(r.id, r.input, r.ground_truth, r.output) for r in rows] == [
        ("1", "a", "b", None),
        ("3", "c", "d", None),
    ]


def test_limit(tmp_path: Path) -> None:
    assert len(load_rows({"path": None, "limit": 5})) == 5


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"input": "a"}', '{"input": '], r"d\.jsonl, line 2: not valid JSON"),
        (['{"input": "a"}', "[1, 2]"], r"line 2: expected a JSON object"),
        (['{"question": "a"}'], r"line 1: no 'input' field .* dataset\.columns\.input .*found: question"),
        (['{"id": 1, "input": "a"}', '{"id": 1, "input": "b"}'], r"line 2: id '1' repeats the id of line 1"),
        (['{"input": null}'], r"line 1: the input \('input'\) is empty"),
        (['{"input": "a"}', '{"input": "  "}'], r"line 2: the input \('input'\) is empty"),
    ],
)
def test_bad_rows_name_the_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = write(tmp_path / "d.jsonl", lines)
    with pytest.raises(DataError, match=message):
        load_rows({"path": str(path)})


def test_invalid_utf8_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"input": "caf\xe9"}\n')
    with pytest.raises(DataError, match="not valid UTF-8"):
        load_rows({"path": str(path)})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"cannot open dataset .*set dataset\.path"):
        load_rows({"path": str(tmp_path / "nope.jsonl")})


def test_required_field_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", ['{"input": "a", "ground_truth": "x"}', '{"input": "b"}'])
    rows = load_rows({"path": str(path)})
    with pytest.raises(DataError, match=r"line 2 \(id 2\): no ground_truth, which scorer x needs"):
        require(rows, str(path), "ground_truth", "scorer x needs")


def test_csv_with_quoted_commas_and_newlines(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('input,ground_truth\n"Paris, France","a\nb"\n', encoding="utf-8")
    [row] = load_rows({"path": str(path), "format": "csv"})
    assert row.input == "Paris, France" and row.ground_truth == "a\nb"


def test_wrong_types_become_text_as_the_reference_system_does(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", ['{"input": 12, "ground_truth": true, "output": {"a": [1, 2]}}'])
    [row] = load_rows({"path": str(path)})
    assert (row.input, row.ground_truth, row.output) == ("12", "true", '{"a": [1, 2]}')


def test_rows_that_fit_in_one_window_are_read_once_and_more_are_streamed_again() -> None:
    from evalframe.data.rows import Row, Rows

    reads = []

    def source(n: int) -> Rows:
        def read() -> Any:
            reads.append(n)
            return (Row(id=str(i), input=f"q{i}", ground_truth=None, output=None, line=i) for i in range(n))

        return Rows(read, "memory")

    small = source(3)
    small.validate(lambda window: None, size=3)
    assert [r.id for r in small] == [r.id for r in small] == ["0", "1", "2"]
    assert reads == [3]  # scored from what validate read: a remote source is asked once
    large = source(5)
    large.validate(lambda window: None, size=3)
    assert [r.id for r in large] == ["0", "1", "2", "3", "4"]
    assert reads == [3, 5, 5]  # two windows: read again as a stream, memory holds one window
