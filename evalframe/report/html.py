"""What a person opens after a run or a sweep: a self-contained `report.html` and PNG plots.

The page needs nothing from the network (inline CSS, plots embedded as base64 data URIs, no
JavaScript), so it opens from a run directory, an MLflow artifact download or a CI artifact alike.
Dataset text is data: every string from the dataset, the target or the judge is HTML-escaped.

matplotlib is imported lazily (Agg backend, no display needed): `--help` stays fast, and a run that
never writes a report never pays for it.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from evalframe.models import imports
from evalframe.report import chat_html
from evalframe.results.run_result import RunResult
from evalframe.results.scores import SHOWN_UNSCORED, ItemResult
from evalframe.results.summary import AGREEMENT, COLUMNS, Summary, fmt

REPORT = "report.html"
PLOTS = "plots"
# Rows of the per-item table embedded in report.html. Past this the page would grow to tens of MB
# and browsers crawl; the table says so and points at results.jsonl / MLflow's items.json, which
# always hold every item. The summary and histograms always cover every item.
MAX_TABLE_ITEMS = 2000
# A cell longer than this shows its start and folds the rest into <details> (no JavaScript needed).
FOLD_CHARS = 400

_CSS = (
    """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2433;background:#fff}
h1{font-size:22px;margin:0 0 4px;overflow-wrap:anywhere}h2{font-size:18px;margin:28px 0 8px}
.meta{color:#5b6478;font-size:13px;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #d6dae3;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f2f4f8;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.text{max-width:380px;white-space:pre-wrap;word-break:break-word}
.unscored{color:#b42318;font-weight:600}.err{color:#b42318;font-size:12px}
.gate{font-size:15px;margin:6px 0}.gate.passed b{color:#067647}.gate.failed b{color:#b42318}
.note{background:#fff7e6;border:1px solid #f5c26b;padding:6px 10px;font-size:13px;display:inline-block}
.plots img{max-width:520px;margin:4px 12px 4px 0;border:1px solid #e4e7ee}
summary{cursor:pointer;color:#2f5bd3}
"""
    + chat_html.CSS
)


@dataclass
class Report:
    """One page and its plots: `plots` maps a file name (answer_similarity_histogram.png) to PNG bytes."""

    html: str
    plots: dict[str, bytes] = field(default_factory=dict)

    def write(self, directory: Path, name: str) -> list[Path]:
        """Write the page and plots/<name>.png; returns every file written."""
        directory.mkdir(parents=True, exist_ok=True)
        page = directory / name
        page.write_text(self.html, encoding="utf-8")
        written = [page]
        if self.plots:
            (directory / PLOTS).mkdir(exist_ok=True)
        for filename, png in self.plots.items():
            path = directory / PLOTS / filename
            path.write_bytes(png)
            written.append(path)
        return written


# ---------------------------------------------------------------- plotting


def preload() -> None:
    """Import matplotlib on a background thread while a run waits for its models, so that writing
    the report at the end does not wait the ~0.5 s of the import."""
    imports.in_background("matplotlib", pyplot)


def pyplot() -> Any:
    with imports.LOCK:  # not beside a background import (evalframe.models.imports)
        import matplotlib

        matplotlib.use("Agg")  # no display: a CI machine or a server has none
        import matplotlib.pyplot as plt

    return plt


def png(fig: Any, tight: bool = True) -> bytes:
    """The figure as PNG bytes; `tight` fits the page to what is drawn (labels of any length), at the
    price of drawing it twice."""
    plt = pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return buffer.getvalue()


def safe_name(name: str) -> str:
    """A scorer or parameter name as a file name (`penalties.missing` stays readable)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "plot"


def histogram(name: str, scores: Sequence[float], unscored: int) -> bytes:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    # Scores live on [0, scale]; 20 bins of the observed range keep 0.05 steps visible on [0, 1].
    top = max([1.0, *scores])
    ax.hist(scores, bins=20, range=(0.0, top), color="#3b6fd8", edgecolor="white")
    ax.set_title(f"{name}: {len(scores)} scored" + (f", {unscored} unscored" if unscored else ""))
    ax.set_xlabel("score")
    ax.set_ylabel("items")
    # Fixed margins that hold this plot's short labels: a fitted page draws it twice, and a report
    # draws one per scorer (0.13 s of a run's CPU each, measured; 0.07 s with these).
    fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.16)
    return png(fig, tight=False)


# ---------------------------------------------------------------- HTML pieces


def img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def text(value: Any) -> str:
    """Escaped cell text; long text folds into <details>."""
    if value is None:
        return '<span class="meta">none</span>'
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= FOLD_CHARS:
        return escape(text)
    return (
        f"{escape(text[:FOLD_CHARS])}… <details><summary>all {len(text)} characters</summary>"
        f"{escape(text)}</details>"
    )


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are already HTML (escaped where they hold data); headers are escaped here."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, meta: str, sections: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{escape(title)}</h1><div class="meta">{meta}</div>' + "".join(sections) + "</body></html>"
    )


def _summary(summary: Summary) -> str:
    headers = list(COLUMNS)
    if summary.agreement:
        headers += [f"human {k}" for k in AGREEMENT]
    agreement = {
        name: [f"{value}<br>{ci}" if ci else value for value, ci in cells]
        for name, cells in summary.agreement_cells().items()
    }
    rows = []
    for row in summary.rows():
        name, cells = row[0], row[1:]
        unscored = COLUMNS.index("unscored") - 1
        html = [f"<td>{escape(name)}</td>"]
        html += [
            f'<td class="num{" unscored" if i == unscored and cell != "0" else ""}">{cell}</td>'
            for i, cell in enumerate(cells)
        ]
        if summary.agreement:
            html += [f'<td class="num">{cell}</td>' for cell in agreement.get(name, ["–"] * len(AGREEMENT))]
        rows.append(html)
    figures = "".join(f'<p class="note">{escape(line)}</p>' for line in summary.figure_lines())
    return "<h2>Summary</h2>" + html_table(headers, rows) + figures


def _unscored(summary: Summary) -> str:
    """The first unscored items of each scorer, at the top of the page: what went wrong, at a glance."""
    rows = [
        [
            f"<td>{escape(name)}</td>",
            f"<td>{escape(u.id)}</td>",
            f"<td>{escape(u.step)}</td>",
            f'<td class="text"><span class="err">{text(u.error)}</span></td>',
        ]
        for name, u in summary.unscored_rows()
    ]
    if not rows:
        return ""
    rest = "".join(f"{n} more of {escape(name)}; " for name, n in summary.unscored_rest().items())
    note = f'<p class="note">{rest}every item, error and raw reply is in results.jsonl next to this file.</p>'
    title = f"<h2>Unscored items (the first {SHOWN_UNSCORED} per scorer)</h2>"
    return title + html_table(["scorer", "id", "step", "error"], rows) + note


def _score_cell(item: ItemResult, scorer: str) -> list[str]:
    r = item.scores.get(scorer)
    if r is None:
        return ['<td class="num">–</td>', '<td class="text"></td>']
    if r.not_applicable:
        return ['<td class="num">n/a</td>', f'<td class="text">{text(r.reason)}</td>']
    if not r.scored:
        return [
            '<td class="num unscored">unscored</td>',
            f'<td class="text"><span class="err">{text(r.error or r.reason)}</span></td>',
        ]
    verdicts = r.verdicts()
    folded = (
        f"<details><summary>{len(verdicts)} verdict{'s' * (len(verdicts) != 1)}</summary>"
        + "".join(f"<div>{escape(line)}</div>" for line in verdicts)
        + "</details>"
        if verdicts
        else ""
    )
    return [f'<td class="num">{r.score:.2f}</td>', f'<td class="text">{text(r.reason)}{folded}</td>']


def _items(result: RunResult, max_items: int) -> str:
    human = any(i.human is not None for i in result.items)  # a person's score, when the dataset has one
    headers = ["id", "input", "output", "ground truth", *(["human"] if human else [])]
    for name in result.scorers:
        headers += [f"{name} score", f"{name} reason"]
    shown = result.items[:max_items]
    rows = []
    chats = set(chat_html.shown(shown))
    for position, item in enumerate(shown):
        label = escape(item.id)  # a conversation item's id links to its chat, below the table
        cells = [
            f'<td><a href="#{chat_html.anchor(position)}">{label}</a></td>'
            if position in chats
            else f"<td>{label}</td>",
            f'<td class="text">{text(item.input)}</td>',
            f'<td class="text">{text(item.output)}</td>',
            f'<td class="text">{text(item.ground_truth)}</td>',
        ]
        if human:
            cells.append(f'<td class="num">{fmt(item.human, 2)}</td>')
        for name in result.scorers:
            cells += _score_cell(item, name)
        rows.append(cells)
    note = ""
    if len(result.items) > len(shown):
        note = (
            f'<p class="note">The table shows the first {len(shown)} of {len(result.items)} items; every '
            "item is in results.jsonl next to this file and in the MLflow run's items.json "
            "(Artifacts tab).</p>"
        )
    return f"<h2>Items ({len(result.items)})</h2>{note}" + html_table(headers, rows)


# ---------------------------------------------------------------- run report


def run_report(result: RunResult, title: str, max_items: int = MAX_TABLE_ITEMS) -> Report:
    """The run's page: summary per scorer, a histogram per scorer, the per-item table and each
    conversation item as a chat with its per-turn verdicts."""
    plots: dict[str, bytes] = {}
    for name, s in result.summaries.items():
        scores = [i.scores[name].score for i in result.items if name in i.scores and i.scores[name].scored]
        plots[f"{safe_name(name)}_histogram.png"] = histogram(name, scores, s.unscored)
    images = "".join(img(png, f"{name} histogram") for name, png in plots.items())
    summary = Summary.of(result)
    sections = [
        _unscored(summary),
        _summary(summary),
        f'<h2>Score distributions</h2><div class="plots">{images}</div>',
        _items(result, max_items),
        chat_html.chats(result.items[:max_items], result.scorers),
    ]
    return Report(page(title, _about(result), sections), plots)


def _about(result: RunResult) -> str:
    """The page's header: the gate's verdict first, then what was run, so a saved report stands alone."""
    facts = {"scorers": ", ".join(result.scorers), "items": str(result.count), **result.facts}
    header = "; ".join(f"{key}: {escape(value)}" for key, value in facts.items())
    verdict = result.verdict
    if verdict is None:
        return header
    failed = "".join(f"<li>{escape(line)}</li>" for line in verdict.failed)
    return (
        f'<p class="gate {verdict.word}">gate: <b>{verdict.word}</b> (exit code {verdict.code})</p>'
        + (f"<ul>{failed}</ul>" if failed else "")
        + header
    )


def write_run_report(
    result: RunResult, directory: Path, title: str, max_items: int = MAX_TABLE_ITEMS
) -> list[Path]:
    """report.html and plots/<scorer>_histogram.png in the run directory (next to results.jsonl)."""
    return run_report(result, title, max_items).write(directory, REPORT)
