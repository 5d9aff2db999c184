"""One tick of watch mode: the pipeline's plan and execute on the traces that ended in the tick's window,
journaled in the tick's own directory (a watcher killed mid-tick resumes that tick's finished items, as
`resume` does a run), then the verdicts written back onto the traces with the watcher's run as their
`evalframe.run_id`. The per-(trace, scorer) skip of write-back (run/reuse.py) holds here as everywhere:
a trace that carries a scorer's verdict under the same settings is never asked again."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalframe.data import judged
from evalframe.errors import DataError
from evalframe.results.run_result import RunResult
from evalframe.run import modes, pipeline
from evalframe.tracking import watcher


@dataclass
class Tick:
    """What a tick did: traces judged (some scorer asked), skipped (every verdict on them already) and
    each scorer's figures over the judged ones."""

    judged: int = 0
    skipped: int = 0
    means: dict[str, float] = field(default_factory=dict)
    unscored: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def metrics(self, waiting: int) -> dict[str, float]:
        """The figures logged at the tick's step: `<scorer>/mean`, `<scorer>/unscored`, `watch/*`."""
        out = {"watch/judged": float(self.judged), "watch/skipped": float(self.skipped)}
        out["watch/waiting"] = float(waiting)
        for name, mean in self.means.items():
            if not math.isnan(mean):
                out[f"{name}/mean"] = mean
        out.update({f"{name}/unscored": float(n) for name, n in self.unscored.items()})
        return out


def windowed(config: Mapping[str, Any], from_ms: int, to_ms: int) -> dict[str, Any]:
    """The config of a tick: the dataset's own query AND-ed with the traces that ended in [from, to)."""
    tick = copy.deepcopy(dict(config))
    dataset = tick["dataset"] = dict(tick["dataset"])
    window = watcher.bounds(from_ms, to_ms)
    dataset["filter"] = f"{dataset['filter']} AND {window}" if dataset.get("filter") else window
    return tick


def run(config: Mapping[str, Any], directory: Path, run_id: str, resume: bool) -> Tick:
    """Judge the traces `config` (a tick's: windowed) selects, journaled in `directory` (resumed from it
    when `resume`), and write their verdicts back for the run `run_id`: the run's lifecycle in the
    watch tick's mode (evalframe.run.modes.TICK)."""
    tick = Tick()
    try:
        p = pipeline.plan(dict(config))
    except judged.AllJudged as e:  # every trace of the window carries every verdict already
        tick.skipped = e.skipped
        return tick
    except DataError as e:
        if "has no rows" in str(e):  # the window's traces were all left out by the sample or limit
            return tick
        raise
    done = pipeline.run_plan(p, directory, modes.TICK, resume, run_id=run_id)
    done.journal.logged(run_id)
    # The tick's own line says what was judged: only what went wrong is said besides.
    tick.notes = [n for line in done.notes for n in line.splitlines() if n.startswith(("warning", "error"))]
    return _counted(tick, done.result, p.unjudged)


def _counted(tick: Tick, result: RunResult, unjudged: judged.Unjudged | None) -> Tick:
    tick.judged = result.count
    tick.skipped = unjudged.skipped if unjudged else 0
    for name, summary in result.summaries.items():
        tick.means[name] = summary.mean
        tick.unscored[name] = summary.unscored
    return tick
