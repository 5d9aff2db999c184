"""Runs told apart: `evalframe runs` lists the experiment's newest runs, named after what their command
lines changed and when they started, and compare and rescore take `last`, `last~1` or the start of a
name. Real runs from the command line, logged to MLflow on SQLite. Before: names were dataset and
scorers only, nothing listed runs, and compare and rescore took 32-character ids only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evalframe.cli.rescore import command_line
from evalframe.errors import ConfigError
from evalframe.tracking import read
from tests.conftest import run_cli

pytestmark = pytest.mark.slow  # three runs logged to MLflow: seconds

SCORERS = "scorer=[exact_match,token_f1]"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """Three runs of the sample, oldest first: 3 rows, 4 rows, 4 rows with token_f1 alone."""
    folder = tmp_path_factory.mktemp("runs")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    ids = []
    for line in (
        [SCORERS, "dataset.limit=3"],
        [SCORERS, "dataset.limit=4"],
        ["scorer=token_f1", "dataset.limit=4"],
    ):
        done = run_cli([*line, f"tracking.uri={uri}", "tracking.traces=false"], cwd=folder)
        assert done.returncode == 0, done.stderr
        found = re.search(r"/runs/([0-9a-f]{32})", done.stdout)
        assert found, done.stdout
        ids.append(found.group(1))
    return folder, uri, ids


def test_runs_are_named_after_their_overrides_and_start_time(store: tuple[Path, str, list[str]]) -> None:
    _, uri, ids = store
    names = [MlflowClient(uri).get_run(i).info.run_name for i in ids]
    assert [re.sub(r" · \d\d:\d\d$", " · HH:MM", n) for n in names] == [
        "sample · exact_match+token_f1 · dataset.limit=3 · HH:MM",
        "sample · exact_match+token_f1 · dataset.limit=4 · HH:MM",
        "sample · token_f1 · dataset.limit=4 · HH:MM",
    ]


def test_runs_lists_the_newest_first_with_names_times_and_means(
    store: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    _, uri, ids = store
    done = run_cli(["runs", f"tracking.uri={uri}", "n=2"], cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    rows = [line for line in done.stdout.splitlines() if re.search(r"[0-9a-f]{32}", line)]
    assert [row.split()[1] for row in rows] == [ids[2], ids[1]]  # one line a run: piped, not folded
    assert "sample · token_f1 · dataset.limit=4" in rows[0]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[0])
    assert re.search(r"token_f1 \d\.\d{3}", rows[0]) and re.search(r"exact_match \d\.\d{3}", rows[1])
    assert "the 2 newest runs of experiment 'evalframe'" in done.stdout
    assert list(tmp_path.iterdir()) == []  # read only: no store, no run directory


def test_compare_takes_last_and_last_1(store: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    folder, uri, ids = store
    done = run_cli(
        ["compare", "baseline=last~2", "candidate=last~1", f"tracking.uri={uri}", f"output_dir={tmp_path}"],
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr
    assert "3 items in both runs; left out: 0 only in the baseline, 1 only in the candidate" in done.stdout
    client = MlflowClient(uri)
    experiment = client.get_run(ids[0]).info.experiment_id
    [tags] = [
        r.data.tags for r in client.search_runs([experiment]) if "evalframe.compare.baseline" in r.data.tags
    ]
    assert (tags["evalframe.compare.baseline"], tags["evalframe.compare.candidate"]) == (ids[0], ids[1])


def test_a_name_prefix_names_one_run_and_an_ambiguous_one_says_which_matched(
    store: tuple[Path, str, list[str]],
) -> None:
    _, uri, ids = store
    assert read.resolve(uri, "evalframe", "sample · token_f1") == ids[2]
    assert read.resolve(uri, "evalframe", ids[1][:8]) == ids[1]  # the start of an id, as runs shows it
    assert read.resolve(uri, "evalframe", ids[0]) == ids[0]
    with pytest.raises(ConfigError) as ambiguous:
        read.resolve(uri, "evalframe", "sample · exact_match", "baseline")
    said = str(ambiguous.value)
    assert said.startswith("baseline=sample · exact_match matches 2 runs of experiment 'evalframe' at ")
    assert ids[0] in said and ids[1] in said and ids[2] not in said
    with pytest.raises(ConfigError, match=r"run_id=last~3: experiment 'evalframe' at .* has 3 evalframe run"):
        read.resolve(uri, "evalframe", "last~3")
    with pytest.raises(ConfigError, match=r"no run of experiment 'evalframe' at .* starting with 'nothing'"):
        read.resolve(uri, "evalframe", "nothing")
    with pytest.raises(ConfigError, match="no experiment 'elsewhere' in the MLflow store"):
        read.resolve(uri, "elsewhere", "last")


def test_rescore_takes_last(store: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    _, uri, ids = store
    run_id, line = command_line(["run_id=last", f"tracking.uri={uri}"], tmp_path)
    assert run_id == ids[2] and "scorer=token_f1" in line
    run_id, _ = command_line(["run_id=last~1", f"tracking.uri={uri}"], tmp_path)
    assert run_id == ids[1]
