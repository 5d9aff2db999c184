"""What the console shows: a summary table per scorer and where to find the run."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalframe.gate import Check
from evalframe.jobs import Best, Job
from evalframe.results import Objective, Stats
from evalframe.summary import AGREEMENT, COLUMNS, Summary, fmt


def quiet_libraries() -> None:
    """Hydra logs at INFO; the libraries' INFO chatter (model loading, DB migrations) hides our output."""
    for name in ("sentence_transformers", "mlflow", "LiteLLM", "litellm", "httpx", "alembic", "transformers"):
        logging.getLogger(name).setLevel(logging.WARNING)


# Outside a terminal (CI logs, pipes) rich would wrap at 80 columns and cut scorer names.
console = Console(width=None if Console().is_terminal else 120)


@contextmanager
def progress(total: int, stats: Stats) -> Iterator[Callable[[], None]]:
    """A live bar (items done, model calls, cache hits, cost so far); silent when not in a terminal."""
    columns = (
        TextColumn("[bold]scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("calls {task.fields[calls]}  cache hits {task.fields[hits]}  ${task.fields[cost]:.4f}"),
        TextColumn("[yellow]{task.fields[limits]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not console.is_terminal, transient=False) as bar:
        task = bar.add_task("scoring", total=total, calls=0, hits=0, cost=0.0, limits="")

        def fields() -> dict[str, Any]:
            limits = rate_limits(stats)
            return {"calls": stats.calls, "hits": stats.hits, "cost": stats.cost, "limits": limits}

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
        # Names never fold: a cut scorer name cannot be told from another.
        table.add_column(column, justify="left" if column in ("scorer", "job") else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    console.print(_table(title, columns, rows))


def summary(s: Summary, saved: Path) -> None:
    rows = [[*row[:6], f"[red]{row[6]}[/red]" if row[6] != "0" else row[6], row[7]] for row in s.rows()]
    console.print(_table(f"evalframe: {s.count} items", COLUMNS, rows))
    if s.agreement:
        console.print(_table("agreement with the human scores", ("scorer", *AGREEMENT), s.agreement_rows()))
    console.print(f"{s.totals()}; results: {saved}")


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
    table = Table(title=title)
    for column in ("job", *swept, "objective", *(f"{s}/mean" for s in scorers)):
        table.add_column(column, justify="left" if column == "job" else "right")
    for job in sorted(jobs, key=lambda j: objective.rank(j.objective)):
        table.add_row(
            job.name,
            *(escape(_short(job.overrides.get(k, ""))) for k in swept),
            fmt(job.objective),
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
    console.print(f"  {objective.metric} = {found.value:.4f} ({objective.direction}{job})")


def where_to_look(uri: str, experiment_id: str, run_id: str) -> None:
    if uri.startswith(("http://", "https://")):
        console.print(f"MLflow run {run_id}: {uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}")
        return
    console.print(
        f"MLflow run {run_id} logged to {uri}. To browse it (the variable keeps LiteLLM, which MLflow "
        "loads, from fetching its price list, which hangs offline):\n"
        f"  LITELLM_LOCAL_MODEL_COST_MAP=True mlflow ui --backend-store-uri {uri}\n"
        f"  then open http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{run_id}"
    )
