"""sweep.html: a sweep's jobs ranked by the objective, its intervals, the best settings, the hold-out check,
and one plot of the objective against each swept weight."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path

from evalframe.report.html import (
    Report,
    html_table,
    img,
    page,
    png,
    pyplot,
    safe_name,
)
from evalframe.results.jobs import Holdout, Job, like_the_best
from evalframe.results.scores import Objective
from evalframe.results.summary import fmt, fmt_interval, fmt_metric

SWEEP_REPORT = "sweep.html"


def _as_number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def weight_plot(key: str, jobs: Sequence[Job], objective: Objective) -> bytes:
    """The objective of every job against one swept value; the line joins the mean per value, since
    the other swept values vary between the jobs that share this one. Non-numbers are categories."""
    plt = pyplot()
    values = [job.overrides.get(key) for job in jobs]
    numbers = [_as_number(v) for v in values]
    numeric = all(n is not None for n in numbers)
    if numeric:
        xs = [float(n) for n in numbers if n is not None]
        levels = sorted(set(xs))
    else:
        labels = list(dict.fromkeys(str(v) for v in values))  # command-line order
        xs = [float(labels.index(str(v))) for v in values]
        levels = [float(i) for i in range(len(labels))]
    ys = [job.objective for job in jobs]
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    ax.scatter(xs, ys, color="#3b6fd8", alpha=0.8, label="job", zorder=3)
    means = []
    for level in levels:
        at = [y for x, y in zip(xs, ys, strict=True) if x == level and not math.isnan(y)]
        means.append(sum(at) / len(at) if at else math.nan)
    ax.plot(levels, means, color="#d8623b", marker="o", label="mean")
    if not numeric:
        ax.set_xticks(levels, labels, rotation=20)
    ax.set_xlabel(key)
    ax.set_ylabel(objective.metric)
    ax.set_title(f"{objective.metric} ({objective.direction}) vs {key}")
    ax.legend(fontsize=8)
    return png(fig)


def sweep_report(
    jobs: Sequence[Job],
    objective: Objective,
    keys: Sequence[str],
    title: str,
    held_out: Holdout | None = None,
) -> Report:
    """The objective against each swept value (`keys`), and the jobs best first."""
    plots = {f"objective_vs_{safe_name(k)}.png": weight_plot(k, jobs, objective) for k in keys}
    scorers = list(dict.fromkeys(name for job in jobs for name in job.means))
    marks = like_the_best(list(jobs), objective)
    rows = [
        [
            f"<td>{escape(job.name)}</td>",
            *(f"<td>{escape(job.overrides.get(k, ''))}</td>" for k in keys),
            f'<td class="num">{fmt_metric(objective.metric, job.objective)}</td>',
            f'<td class="num">{fmt_interval(job.interval)}</td>',
            f"<td>{marks.get(job.name, '')}</td>",
            *(f'<td class="num">{fmt(job.means.get(s))}</td>' for s in scorers),
        ]
        for job in sorted(jobs, key=lambda j: objective.rank(j.objective))
    ]
    headers = [
        "job",
        *keys,
        f"objective: {objective.metric}",
        "95% CI",
        "like the best?",
        *(f"{s} mean" for s in scorers),
    ]
    table = html_table(headers, rows) + "<p>≈ best: the job's 95% interval overlaps the best job's.</p>"
    images = "".join(img(png, name) for name, png in plots.items())
    meta = (
        f"{len(jobs)} jobs; objective {escape(objective.metric)} ({escape(objective.direction)}); "
        f"swept: {escape(', '.join(keys) or 'nothing')}"
    )
    sections = [
        f'<h2>Objective against each swept value</h2><div class="plots">{images}</div>',
        "<h2>Jobs, best first</h2>" + table,
    ]
    if held_out is not None:
        sections.append("<h2>Held-out rows</h2><pre>" + escape("\n".join(held_out.lines())) + "</pre>")
    return Report(page(title, meta, sections), plots)


def write_sweep_report(
    sweep_dir: Path,
    jobs: Sequence[Job],
    objective: Objective,
    keys: Sequence[str],
    held_out: Holdout | None = None,
) -> list[Path]:
    """sweep.html and plots/objective_vs_<key>.png in the sweep directory; returns the files written.
    A sweep whose jobs all failed has nothing to chart."""
    if not jobs:
        return []
    report = sweep_report(jobs, objective, keys, f"evalframe sweep {sweep_dir.name}", held_out)
    return report.write(sweep_dir, SWEEP_REPORT)
