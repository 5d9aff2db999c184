"""A judge's `examples:` option (scorers.retrieval): each mistake one line naming the key, before any call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalframe.errors import ConfigError
from evalframe.scorers.retrieval import Retrieval


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"retrieve": 0}, "examples.retrieve=0: give the number of examples per item"),
        ({"retrieve": 2, "nearest": 1}, "unknown key(s) ['nearest']"),
        ({"retrieve": 2, "file": "nowhere.jsonl"}, "cannot read its examples"),
        ({"retrieve": 2, "file": "{bad}"}, "every line must be an example with output and verdict"),
    ],
)
def test_a_bad_examples_option_says_what_to_fix(tmp_path: Path, spec: dict[str, object], said: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "q"}) + "\n")
    if spec.get("file") == "{bad}":
        spec = {**spec, "file": str(bad)}
    elif "file" in spec:
        spec = {**spec, "file": str(tmp_path / str(spec["file"]))}
    else:
        good = tmp_path / "good.jsonl"
        good.write_text(json.dumps({"output": "a", "verdict": "pass"}) + "\n")
        spec = {**spec, "file": str(good)}
    with pytest.raises(ConfigError, match=r"^scorers\.j\.examples") as found:
        Retrieval.of(spec, "scorers.j.examples")
    assert said in str(found.value)


def test_the_pool_is_read_once_with_its_fields(tmp_path: Path) -> None:
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"id": "x", "output": "a", "verdict": "fail", "extra": 1}) + "\n\n")
    found = Retrieval.of({"file": str(pool), "retrieve": 3}, "k")
    assert found.pool == (
        {"input": None, "ground_truth": None, "output": "a", "verdict": "fail", "comment": None},
    )
    assert found.embedder.name == "local/all-MiniLM-L6-v2" and "retrieve 3 of" in found.text()
