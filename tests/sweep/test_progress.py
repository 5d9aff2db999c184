"""The whole of a sharded evaluation on one bar (evalframe.sweep.progress), read from the shards'
journals: what a look counts, and the bar a sharded command shows in a terminal in place of the
shards' own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evalframe.report import console as report
from evalframe.sweep.progress import Shards
from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel


def test_a_look_counts_the_journaled_items_and_the_rows_once_every_shard_started(tmp_path: Path) -> None:
    shards = Shards(tmp_path, 2)
    assert shards.look() == (0, None, 0)  # nothing started
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "run.json").write_text(json.dumps({"status": "running", "total": 3}))
    journal = tmp_path / "0" / "results.jsonl"
    journal.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "sco')  # the third is being written
    assert shards.look() == (2, None, 1)  # rows unknown while shard 1 has not started
    with journal.open("a") as f:
        f.write('res": {}}\n')
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "run.json").write_text(json.dumps({"status": "running", "total": 4}))
    (tmp_path / "1" / "results.jsonl").write_text('{"id": "d"}\n')
    assert shards.look() == (4, 7, 2)
    assert shards.look() == (4, 7, 2)  # a second look adds only what was appended: nothing


def test_a_sharded_command_shows_the_whole_evaluation_on_one_bar(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report.console, "_force_terminal", True)  # bars show only in a terminal
    args = ["-m", "shards=2", "scorer=answer_similarity", *fake_model(scripted), "dataset.limit=10"]
    done = run_cli([*args, "tracking=none"], tmp_path, {"OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 0, done.stderr
    assert re.search(r"scoring, 2 shards .* 10/10", done.stdout), done.stdout  # as the shards left it
    assert not re.search(r"calls \d+  cache hits \d+", done.stdout)  # no shard's own bar
