"""`dataset.labels=PATH`: the labels.jsonl of `evalframe review pull` as a file dataset's human score,
joined by id (data/labels.py), so the next run's agreement figures compare its judges with the people."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalframe.data.rows import load_rows
from evalframe.errors import ConfigError, DataError
from evalframe.run import pipeline
from tests.conftest import compose


def _label(item: str, value: float, reviewer: str = "alice", scorer: str = "token_f1") -> dict[str, object]:
    return {
        "item_id": item,
        "trace_id": "",
        "scorer": scorer,
        "label": value,
        "value": value,
        "reviewer": reviewer,
    }


def _write(path: Path, labels: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in labels))
    return path


def test_the_labels_are_the_rows_human_scores_and_the_runs_agreement(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    rows = [
        {"id": f"r{i}", "input": "Q?", "ground_truth": "paris is big", "output": out}
        for i, out in enumerate(["paris is big", "paris", "london is big", "rome"])
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels = _write(
        tmp_path / "labels.jsonl",
        [_label("r0", 1.0), _label("r0", 0.8, "bob"), _label("r1", 0.3), _label("r3", 0.0)],
    )
    cfg = {"path": str(data), "format": "jsonl", "labels": str(labels)}
    humans = [row.human for row in load_rows(cfg)]
    assert humans[0] == pytest.approx(0.9) and humans[1:] == [0.3, None, 0.0]  # r2: nobody labelled it

    config = compose(
        [
            "scorer=token_f1",
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={data}",
            f"dataset.labels={labels}",
        ]
    )
    result, _ = pipeline.evaluate(config, tmp_path / "out")
    assert result.agreement["token_f1"]["n"] == 3 and not math.isnan(result.agreement["token_f1"]["spearman"])


def test_bad_labels_are_one_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"id": "r0", "input": "Q?", "output": "a"}) + "\n")
    two = _write(tmp_path / "two.jsonl", [_label("r0", 1.0), _label("r0", 0.0, scorer="exact_match")])
    with pytest.raises(DataError, match="holds labels of 2 scorers \\(exact_match, token_f1\\)"):
        load_rows({"path": str(data), "format": "jsonl", "labels": str(two)})
    with pytest.raises(DataError, match="no such file"):
        load_rows({"path": str(data), "format": "jsonl", "labels": str(tmp_path / "none.jsonl")})
    with pytest.raises(ConfigError, match=r"dataset\.labels and dataset\.human_score both"):
        load_rows({"path": str(data), "format": "jsonl", "labels": str(two), "human_score": "h"})


def test_an_agreement_objective_takes_the_labels_as_its_human_scores(tmp_path: Path) -> None:
    """Penalty tuning to people (objective.metric=<scorer>/agreement/...) refused a dataset without
    dataset.human_score; dataset.labels gives human scores too."""
    from evalframe.results.objective import of_config

    labels = _write(tmp_path / "labels.jsonl", [_label("r0", 1.0)])
    metric = "objective.metric=token_f1/agreement/spearman"
    with pytest.raises(ConfigError, match="compares with human scores, but the dataset has none"):
        of_config(compose(["scorer=token_f1", metric]))
    found = of_config(compose(["scorer=token_f1", metric, f"dataset.labels={labels}"]))
    assert found.metric == "token_f1/agreement/spearman"
