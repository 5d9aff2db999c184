"""What the console shows: a summary table per scorer and where to find the run."""

from __future__ import annotations

import logging
import math
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalframe.models.steps import Stats
from evalframe.report import library_log
from evalframe.results.comparison import COLUMNS as COMPARE_COLUMNS, Comparison
from evalframe.results.gate import Check
from evalframe.results.jobs import Best, Holdout, Job, like_the_best
from evalframe.results.scores import SHOWN_UNSCORED, Objective
from evalframe.results.summary import AGREEMENT, COLUMNS, Summary, fmt, fmt_cost, fmt_interval, fmt_metric

# Libraries whose INFO and WARNING lines (DB migrations, font caches, HTTP retries that
# end well) hide our output; their errors still show, and hydra.verbose=true shows everything.
_CHATTY = (
    "mlflow",
    "LiteLLM",
    "litellm",
    "httpx",
    "alembic",
    "matplotlib",
    "urllib3",
    "hydra",
)


def quiet_libraries(verbose: bool = False) -> None:
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.ERROR)
    library_log.keep(verbose)  # MLflow's own errors: into a file named on the console, not their tracebacks


# Outside a terminal (CI logs, pipes) rich would wrap at 80 columns and cut scorer names.
console = Console(width=None if Console().is_terminal else 120)


@contextmanager
def silenced(quiet: bool = True) -> Iterator[None]:
    """Nothing on the console while inside (the Python API prints only when asked)."""
    before = console.quiet
    console.quiet = quiet or before
    try:
        yield
    finally:
        console.quiet = before


@contextmanager
def progress(total: int, stats: Stats, shown: bool = True) -> Iterator[Callable[[], None]]:
    """A live bar (items done, model calls, cache hits, cost so far); silent when not in a terminal,
    or not `shown` (a shard of an evaluation, whose whole has a bar of its own: evalframe.sweep.progress)."""
    columns = (
        TextColumn("[bold]scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("calls {task.fields[calls]}  cache hits {task.fields[hits]}  cost {task.fields[cost]}"),
        TextColumn("[yellow]{task.fields[limits]}"),
        TimeElapsedColumn(),
    )
    hidden = not (shown and console.is_terminal)
    with Progress(*columns, console=console, disable=hidden, transient=False) as bar:
        task = bar.add_task("scoring", total=total, calls=0, hits=0, cost=fmt_cost(0.0), limits="")

        def fields() -> dict[str, Any]:
            limits = rate_limits(stats)
            cost = fmt_cost(stats.cost)  # "—" once a model without a known price answered
            return {"calls": stats.calls, "hits": stats.hits, "cost": cost, "limits": limits}

        def advance() -> None:
            bar.update(task, advance=1, **fields())

        yield advance
        bar.update(task, **fields())


def rate_limits(stats: Stats) -> str:
    """The progress line's word on rate limits: 429s met, in-flight limits cut below concurrency."""
    said = [f"429s {stats.rate_limited}"] if stats.rate_limited else []
    throttled = stats.throttled()
    return "  ".join([*said, throttled] if throttled else said)


def _table(title: str, columns: tuple[str, ...] | list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for column in columns:
        if column in ("scorer", "job", "judge"):
            # On a narrow terminal a name folds onto a second line rather than being cut (a cut scorer
            # name, answer_relevan…, cannot be told from another); numbers never fold.
            table.add_column(column, justify="left", overflow="fold", min_width=8)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    console.print(_table(title, columns, rows))


def summary(s: Summary, saved: Path) -> None:
    column = COLUMNS.index("unscored")
    rows = [
        [f"[red]{c}[/red]" if i == column and c != "0" else c for i, c in enumerate(row)] for row in s.rows()
    ]
    console.print(_table(f"evalframe: {s.count} items", COLUMNS, rows))
    if s.agreement:
        console.print(_table("agreement with the human scores", ("scorer", *AGREEMENT), s.agreement_rows()))
    if s.judge_rows():
        console.print(_table("judges", ("scorer", "judge", "mean", "unscored"), s.judge_rows()))
    for line in [*s.figure_lines(), *s.panel_lines()]:
        console.print(line, markup=False, highlight=False)
    console.print(s.totals(), markup=False, highlight=False)
    unscored(s, saved)
    files(saved)


def files(saved: Path) -> None:
    """Where the run's files are, one a line: report.html (when written) and results.jsonl."""
    report = saved.parent / "report.html"
    for what, path in (("report", report), ("results", saved)):
        if path.is_file():
            console.print(f"{what}: {_shown(path)}", soft_wrap=True, markup=False, highlight=False)


def _shown(path: Path, here: Path | None = None) -> str:
    """A path as the user's shell reaches it from `here` (the working directory): relative below it."""
    try:
        return str(path.resolve().relative_to((here or Path.cwd()).resolve()))
    except ValueError:
        return str(path)


def ui_command(here: Path | None = None) -> str:
    """How the user's shell in `here` (the working directory) starts the UI: `evalframe ui` when
    `evalframe` is on its PATH; else this installation's script by its path (a venv not activated:
    `make run` does not activate it), else this Python with -m."""
    if shutil.which("evalframe"):
        return "evalframe ui"
    script = Path(sys.executable).parent / "evalframe"
    if script.is_file():
        return f"{shlex.quote(_shown(script, here))} ui"
    return f"{shlex.quote(sys.executable)} -m evalframe ui"


def unscored(s: Summary, saved: Path) -> None:
    """The first unscored items of each scorer, one line each, and where the rest are."""
    rows = s.unscored_rows()
    if not rows:
        return
    console.print(f"unscored items (the first {SHOWN_UNSCORED} per scorer; id, step, error):")
    for name, u in rows:
        line = f"  {name}  {u.id}  {u.step}  {u.error}"
        width = console.width if console.is_terminal else 200
        line = line if len(line) <= width else line[: width - 1] + "…"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    rest = ", ".join(f"{n} more of {name}" for name, n in s.unscored_rest().items())
    console.print(
        f"  {rest + '; e' if rest else 'E'}very item, error and raw reply is in {saved}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def job(number: int, values: str, objective: Objective | None, code: int) -> None:
    """A sweep job's one line: its table is in its report.html and MLflow run, the sweep's at the end."""
    measured = (
        f"{objective.metric} {fmt_metric(objective.metric, objective.value)}" if objective else "no objective"
    )
    verdict = "" if code == 0 else "  [red]FAILED[/red]"
    console.print(
        f"job {number}: {escape(values) or '(no swept values)'}  {measured}  exit {code}{verdict}",
        soft_wrap=True,
    )


def gate(code: int, checks: list[Check]) -> None:
    """Print the gate's checks when any was configured or failed (the unscored-rate check always runs)."""
    failed = [c for c in checks if not c.passed]
    gated = [c for c in checks if c.what != "unscored rate"]
    if not failed and not gated:
        return
    table = Table(title="gate: " + ("passed" if not failed else f"FAILED (exit code {code})"))
    for column in ("scorer", "check", "required", "actual", ""):
        table.add_column(column)
    for c in checks if gated else failed:
        table.add_row(c.scorer, c.what, c.required, fmt(c.actual), "ok" if c.passed else "[red]FAIL[/red]")
    console.print(table)


def _short(value: str) -> str:
    """A swept value for the table: Optuna's floats (0.41702200470257400) to 4 significant digits."""
    try:
        number = float(value)
    except ValueError:
        return value
    return value if len(value) <= 6 else f"{number:.4g}"


def sweep(jobs: list[Job], swept: list[str], objective: Objective) -> None:
    """All jobs of a sweep, best first by the objective; a column per swept key and the objective."""
    if not jobs:
        return
    scorers = [s for s in dict.fromkeys(k for j in jobs for k in j.means) if f"{s}/mean" != objective.metric]
    title = f"sweep: {len(jobs)} jobs, best first by {objective.metric} ({objective.direction})"
    table = Table(title=title, caption="≈ best: its 95% interval overlaps the best job's")
    for column in ("job", *swept, "objective", "95% CI", "", *(f"{s}/mean" for s in scorers)):
        table.add_column(column, justify="left" if column == "job" else "right")
    marks = like_the_best(jobs, objective)
    for job in sorted(jobs, key=lambda j: objective.rank(j.objective)):
        table.add_row(
            job.name,
            *(escape(_short(job.overrides.get(k, ""))) for k in swept),
            fmt_metric(objective.metric, job.objective),
            fmt_interval(job.interval),
            marks.get(job.name, ""),
            *(fmt(job.means.get(s, math.nan)) for s in scorers),
        )
    console.print(table)


def best(found: Best | None, objective: Objective) -> None:
    """The best job's values, as overrides to paste into the next command."""
    if found is None:
        console.print(f"best: none; no job produced a value of {objective.metric} (see the warnings above)")
        return
    values = " ".join(f"{k}={v}" for k, v in found.params.items()) or "(no swept values)"
    job = f", job {found.job.name}" if found.job else ""
    console.print(f"best: {values}", soft_wrap=True, markup=False, highlight=False)
    value = fmt_metric(objective.metric, found.value, digits=4)
    console.print(f"  {objective.metric} = {value} ({objective.direction}{job})")


def _clip(text: str, width: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def comparison(c: Comparison) -> None:
    """The paired comparison of two runs per scorer, and the items that moved most."""
    rows = [[escape(cell) for cell in row] for row in c.rows()]
    for row in rows:
        row[-1] = {"worse": "[red]worse[/red]", "better": "[green]better[/green]"}.get(row[-1], row[-1])
    table = _table(c.title(), COMPARE_COLUMNS, rows)
    table.box = box.SIMPLE  # eight columns: without vertical rules they fit a 120-column CI log
    console.print(table)
    console.print(c.counts(), markup=False, highlight=False)
    for s in c.scorers:
        if s.moved:  # a list, not a table: two reasons side by side do not fit a CI log's width
            lines = [f"{s.label}: the items that moved most"]
            for item, text, before, after, change, was, now in s.moved_rows():
                lines += [
                    f"  {item}  {before} -> {after} ({change})  {_clip(text)}",
                    f"      baseline:  {_clip(was, 200)}",
                    f"      candidate: {_clip(now, 200)}",
                ]
            console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def holdout(h: Holdout) -> None:
    """Whether the tuned settings beat the defaults on the rows the sweep never saw."""
    lines = h.lines()
    console.print("\n".join(lines[:-1]), markup=False, highlight=False)
    colour = {"better": "green", "worse": "red"}.get(h.outcome, "yellow")
    console.print(f"[{colour}]{escape(lines[-1])}[/{colour}]")


@contextmanager
def notes() -> Iterator[list[str]]:
    """A list for the warnings and errors that tracking hands back (it prints nothing), printed to
    stderr one a line, in order, on the way out: also when what filled it then failed."""
    lines: list[str] = []
    try:
        yield lines
    finally:
        for line in lines:
            print(line, file=sys.stderr)


def where_to_look(uri: str, shown_uri: str, experiment_id: str, run_id: str, what: str = "View") -> None:
    """One line: how to open the run. `shown_uri` is `uri` with any credentials blanked."""
    page = f"#/experiments/{experiment_id}/runs/{run_id}"
    if uri.startswith(("http://", "https://")):
        line = f"{what}: {shown_uri.rstrip('/')}/{page}"
    else:
        # `evalframe ui` finds the store as a run does: name it only when a run given none would not.
        default = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
        store = "" if uri == default else f" tracking.uri={uri}"
        line = f"{what}: {ui_command()}{store}  ->  http://127.0.0.1:5000/{page}"
    console.print(line, soft_wrap=True, markup=False, highlight=False)
