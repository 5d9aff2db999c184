"""What the console shows: a summary table per scorer and where to find the run."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evalframe.results import RunResult

# Outside a terminal (CI logs, pipes) rich would wrap at 80 columns and cut scorer names.
console = Console(width=None if Console().is_terminal else 120)


def _fmt(value: float, digits: int = 3) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def summary(result: RunResult, saved: Path) -> None:
    table = Table(title=f"evalframe: {len(result.items)} items")
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
    usage = result.usage
    console.print(
        f"tokens: {usage.prompt_tokens} in, {usage.completion_tokens} out; cost ${usage.cost:.4f}; "
        f"results: {saved}"
    )


def where_to_look(uri: str, experiment_id: str, run_id: str) -> None:
    if uri.startswith(("http://", "https://")):
        console.print(f"MLflow run {run_id}: {uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}")
        return
    console.print(
        f"MLflow run {run_id} logged to {uri}. To browse it:\n"
        f"  mlflow ui --backend-store-uri {uri}\n"
        f"  then open http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{run_id}"
    )
