"""`dataset=run`: an earlier run's items judged again with other scorers or judges, read back from MLflow
(its run id) or from its directory, ids kept so that `evalframe compare` pairs the two runs. In process,
against the scripted judge and real SQLite MLflow stores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_rescore import mlflow_runs
from tests.conftest import fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.targets.test_handed_fields import DOCS, PROVIDES, ROWS, documents_judged, grounded_judge

LIMIT = "dataset.limit=6"
NO_TRACES = "tracking.traces=false"  # runs logged to MLflow without per-item traces: a second less each


def journal(run_dir: Path) -> dict[str, dict[str, Any]]:
    """A run's results.jsonl, by item id."""
    return {i["id"]: i for i in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}


def run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in tmp_path.glob("outputs/*/*/results.jsonl"))


@pytest.mark.slow
def test_an_earlier_runs_outputs_judged_again_pair_with_it_in_compare(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """Two runs and a comparison through MLflow (about 4 s: mostly MLflow's first store in the process)."""
    first = run_cli(["scorer=answer_similarity", *fake_model(scripted), LIMIT, NO_TRACES], tmp_path)
    assert first.returncode == 0, first.stderr
    [a] = mlflow_runs(tmp_path)
    again = ["dataset=run", f"dataset.run_id={a.info.run_id}", "scorer=[answer_similarity,token_f1]"]
    second = run_cli([*again, *fake_model(scripted), "penalties=strict", NO_TRACES], tmp_path)
    assert second.returncode in (0, 1), second.stderr  # strict penalties may fail no gate: none is set
    [_, b] = mlflow_runs(tmp_path)
    [dir_a, dir_b] = run_dirs(tmp_path)
    earlier, now = journal(dir_a), journal(dir_b)
    assert list(now) == list(earlier) and len(now) == 6
    for item_id, item in now.items():
        kept = ("input", "ground_truth", "output", "record")
        assert {k: item[k] for k in kept} == {k: earlier[item_id][k] for k in kept}
        assert set(item["scores"]) == {"answer_similarity", "token_f1"}
    assert b.data.tags["evalframe.dataset"] == "run"

    compared = run_cli(["compare", f"baseline={a.info.run_id}", f"candidate={b.info.run_id}"], tmp_path)
    assert compared.returncode in (0, 1), compared.stderr
    assert (
        "6 items in both runs; left out: 0 only in the baseline, 0 only in the candidate" in compared.stdout
    )
    assert "answer_similarity" in compared.stdout and "token_f1" not in compared.stdout  # shared scorers only


@pytest.mark.slow
def test_a_live_rag_runs_contexts_and_mapped_columns_are_judged_again(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """The earlier run's target handed over its contexts, ids and tool calls, and its dataset named the
    reference ids `refs`: both reach the new run's judges, its re-score and a run of that run again."""
    scripted.responder = grounded_judge
    data = tmp_path / "qa.jsonl"
    renamed = [
        {**{k: v for k, v in r.items() if k != "reference_context_ids"}, "refs": r["reference_context_ids"]}
        for r in ROWS
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in renamed))
    # Its contexts column would be `docs`: what the function handed over is read from its step instead.
    mapped = ["dataset.columns.reference_context_ids=refs", "dataset.columns.contexts=docs"]
    live = ["dataset=jsonl", f"dataset.path={data}", *mapped]
    target = ["target=python", "target.fn=tests.targets.test_handed_fields:rag", PROVIDES]
    first = run_cli(
        [*live, *target, "scorer=context_precision_ids", *fake_model(scripted), NO_TRACES], tmp_path
    )
    assert first.returncode == 0, first.stderr
    [a] = mlflow_runs(tmp_path)

    scripted.reset()
    scorers = "scorer=[faithfulness,context_precision_ids,tool_call_accuracy]"
    second = run_cli(
        ["dataset=run", f"dataset.run_id={a.info.run_id}", scorers, *fake_model(scripted), NO_TRACES],
        tmp_path,
    )
    assert second.returncode == 0, second.stderr
    [_, dir_b] = run_dirs(tmp_path)
    scores = {i: {n: s["score"] for n, s in item["scores"].items()} for i, item in journal(dir_b).items()}
    assert scores == {
        "fr": {"faithfulness": 1.0, "context_precision_ids": 1.0, "tool_call_accuracy": 1.0},
        "ge": {"faithfulness": 1.0, "context_precision_ids": 0.5, "tool_call_accuracy": 1.0},
        "it": {"faithfulness": 1.0, "context_precision_ids": 0.5, "tool_call_accuracy": 1.0},
    }
    assert documents_judged(scripted)["Berlin is the capital of Germany"] == [
        DOCS["d-trains"],
        DOCS["d-berlin"],
    ]

    # That run's directory, judged once more: its rows kept every field under its own name.
    third = run_cli(
        ["dataset=run", f"dataset.path={dir_b}", "scorer=context_precision_ids", "tracking=none"], tmp_path
    )
    assert third.returncode == 0, third.stderr
    [*_, dir_c] = run_dirs(tmp_path)
    assert {i: item["scores"]["context_precision_ids"]["score"] for i, item in journal(dir_c).items()} == {
        "fr": 1.0,
        "ge": 0.5,
        "it": 0.5,
    }

    # A re-score of the live run reads the handed-over fields back from its stored target steps.
    rescore = ["rescore", f"run_id={a.info.run_id}", "scorers.context_precision_ids.empty=0", NO_TRACES]
    rescored = run_cli(rescore, tmp_path)
    assert rescored.returncode == 0, rescored.stderr + rescored.stdout
    assert "re-scored 3 items" in rescored.stdout and "0 model calls" in rescored.stdout


def flaky(question: str) -> str:
    if "Germany" in question:
        raise RuntimeError("the service is down")
    return "Paris" if "France" in question else "Rome"


def test_items_the_earlier_target_failed_on_are_left_out_saying_so(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    args = ["dataset=jsonl", f"dataset.path={data}", "scorer=exact_match", "tracking=none"]
    first = run_cli([*args, "target=python", f"target.fn={__name__}:flaky", "max_unscored_rate=1"], tmp_path)
    assert first.returncode == 0, first.stderr
    [dir_a] = run_dirs(tmp_path)
    second = run_cli(
        ["dataset=run", f"dataset.path={dir_a / 'results.jsonl'}", "scorer=token_f1", "tracking=none"],
        tmp_path,
    )
    assert second.returncode == 0, second.stderr
    assert f"dataset=run: 1 item(s) of {dir_a / 'results.jsonl'} had no output" in second.stderr
    assert second.stderr.count("had no output") == 1  # read twice, said once
    [_, dir_b] = run_dirs(tmp_path)
    assert list(journal(dir_b)) == ["fr", "it"]
    assert journal(dir_b)["fr"]["output"] == "Paris"


@pytest.mark.slow
def test_human_scores_on_another_scale_need_that_scale(tmp_path: Path) -> None:
    first = run_cli(["dataset=sas_squad", "scorer=token_f1", "tracking=none", "dataset.limit=8"], tmp_path)
    assert first.returncode == 0, first.stderr
    [dir_a] = run_dirs(tmp_path)
    again = ["dataset=run", f"dataset.path={dir_a}", "scorer=exact_match", "tracking=none"]
    refused = run_cli(again, tmp_path)
    assert refused.returncode == 2
    assert "its human scores are on the scale [0, 2], and dataset.human_range is [0, 1]" in refused.stderr
    assert "set dataset.human_range=[0,2]" in refused.stderr
    done = run_cli([*again, "dataset.human_range=[0,2]"], tmp_path)
    assert done.returncode == 0, done.stderr
    [*_, dir_b] = run_dirs(tmp_path)
    assert [i["human"] for i in journal(dir_b).values()] == [i["human"] for i in journal(dir_a).values()]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], r"^error: dataset=run reads one earlier run: set dataset\.run_id=ID .* or dataset\.path=DIR"),
        (["dataset.run_id=abc", "dataset.path=x"], r", not both$"),
        (
            ["dataset.path=nowhere"],
            r"^error: dataset\.path=nowhere: no results\.jsonl there; set dataset\.run_id",
        ),
        (
            ["dataset.run_id=abc"],
            r"^error: dataset=run: no MLflow database at .*mlflow\.db: check tracking\.uri",
        ),
    ],
)
def test_a_run_that_cannot_be_read_is_one_line_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, args: list[str], message: str
) -> None:
    done = run_cli(["dataset=run", *args, "scorer=answer_similarity", *fake_model(scripted)], tmp_path)
    assert done.returncode == 2 and scripted.count() == 0
    [line] = done.stderr.strip().splitlines()
    assert re.search(message, line), line


ITEM = {"id": "a", "input": "Q?", "ground_truth": "Paris", "output": "Paris", "scores": {}}


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("null", "null is no item (a JSON object with an id, input, output, scores)"),
        ("42", "42 is no item (a JSON object with an id, input, output, scores)"),
        ("{garbage", "not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
        ('{"input": "Q?", "output": "A"}', "an item without 'id'"),
    ],
)
def test_a_line_of_the_results_file_that_is_no_item_is_one_line_naming_it_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, bad: str, says: str
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(f"{json.dumps(ITEM)}\n{bad}\n{json.dumps({**ITEM, 'id': 'b'})}\n")
    done = run_cli(
        ["dataset=run", f"dataset.path={results}", "scorer=answer_similarity", *fake_model(scripted)],
        tmp_path,
    )
    assert done.returncode == 2 and scripted.count() == 0
    [line] = done.stderr.strip().splitlines()
    assert line == f"error: {results}:2: {says}; fix or delete that line"


def test_a_torn_last_line_is_skipped_saying_so_once(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(f"{json.dumps(ITEM)}\n\n{json.dumps({**ITEM, 'id': 'b'})}\n" + json.dumps(ITEM)[:20])
    done = run_cli(
        ["dataset=run", f"dataset.path={results}", "scorer=exact_match", "tracking=none"], tmp_path
    )
    assert done.returncode == 0, done.stderr
    warning = (
        f"warning: dataset=run: {results}:4: the last line is cut short (a run killed mid-write); skipped"
    )
    assert done.stderr.count(warning) == 1  # read twice (checked, then scored), said once
    [run_dir] = run_dirs(tmp_path)
    assert list(journal(run_dir)) == ["a", "b"]
