"""`Evaluation`: what `evaluate` returns, scores per scorer and per item and where the run was recorded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from evalframe.results.run_result import RunResult
    from evalframe.results.scores import ScorerSummary


@dataclass
class Evaluation:
    """The outcome of `evaluate`: scores per scorer and per item, and where the run was recorded."""

    result: RunResult
    config: dict[str, Any]  # the resolved config, as logged
    run_dir: Path  # results.jsonl (every item, journaled as it finished) and run.json
    exit_code: int  # what the CLI would exit with: 0 ok, 3 not logged to MLflow, 4 too many unscored

    @property
    def run_id(self) -> str | None:
        """The MLflow run id, or None when tracking is off (or MLflow could not be reached)."""
        return self.result.run_id

    @property
    def summaries(self) -> dict[str, ScorerSummary]:
        return self.result.summaries

    @property
    def means(self) -> dict[str, float]:
        """Mean score per scorer, over scored items (NaN when none could be scored)."""
        return {name: s.mean for name, s in self.summaries.items()}

    def mean(self, scorer: str) -> float:
        if scorer not in self.result.scorers:
            raise KeyError(
                f"no scorer {scorer!r} in this evaluation; it ran {', '.join(self.result.scorers)}"
            )
        return self.summaries[scorer].mean

    def ci(self, name: str) -> tuple[float, float]:
        """The 95% interval (low, high) of a scorer's mean (`ci("token_f1")`) or of any metric with
        one (`ci("token_f1/agreement/spearman")`); (nan, nan) when there is none (one scored item)."""
        metric = f"{name}/mean" if name in self.result.scorers else name
        if metric not in self.result.intervals:
            known = [m.removesuffix("/mean") for m in self.result.intervals]
            raise KeyError(f"no interval for {name!r} in this evaluation; it has {', '.join(known)}")
        low, high = self.result.intervals[metric]
        return low, high

    @property
    def items(self) -> pd.DataFrame:
        """One row per item: id, input, ground_truth, output, and per scorer its score, reason, error,
        the judge's raw reply when unusable, cost and latency (columns `<scorer>/score`, ...)."""
        import pandas as pd

        from evalframe.results.table import items_table

        return pd.DataFrame(items_table(self.result))

    @property
    def results_file(self) -> Path:
        from evalframe.results.journal import RESULTS

        return self.run_dir / RESULTS

    @property
    def report_path(self) -> Path | None:
        """The run's HTML report, if one was written into the run directory."""
        path = self.run_dir / "report.html"
        return path if path.is_file() else None

    def reasons(self, worst_first: bool = False, limit: int | None = None) -> str:
        """Every item's scores and reasons as Markdown (MLflow's reasons.md); `worst_first` sorts by
        the lowest score, unscored first, and `limit` keeps that many items."""
        from evalframe.results.summary import reasons

        items = list(self.result.items)
        if worst_first:
            items.sort(key=lambda i: min((r.score if r.scored else -1.0) for r in i.scores.values()))
        return reasons(self.result, items[:limit])

    def summary(self) -> str:
        """The summary table, as the CLI prints it, in plain text."""
        from evalframe.results.summary import Summary

        where = f"results: {self.results_file}" + (f"; MLflow run {self.run_id}" if self.run_id else "")
        return f"{Summary.of(self.result).text()}\n{where}"

    def __str__(self) -> str:
        return self.summary()

    __repr__ = __str__
