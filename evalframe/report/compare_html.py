"""compare.html: two runs item by item (evalframe compare), one table per compared pair."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from evalframe.report.html import (
    Report,
    html_table,
    page,
    text,
)
from evalframe.results.comparison import COLUMNS as COMPARE_COLUMNS, MOVED_COLUMNS, Comparison

COMPARE_REPORT = "compare.html"


def compare_report(comparisons: Sequence[Comparison]) -> Report:
    """Each candidate against the baseline: the paired differences per scorer, the items that moved most."""
    sections = []
    for c in comparisons:
        rows = [
            [f"<td>{escape(row[0])}</td>", *(f'<td class="num">{escape(cell)}</td>' for cell in row[1:])]
            for row in c.rows()
        ]
        sections.append(
            f"<h2>{escape(c.title())}</h2><p>{escape(c.counts())}</p>" + html_table(COMPARE_COLUMNS, rows)
        )
        for s in c.scorers:
            moved = [
                [f"<td>{escape(r[0])}</td>", f'<td class="text">{text(r[1])}</td>']
                + [f'<td class="num">{escape(cell)}</td>' for cell in r[2:5]]
                + [f'<td class="text">{text(cell)}</td>' for cell in r[5:]]
                for r in s.moved_rows()
            ]
            if moved:
                sections.append(
                    f"<h3>{escape(s.label)}: the items that moved most</h3>"
                    + html_table(MOVED_COLUMNS, moved)
                )
    baseline = comparisons[0].baseline if comparisons else ""
    meta = (
        f"baseline run {escape(baseline)}; {len(comparisons)} candidate run(s); "
        "differences are candidate − baseline"
    )
    return Report(page("evalframe compare", meta, sections))


def write_compare_report(directory: Path, comparisons: Sequence[Comparison]) -> list[Path]:
    """compare.html in `directory`."""
    return compare_report(comparisons).write(directory, COMPARE_REPORT)
