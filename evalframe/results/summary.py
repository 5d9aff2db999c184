"""What a run amounts to, in one model computed once and rendered everywhere: the console
(report.py), the HTML page (html_report.py), the Python API and rescore all show this table, with
this one number formatter, so they never disagree on a figure or on how it is written."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from evalframe.models.steps import Stats, Usage
from evalframe.results.agreement import METRICS as AGREEMENT
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ScorerSummary, Unscored

COLUMNS = ("scorer", "mean", "95% CI", "std", "min", "max", "scored", "unscored", "cost")


def fmt(value: Any, digits: int = 3, signed: bool = False) -> str:
    """A figure as every rendering writes it: 3 places, counts as integers, "–" for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, int):
        return str(value)
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def fmt_cost(value: float, signed: bool = False) -> str:
    """A cost in USD as every rendering writes it: "—" when unknown (a model without a known price),
    never a guessed figure; "$0" for nothing; else 4 decimal places ("$0.0013"), or more below
    $0.001, enough for 2 significant digits ("$0.000034"): a run of a few cheap calls is never shown
    as "$0.0000", which would read as free."""
    if math.isnan(value):
        return "—"
    sign = "-" if value < 0 else "+" if signed else ""
    if value == 0:
        return f"{sign}$0"
    places = max(4, 1 - math.floor(math.log10(abs(value))))
    return f"{sign}${abs(value):.{places}f}"


def fmt_metric(metric: str, value: float, signed: bool = False, digits: int = 3) -> str:
    """A logged metric's value: a cost (`usage/cost`, `<scorer>/cost`) as fmt_cost, others as fmt."""
    return fmt_cost(value, signed) if metric.endswith("/cost") else fmt(value, digits, signed)


def fmt_interval(interval: tuple[float, float] | None, scored: int | None = None, digits: int = 3) -> str:
    """A 95% interval as every rendering writes it; one scored item has none, and says so."""
    if scored == 1:
        return "none: 1 item"
    if interval is None or any(math.isnan(v) for v in interval):
        return "–"
    return f"[{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]"


@dataclass(frozen=True)
class Summary:
    count: int  # items in the run
    scorers: dict[str, ScorerSummary]
    agreement: dict[str, dict[str, float]]  # scorer -> agreement metric -> value (human scores only)
    usage: Usage
    stats: Stats
    unscored: dict[str, list[Unscored]]  # scorer -> its first unscored items
    intervals: dict[str, tuple[float, float]]  # metric -> its 95% interval (RunResult.intervals)
    panel: dict[str, float] = field(default_factory=dict)  # judges and repeats: RunResult._panel_metrics
    unstable: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # scorer -> (id, std)
    figures: dict[str, dict[str, float]] = field(default_factory=dict)  # scorer -> figure -> item mean
    lower_better: frozenset[str] = frozenset()  # scorers whose lower scores are good, marked in the table

    @classmethod
    def of(cls, result: RunResult) -> Summary:
        panel = {
            k: v
            for k, v in result.metrics().items()
            if "/judge" in k or k.endswith(("/repeat_std", "/unstable"))
        }
        unstable = {name: result.unstable(name) for name in result.scorers if f"{name}/repeat_std" in panel}
        return cls(
            result.count,
            result.summaries,
            result.agreement,
            result.usage,
            result.stats,
            result.unscored,
            result.intervals,
            panel,
            unstable,
            result.figure_means(),
            result.lower_better,
        )

    def unscored_rows(self) -> list[tuple[str, Unscored]]:
        """(scorer, item) for the first unscored items of each scorer."""
        return [(name, u) for name, items in self.unscored.items() for u in items]

    def unscored_rest(self) -> dict[str, int]:
        """Scorer -> how many of its unscored items are not listed."""
        listed = {name: len(items) for name, items in self.unscored.items()}
        return {
            n: s.unscored - listed.get(n, 0) for n, s in self.scorers.items() if s.unscored > listed.get(n, 0)
        }

    def judge_rows(self) -> list[list[str]]:
        """One row per judge of a panel, cells as ("scorer", "judge", "mean", "unscored")."""
        rows = []
        for key, unscored in self.panel.items():
            name, _, rest = key.partition("/judge/")
            if rest.endswith("/unscored"):  # every judge has one; a judge that always failed has no mean
                label = rest.removesuffix("/unscored")
                mean = self.panel.get(f"{name}/judge/{label}/mean", math.nan)
                rows.append([name, label, fmt(mean), fmt(int(unscored))])
        return rows

    def panel_lines(self) -> list[str]:
        """How far a panel's judges agree, and how stable repeated judgments are, in words."""
        lines = []
        for name in self.scorers:
            alpha = self.panel.get(f"{name}/judge_agreement/alpha", math.nan)
            rho = self.panel.get(f"{name}/judge_agreement/spearman", math.nan)
            if f"{name}/judge_agreement/n" in self.panel:
                n = int(self.panel[f"{name}/judge_agreement/n"])
                lines.append(
                    f"{name}: the judges agree with Krippendorff's alpha {fmt(alpha)} and a mean pairwise "
                    f"Spearman {fmt(rho)} over {n} items"
                )
            if f"{name}/repeat_std" in self.panel:
                share = self.panel[f"{name}/unstable"]
                worst = ", ".join(f"{i} (std {std:.2f})" for i, std in self.unstable.get(name, []))
                lines.append(
                    f"{name}: repeats differ by a std of {fmt(self.panel[f'{name}/repeat_std'])} per item; "
                    f"{share:.0%} of items unstable" + (f"; most unstable: {worst}" if worst else "")
                )
        return lines

    def figure_lines(self) -> list[str]:
        """One line per scorer that reports figures beside its score (tool-call precision, recall...),
        and per scorer that had items with nothing to measure (left out of its mean by its empty rule)."""
        figures = [
            f"{name}: "
            + ", ".join(f"{figure} {fmt(mean)}" for figure, mean in means.items())
            + " (item means)"
            for name, means in self.figures.items()
        ]
        return figures + [
            f"{name}: {s.not_applicable} not applicable (nothing to measure: out of the mean, not unscored)"
            for name, s in self.scorers.items()
            if s.not_applicable
        ]

    def rows(self) -> list[list[str]]:
        """One row per scorer, cells as COLUMNS names them."""
        return [
            [
                f"{name} (lower is better)" if name in self.lower_better else name,
                fmt(s.mean),
                fmt_interval(self.intervals.get(f"{name}/mean"), s.scored),
                *(fmt(v) for v in (s.std, s.min, s.max, s.scored, s.unscored)),
                fmt_cost(s.cost),
            ]
            for name, s in self.scorers.items()
        ]

    def agreement_cells(self) -> dict[str, list[tuple[str, str]]]:
        """Per scorer compared with people, (value, 95% interval) per metric of AGREEMENT (n has none)."""
        cells = {}
        for name, metrics in self.agreement.items():
            n = int(metrics.get("n", 0))
            cells[name] = [(fmt(n), "")] + [
                (
                    fmt(metrics.get(k, math.nan)),
                    fmt_interval(self.intervals.get(f"{name}/agreement/{k}"), n, 2),
                )
                for k in AGREEMENT[1:]
            ]
        return cells

    def agreement_rows(self) -> list[list[str]]:
        """Two rows per scorer compared with people, cells as ("scorer", *AGREEMENT): the values, then
        their intervals (below them, so the table stays as narrow as a CI log)."""
        rows = []
        for name, cells in self.agreement_cells().items():
            rows += [[name, *(v for v, _ in cells)], ["  95% CI", *(ci for _, ci in cells)]]
        return rows

    def totals(self) -> str:
        u, s = self.usage, self.stats
        limited = (
            f"; rate limited: {s.rate_limited} (429s), waited {s.rate_wait:.1f} s"
            if s.rate_limited or s.rate_wait
            else ""
        )
        batched = (
            f" ({s.batched} requests in batches at the batch price; without batching "
            f"{fmt_cost(u.cost - s.batch_cost + s.unbatched_cost)})"
            if s.batched
            else ""
        )
        unpriced = f" ({self._unpriced()})" if s.unpriced and math.isnan(u.cost) else ""
        return (
            f"model calls: {s.calls}, cache hits: {s.hits}{limited}; tokens: {u.prompt_tokens} in, "
            f"{u.completion_tokens} out; cost {fmt_cost(u.cost)}{unpriced}{batched}"
        )

    def _unpriced(self) -> str:
        """Why the cost is unknown: a model served at a custom api_base (whose price its name cannot
        tell), or one LiteLLM has no price for; and what to set."""
        elsewhere = sorted(self.stats.behind_api_base)
        unknown = sorted(self.stats.unpriced - self.stats.behind_api_base)
        said = [f"no price for {', '.join(unknown)}"] if unknown else []
        if elsewhere:
            said.append(f"{', '.join(elsewhere)} at a custom api_base, whose price LiteLLM cannot know")
        free = ", 0 for a free local server" if elsewhere else ""
        return "; ".join(said) + f": set its input_cost_per_token, output_cost_per_token{free}"

    def text(self) -> str:
        """The tables as aligned plain text (the Python API, a failing test's report)."""
        lines = [f"evalframe: {self.count} items", *_aligned([list(COLUMNS), *self.rows()])]
        if self.agreement:
            lines += [
                "agreement with the human scores",
                *_aligned([["scorer", *AGREEMENT], *self.agreement_rows()]),
            ]
        if self.judge_rows():
            lines += ["judges", *_aligned([["scorer", "judge", "mean", "unscored"], *self.judge_rows()])]
        return "\n".join([*lines, *self.figure_lines(), *self.panel_lines()])

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
            lines += [f"  - {line}" for line in r.turn_lines()]  # a conversation judge's, per turn
            if cut := r.truncated_turns():
                lines.append(f"  - turns {', '.join(map(str, cut))} cut from the judge's prompt")
        lines.append("")
    return "\n".join(lines)


def scorer_judges(spec: Any) -> list[str]:
    """A scorer's judge models: its panel's (`models`: preset names or mappings), else its `model`."""
    if not isinstance(spec, Mapping):
        return []
    panel = [m if isinstance(m, str) else str(m.get("name")) for m in spec.get("models") or []]
    return panel or ([str(spec["model"]["name"])] if (spec.get("model") or {}).get("name") else [])


def judges(config: Mapping[str, Any]) -> str:
    """The judge models of a run's scorers, comma-separated; "none" when no scorer calls a model."""
    scorers = (config.get("scorers") or {}).values()
    return ",".join(sorted({name for spec in scorers for name in scorer_judges(spec)})) or "none"


def facts(config: Mapping[str, Any], result: RunResult) -> dict[str, str]:
    """What was run, for the top of report.html and run.json: no one should have to guess later."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        evalframe = version("evalframe")
    except PackageNotFoundError:  # run from a checkout that was never installed
        evalframe = "unknown"
    return {
        "dataset": str(config["dataset"].get("name")),
        "judges": judges(config),
        "items": str(result.count),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "evalframe": evalframe,
    }
