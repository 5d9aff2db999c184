"""What a run amounts to, in one model computed once and rendered everywhere: the console
(report.py), the HTML page (html_report.py), the Python API and rescore all show this table, with
this one number formatter, so they never disagree on a figure or on how it is written."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from evalframe.agreement import METRICS as AGREEMENT
from evalframe.results import RunResult, ScorerSummary, Stats, Usage

COLUMNS = ("scorer", "mean", "std", "min", "max", "scored", "unscored", "cost $")


def fmt(value: Any, digits: int = 3, signed: bool = False) -> str:
    """A figure as every rendering writes it: 3 places, counts as integers, "–" for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


@dataclass(frozen=True)
class Summary:
    count: int  # items in the run
    scorers: dict[str, ScorerSummary]
    agreement: dict[str, dict[str, float]]  # scorer -> agreement metric -> value (human scores only)
    usage: Usage
    stats: Stats

    @classmethod
    def of(cls, result: RunResult) -> Summary:
        return cls(result.count, result.summaries, result.agreement, result.usage, result.stats)

    def rows(self) -> list[list[str]]:
        """One row per scorer, cells as COLUMNS names them."""
        return [
            [name, *(fmt(v) for v in (s.mean, s.std, s.min, s.max, s.scored, s.unscored)), f"{s.cost:.4f}"]
            for name, s in self.scorers.items()
        ]

    def agreement_rows(self) -> list[list[str]]:
        """One row per scorer compared with people, cells as ("scorer", *AGREEMENT)."""
        return [
            [name, *(fmt(metrics.get(k, math.nan), 0 if k == "n" else 3) for k in AGREEMENT)]
            for name, metrics in self.agreement.items()
        ]

    def totals(self) -> str:
        u, s = self.usage, self.stats
        batched = (
            f" ({s.batched} requests in batches at the batch price; without batching "
            f"${u.cost - s.batch_cost + s.unbatched_cost:.4f})"
            if s.batched
            else ""
        )
        return (
            f"model calls: {s.calls}, cache hits: {s.hits}; tokens: {u.prompt_tokens} in, "
            f"{u.completion_tokens} out; cost ${u.cost:.4f}{batched}"
        )

    def text(self) -> str:
        """The tables as aligned plain text (the Python API, a failing test's report)."""
        lines = [f"evalframe: {self.count} items", *_aligned([list(COLUMNS), *self.rows()])]
        if self.agreement:
            lines += [
                "agreement with the human scores",
                *_aligned([["scorer", *AGREEMENT], *self.agreement_rows()]),
            ]
        return "\n".join(lines)

    def means(self) -> dict[str, float]:
        return {name: s.mean for name, s in self.scorers.items()}

    def to_json(self) -> dict[str, Any]:
        return {name: asdict(s) for name, s in self.scorers.items()}


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]


def reasons(result: RunResult, items: list[Any] | None = None) -> str:
    """Every item's scores and reasons as Markdown (MLflow's reasons.md, the API's `reasons()`)."""
    shown = result.items if items is None else items
    lines = ["# Reasons", ""]
    if items is None and len(result.items) < result.count:
        lines += [f"The first {len(result.items)} of {result.count} items; all are in results.jsonl.", ""]
    for item in shown:
        lines += [
            f"## {item.id}",
            "",
            f"**Input:** {item.input}",
            "",
            f"**Ground truth:** {item.ground_truth}",
            "",
        ]
        lines += [f"**Output:** {item.output}", ""]
        for name, r in item.scores.items():
            lines.append(f"- **{name}** {f'{r.score:.2f}' if r.scored else 'unscored'}: {r.reason}")
        lines.append("")
    return "\n".join(lines)
