"""What the console shows: a summary table per scorer and where to find the run."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalframe.gate import Check
from evalframe.results import RunResult, Stats

if TYPE_CHECKING:
    from evalframe.objective import Objective
    from evalframe.sweep import Best, Job

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
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not console.is_terminal, transient=False) as bar:
        task = bar.add_task("scoring", total=total, calls=0, hits=0, cost=0.0)

        def advance() -> None:
            bar.update(task, advance=1, calls=stats.calls, hits=stats.hits, cost=stats.cost)

        yield advance
        bar.update(task, calls=stats.calls, hits=stats.hits, cost=stats.cost)


def _fmt(value: float, digits: int = 3) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def summary(result: RunResult, saved: Path, stats: Stats) -> None:
    table = Table(title=f"evalframe: {result.count} items")
    for column in ("scorer", "mean", "std", "min", "max", "scored", "unscored", "cost $"):
        table.add_column(column, justify="left" if column == "scorer" else "right")
    for name, s in result.summaries.items():
        table.add_row(
            name,
            _fmt(s.mean),
            _fmt(s.std),
            _fmt(s.min),
            _fmt(s.max),
            str(s.scored),
            f"[red]{s.unscored}[/red]" if s.unscored else "0",
            f"{s.cost:.4f}",
        )
    console.print(table)
    if result.agreement:
        agreement = Table(title="agreement with the human scores")
        keys = ("n", "spearman", "pearson", "kendall", "mae", "accuracy", "kappa")
        for column in ("scorer", *keys):
            agreement.add_column(column, justify="left" if column == "scorer" else "right")
        for name, metrics in result.agreement.items():
            agreement.add_row(name, *(_fmt(metrics.get(k, math.nan), 0 if k == "n" else 3) for k in keys))
        console.print(agreement)
    usage = result.usage
    console.print(
        f"model calls: {stats.calls}, cache hits: {stats.hits}; tokens: {usage.prompt_tokens} in, "
        f"{usage.completion_tokens} out; cost ${usage.cost:.4f}; results: {saved}"
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
        table.add_row(c.scorer, c.what, c.required, _fmt(c.actual), "ok" if c.passed else "[red]FAIL[/red]")
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
            _fmt(job.objective),
            *(_fmt(job.means.get(s, math.nan)) for s in scorers),
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
