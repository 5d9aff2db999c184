"""What the console shows fits the terminal it is shown on."""

from __future__ import annotations

from rich.console import Console

from evalframe.report import console as report
from evalframe.results.summary import COLUMNS

NAMES = ("answer_similarity", "answer_relevancy", "ground_truth_similarity", "exact_match")


def test_the_summary_fits_80_columns_without_cutting_a_scorer_name() -> None:
    rows = [[name, "0.399", "0.366", "0.000", "1.000", "28", "0", "0.0054"] for name in NAMES]
    console = Console(width=80, record=True)
    console.print(report._table("evalframe: 28 items", COLUMNS, rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # nothing cut: a long name folds onto the next line
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    for name in NAMES:
        assert name in first_column
    assert "0.0054" in text and "unscored" in text
