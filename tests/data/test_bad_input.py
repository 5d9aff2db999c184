"""Bad input and config get one clear line and exit code 2 before any model call, never a traceback
or a hang: invalid numbers, byte-order marks, hostile rows, prompts and cache rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalframe.config import compose as configs
from evalframe.errors import EvalframeError
from evalframe.run import pipeline
from tests.conftest import fake_model
from tests.scripted import ScriptedModel, overrides as scripted_overrides


def usage_error(overrides: list[str], out: Path) -> str:
    """The message of the usage error (exit code 2) a run with `overrides` stops with, composed and
    resolved as the command line does it."""
    with pytest.raises(EvalframeError) as raised:
        pipeline.evaluate(configs.resolve(configs.compose(overrides)), out)
    assert raised.value.exit_code == 2
    return str(raised.value)


def judged(scripted: ScriptedModel, *extra: str) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", "dataset.limit=3", *extra]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("concurrency=0", "concurrency=0: it should be greater than 0"),  # waited forever
        ("concurrency=-1", "concurrency=-1: it should be greater than 0"),  # a traceback
        ("max_unscored_rate=abc", "max_unscored_rate='abc': it should be a valid number"),
        ("max_unscored_rate=1.5", "max_unscored_rate=1.5: it should be less than or equal to 1"),
        ("gate.pass_threshold=abc", "gate.pass_threshold='abc': it should be a valid number"),
        ("gate.pass_threshold={answer_similarity: x}", "gate.pass_threshold.answer_similarity='x'"),
        ("+gate.min_score.answer_similarity=high", "gate.min_score.answer_similarity='high'"),
        ("penalties.contradiction=-1", "penalties.contradiction=-1: it should be greater than or equal to 0"),
        ("penalties.missing=-0.1", "penalties.missing=-0.1: it should be greater than or equal to 0"),
        (
            "scorers.answer_similarity.scale=-1",
            "scorers.answer_similarity.scale=-1: it should be greater than 0",
        ),
        ("model.max_retries=-1", "model.max_retries=-1: it should be greater than or equal to 0"),
        ("model.reply_retries=-1", "model.reply_retries=-1"),
        ("model.timeout=-5", "model.timeout=-5: it should be greater than 0"),
        ("model.timeout=0", "model.timeout=0: it should be greater than 0"),
    ],
)
def test_bad_numbers_stop_the_run_before_any_call(
    override: str, message: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    assert message in usage_error(judged(scripted, override), tmp_path)
    assert scripted.count() == 0


def test_target_numbers_are_checked_too(scripted: ScriptedModel, tmp_path: Path) -> None:
    error = usage_error(
        judged(scripted, "target=http", "target.url=http://127.0.0.1:9/x", "target.max_retries=-3"), tmp_path
    )
    assert "target.max_retries=-3" in error
    assert scripted.count() == 0


def test_good_numbers_pass(scripted: ScriptedModel) -> None:
    configs.resolve(
        configs.compose(judged(scripted, "concurrency=1", "penalties.missing=0", "max_unscored_rate=1"))
    )


# --- byte-order marks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_byte_order_mark_is_read_past(fmt: str, tmp_path: Path) -> None:
    from evalframe.data.rows import load_rows

    path = tmp_path / f"bom.{fmt}"
    if fmt == "csv":
        text = "id,input,ground_truth,output\nfr,Capital of France?,Paris,Paris\n"
    else:
        text = '{"id": "fr", "input": "Capital of France?", "ground_truth": "Paris", "output": "Paris"}\n'
    path.write_text(text, encoding="utf-8-sig")  # what Excel and Notepad write
    [row] = load_rows({"path": str(path), "format": fmt})
    assert row.id == "fr" and row.input == "Capital of France?" and "\ufeffid" not in row.extra


# --- hostile rows, prompts and cache rows --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1" * 5000, "line 2: a value cannot be read (Exceeds the limit"),
        ("[" * 100_000 + "]" * 100_000, "line 2: a value is nested too deeply to read"),
    ],
)
def test_huge_numbers_and_deep_nesting_in_a_row_are_data_errors(
    value: str, message: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    path = tmp_path / "d.jsonl"
    good = '{"input": "q", "ground_truth": "a", "output": "a"}'
    path.write_text(f'{good}\n{{"input": "q", "ground_truth": "a", "output": "a", "n": {value}}}\n')
    error = usage_error(judged(scripted, "dataset=jsonl", f"dataset.path={path}"), tmp_path / "out")
    assert f"{path}, {message}" in error
    assert scripted.count() == 0


@pytest.mark.parametrize(("kind", "message"), [("huge", "cannot be read"), ("deep", "nested too deeply")])
def test_huge_numbers_and_deep_nesting_in_records_are_data_errors(kind: str, message: str) -> None:
    from evalframe.data.rows import rows_from_records

    value: object = int("9" * 4000) ** 2
    if kind == "deep":
        value = []
        for _ in range(100_000):
            value = [value]
    with pytest.raises(EvalframeError, match=f"data, record 1: .*{message}"):
        rows_from_records([{"input": value, "ground_truth": "a"}], {})


def test_a_prompt_including_another_file_is_a_prompt_error(scripted: ScriptedModel, tmp_path: Path) -> None:
    prompt = tmp_path / "mine.j2"
    prompt.write_text("Answer: {{ input }}\n{% include '/etc/passwd' %}")
    error = usage_error(
        judged(
            scripted, "target=llm", f"target.prompt={prompt}", *[f"target.{o}" for o in scripted_overrides()]
        ),
        tmp_path / "out",
    )
    assert f"prompt file {prompt}: it includes '/etc/passwd'" in error and "root:" not in error
    assert scripted.count() == 0


def test_a_request_body_cannot_include_files(scripted: ScriptedModel, tmp_path: Path) -> None:
    body = "target.body={input: \"{% include '/etc/passwd' %}\"}"
    error = usage_error(judged(scripted, "target=http", "target.url=http://127.0.0.1:9/x", body), tmp_path)
    assert "target.body.input: it includes '/etc/passwd'" in error
    assert scripted.count() == 0


@pytest.mark.parametrize("poison", ["not json", "[]", '{"raw": 5}', '{"raw": "x", "error": "boom"}'])
def test_a_poisoned_cache_row_is_a_miss_asked_again(
    poison: str, scripted: ScriptedModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from tests.conftest import compose

    config = compose(judged(scripted))
    first, code = pipeline.evaluate(config, tmp_path / "1")
    assert code == 0
    asked = scripted.count()
    [cache] = (tmp_path / "cache").glob("*.sqlite")
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE replies SET value = ?", (poison,))
    capsys.readouterr()
    again, code = pipeline.evaluate(config, tmp_path / "2")
    assert code == 0 and again.means == first.means
    assert scripted.count() == 2 * asked  # every request asked again, none served from the poison
    assert capsys.readouterr().err.count("ignoring an unreadable entry of the judge cache") == 1


def test_a_huge_number_in_another_column_of_a_record_is_a_data_error() -> None:
    from evalframe.data.rows import Rows, rows_from_records

    rows = Rows.of(rows_from_records([{"input": "q", "n": int("9" * 4000) ** 2}], {}), "data")
    with pytest.raises(EvalframeError, match=r"data, line 1 \(id 1\): a value cannot be read"):
        rows.validate(lambda window: None)  # before any call, not when results.jsonl is written


# --- work bounded before it starts ---------------------------------------------------------------------


def test_a_billion_repeats_stop_before_any_row_is_read(scripted: ScriptedModel, tmp_path: Path) -> None:
    # Before: the (judge, repeat) list of the first item was built up front, 24 GB and a MemoryError.
    error = usage_error(judged(scripted, "repeats=1000000000"), tmp_path)
    assert error.startswith("max_judgments=100,000: this run would ask for at least 1,000,000,000 judgments")
    assert "answer_similarity: 1 judge(s) x 1,000,000,000 repeat(s) per row" in error
    assert "raise max_judgments (null: no cap)" in error
    assert scripted.count() == 0


def test_rows_times_judges_times_repeats_is_bounded_and_the_cap_can_be_raised(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    panel = "scorers.answer_similarity.models=[{name: scripted/judge, api_key_env: null}, " + (
        "{name: scripted/judge, api_key_env: null, label: again}]"
    )
    args = judged(scripted, panel, "repeats=2")  # 3 rows x 2 judges x 2 repeats = 12 judgments
    error = usage_error([*args, "max_judgments=11"], tmp_path)
    assert "max_judgments=11: this run would ask for 3 rows x 4 judgments" in error
    assert "answer_similarity: 2 judge(s) x 2 repeat(s) per row" in error
    assert scripted.count() == 0
    for cap in ("12", "null"):
        pipeline.plan(configs.resolve(configs.compose([*args, f"max_judgments={cap}"])))
    assert "max_judgments=0: it should be greater than 0" in usage_error([*args, "max_judgments=0"], tmp_path)


# --- text and numbers checked at the door --------------------------------------------------------------

GOOD = {"input": "q", "ground_truth": "a", "output": "a"}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"input": "q\ud800"}, "'input'"),
        ({"contexts": ["fine", "\ud800"]}, "'contexts'[1]"),
        ({"tool_calls": [CALL, {"name": "get\udfff", "arguments": {}}]}, "'tool_calls'[1].name"),
        (
            {"tool_calls": [{**CALL, "arguments": '{"city": "\\ud800"}'}]},
            "'tool_calls': get_weather's arguments.city",
        ),
        ({"notes": {"by": "\ud800"}}, "'notes'.by"),
        ({"n\ud800": 1}, "a column's name"),
    ],
)
def test_a_lone_surrogate_anywhere_in_a_row_stops_the_run_at_the_door(
    row: dict[str, object], field: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    # Before: it passed validation, and writing results.jsonl raised UnicodeEncodeError half-way.
    import json

    path = tmp_path / "d.jsonl"
    path.write_text(f"{json.dumps(GOOD)}\n{json.dumps({**GOOD, **row})}\n")  # json.dumps writes \ud800
    error = usage_error(judged(scripted, "dataset=jsonl", f"dataset.path={path}"), tmp_path / "out")
    assert f"{path}, line 2: {field} is not valid Unicode text (a lone surrogate" in error
    assert scripted.count() == 0 and not list(tmp_path.glob("out/**/results.jsonl"))


def test_a_lone_surrogate_in_a_csv_cells_json_is_caught_too(scripted: ScriptedModel, tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('input,ground_truth,output,contexts\nq,a,a,"[""\\ud800""]"\n')
    error = usage_error(judged(scripted, "dataset=csv", f"dataset.path={path}"), tmp_path / "out")
    assert f"{path}, line 2: 'contexts'[0] is not valid Unicode text" in error


@pytest.mark.parametrize(
    ("value", "field", "shown"),
    [
        ('[{"name": "f", "arguments": {"x": NaN}}]', "'tool_calls'[0].arguments.x", "nan"),
        ('[{"name": "f", "arguments": {"x": [1, -Infinity]}}]', "'tool_calls'[0].arguments.x[1]", "-inf"),
        ('[{"name": "f", "arguments": "{\\"x\\": 1e999}"}]', "'tool_calls': f's arguments.x", "inf"),
        (
            '[{"type": "function", "function": {"name": "f", "arguments": "{\\"x\\": NaN}"}}]',
            "f's arguments.x",
            "nan",
        ),
    ],
)
def test_tool_call_arguments_must_be_finite_numbers(
    value: str, field: str, shown: str, scripted: ScriptedModel, tmp_path: Path
) -> None:
    # Before: accepted; NaN never equals NaN, so the call scored 0, and results.jsonl got Infinity tokens.
    path = tmp_path / "d.jsonl"
    row = '{"input": "q", "output": "o", "tool_calls": %s, "expected_tool_calls": []}'
    path.write_text(f"{row % '[]'}\n{row % value}\n")
    error = usage_error(
        ["scorer=tool_call_accuracy", "tracking=none", "dataset=jsonl", f"dataset.path={path}"], tmp_path
    )
    assert f"{path}, line 2: " in error and f"{field} is {shown}, not a finite number" in error


def test_every_number_of_a_row_is_finite_the_human_score_and_csv_cells_too(tmp_path: Path) -> None:
    from evalframe.data.rows import load_rows, rows_from_records

    path = tmp_path / "d.csv"
    path.write_text(
        'input,human,tool_calls\nq,nan,[]\nq,1,"[{""name"": ""f"", ""arguments"": {""x"": NaN}}]"\n'
    )
    with pytest.raises(
        EvalframeError, match=r"d.csv, line 2: the human score \('human'\) is 'nan', not a finite"
    ):
        load_rows({"path": str(path), "format": "csv", "human_score": "human"})
    with pytest.raises(
        EvalframeError, match=r"d.csv, line 3: 'tool_calls'\[0\].arguments.x is nan, not a finite"
    ):
        load_rows({"path": str(path), "format": "csv"})
    with pytest.raises(EvalframeError, match=r"data, record 2: 'n'.a is inf, not a finite number"):
        rows_from_records([{"input": "q", "n": {"a": 1.0}}, {"input": "q", "n": {"a": float("inf")}}], {})
