"""Every dataset format evalframe reads, in one table: its `dataset.format` value, the conf/dataset option
that selects it, and the file suffixes it is told by. The command line (`dataset=NAME`), the Python API
(`evaluate("qa.json", ...)`) and the readers (evalframe.run.sources, evalframe.data.rows) all go by it,
so they cannot disagree on which files are read how."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalframe.errors import DataError


@dataclass(frozen=True)
class Format:
    name: str  # dataset.format
    suffixes: tuple[str, ...] = ()  # a file with one of these is read in this format
    about: str = ""


FORMATS = (
    Format("jsonl", (".jsonl", ".ndjson"), "a JSON object per line"),
    Format("csv", (".csv",), "UTF-8 with a header row"),
    Format("json", (".json",), "one JSON array of objects"),
    Format("mlflow_traces", (), "an MLflow experiment's traces"),
    Format("run", (), "an earlier run's results.jsonl"),
    Format("records", (), "rows handed over in memory (the Python API)"),
)
FILES = tuple(f.name for f in FORMATS if f.suffixes)  # read from a file by evalframe.data.rows
_BY_NAME = {f.name: f for f in FORMATS}


def named(name: str) -> Format:
    if name not in _BY_NAME:
        listed = ", ".join(f"{f.name} ({f.about})" for f in FORMATS if f.name != "records")
        raise DataError(f"dataset.format={name!r} is not a dataset format; use one of {listed}")
    return _BY_NAME[name]


def of_file(path: str | Path) -> Format | None:
    """The format a file's suffix says (None: no file format has it)."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FORMATS if suffix in f.suffixes), None)


def file_suffixes() -> str:
    """The suffixes of the file formats, for errors: '.jsonl, .ndjson, .csv or .json'."""
    suffixes = [s for f in FORMATS for s in f.suffixes]
    return ", ".join(suffixes[:-1]) + f" or {suffixes[-1]}"
