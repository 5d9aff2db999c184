"""The dataset columns of retrieval-augmented and tool-using applications: contexts, their ids, tool
calls (as written, or in OpenAI's shape) and offered tools, mapped like the other columns, checked
row by row, and required before any model call by the scorers that need them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalframe.data.rows import Row, ToolCall, load_rows
from evalframe.errors import DataError
from evalframe.models.context import Context
from evalframe.results.scores import ScoreResult
from evalframe.run import pipeline
from evalframe.scorers.base import Scorer
from tests.conftest import compose
from tests.scripted import ScriptedModel


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_list_columns_are_read_and_openai_tool_calls_accepted_as_they_are(tmp_path: Path) -> None:
    openai_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps({"city": "Paris"})},
    }
    record = {
        "id": "a",
        "input": "Q?",
        "ground_truth": "A",
        "output": "A",
        "contexts": ["chunk one", 2],
        "context_ids": ["d1", 7],
        "reference_context_ids": ["d1"],
        "tool_calls": [openai_call],
        "expected_tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "time"}],
        "available_tools": ["time", {"type": "function", "function": {"name": "weather", "parameters": {}}}],
    }
    row = load_rows({"path": str(_jsonl(tmp_path / "d.jsonl", [record]))})[0]
    assert row.contexts == ["chunk one", "2"] and row.context_ids == ["d1", "7"]
    assert row.reference_context_ids == ["d1"]
    assert row.tool_calls == [ToolCall("weather", {"city": "Paris"})]
    assert row.expected_tool_calls == [ToolCall("weather", {"city": "Paris"}), ToolCall("time", {})]
    assert row.available_tools == ["time", "weather"]


def test_columns_are_mapped_and_csv_cells_hold_json_lists(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    cells = json.dumps(["first chunk, with a comma", "second"]).replace('"', '""')
    path.write_text(f'id,question,answer,retrieved\nx,Q?,A,"{cells}"\n', encoding="utf-8")
    columns = {"input": "question", "ground_truth": "answer", "contexts": "retrieved"}
    row = load_rows({"path": str(path), "format": "csv", "columns": columns})[0]
    assert row.contexts == ["first chunk, with a comma", "second"] and row.tool_calls is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("just text", r"line 1: 'contexts' must be a list \(a JSON list in a CSV cell\)"),
        ("[1, 2", r"line 1: 'contexts' is not a valid JSON list"),
        ({"a": 1}, r"line 1: 'contexts' must be a list, got dict"),
        ([None], r"line 1: 'contexts'\[0\] is null"),
    ],
)
def test_a_bad_contexts_value_names_the_line_and_column(tmp_path: Path, value: Any, message: str) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"input": "Q?", "contexts": value}])
    with pytest.raises(DataError, match=message):
        load_rows({"path": str(path)})


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"arguments": {}}], r"'tool_calls' holds .* not a tool call"),
        ([{"name": "f", "arguments": "{oops"}], r"the arguments of f are not valid JSON"),
        ([{"name": "f", "arguments": [1]}], r"the arguments of f must be an object"),
    ],
)
def test_a_bad_tool_call_says_how_to_write_one(tmp_path: Path, calls: list[Any], message: str) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"input": "Q?", "tool_calls": calls}])
    with pytest.raises(DataError, match=message):
        load_rows({"path": str(path)})


class _NeedsContexts(Scorer):
    """A scorer that cannot score without contexts: the run must stop before it is ever asked."""

    needs = ("contexts",)
    require_ground_truth = False

    def __init__(self) -> None:
        self.asked: list[Row] = []

    async def score(self, items: list[tuple[Row, str]], ctx: Context) -> list[ScoreResult]:
        self.asked.extend(row for row, _ in items)
        return [ScoreResult(1.0, "ok") for _ in items]


def test_a_scorer_needing_a_column_the_dataset_lacks_stops_before_any_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"id": "r1", "input": "Q?", "output": "A", "retrieved": ["c"]}])
    overrides = ["dataset=jsonl", f"dataset.path={path}", "tracking=none", "scorer=exact_match"]
    scorer = _NeedsContexts()
    with pytest.raises(DataError) as refused:
        pipeline.evaluate(
            compose(overrides), tmp_path / "o", given=pipeline.Given(scorers={"exact_match": scorer})
        )
    message = str(refused.value)
    assert message.startswith(f"{path}, line 1 (id r1): no contexts, which scorer exact_match needs"), message
    assert "(read from column 'contexts')" in message and "dataset.columns.contexts=..." in message
    assert refused.value.exit_code == 2 and not scorer.asked and scripted.count() == 0
    # Mapped to the column the dataset has, the same run scores.
    mapped = compose([*overrides, "dataset.columns.contexts=retrieved"])
    result = pipeline.evaluate(
        mapped, tmp_path / "o2", given=pipeline.Given(scorers={"exact_match": scorer})
    )[0]
    assert result.count == 1 and [row.contexts for row in scorer.asked] == [["c"]]


def test_an_empty_csv_cell_is_an_empty_list_scored_by_the_empty_rule(tmp_path: Path) -> None:
    # Before: exit 2, "'tool_calls' must be a list (a JSON list in a CSV cell), got text ''".
    path = tmp_path / "d.csv"
    call = json.dumps([{"name": "f", "arguments": {}}]).replace('"', '""')
    header = "id,input,output,tool_calls,expected_tool_calls,context_ids,reference_context_ids"
    path.write_text(
        f'{header}\nnone,Q?,A,,,, \nmade,Q?,A,"{call}",,"[""d1""]","[""d1""]"\n', encoding="utf-8"
    )
    none, made = load_rows({"path": str(path), "format": "csv"})
    assert none.tool_calls == none.expected_tool_calls == none.context_ids == none.reference_context_ids == []
    assert made.expected_tool_calls == []
    scorers = "scorer=[tool_call_accuracy,context_precision_ids]"
    config = compose(["dataset=csv", f"dataset.path={path}", "tracking=none", scorers, "max_unscored_rate=1"])
    result, code = pipeline.evaluate(config, tmp_path / "out")
    assert code == 0
    items = {item.id: item.scores for item in result.items}
    assert items["none"]["tool_call_accuracy"].score == 1.0  # nothing expected, nothing made: `empty` (1)
    assert items["made"]["tool_call_accuracy"].score == 0.0  # one side empty: 0
    ids = items["none"]["context_precision_ids"]
    assert ids.not_applicable and ids.reason.endswith("no context id was retrieved")  # `empty`: n/a
    assert items["made"]["context_precision_ids"].score == 1.0
