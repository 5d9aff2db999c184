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
from evalframe.results.journal import Journal
from evalframe.results.run_result import RunResult
from evalframe.run import modes, pipeline, planning
from evalframe.scorers.digest import digests as verdict_digests
from evalframe.tracking import watcher


@dataclass
class Tick:
    """What a tick did: traces judged (some scorer asked, or left unscored when they cannot be judged),
    skipped (every verdict on them already) and each scorer's figures over the judged ones."""

    judged: int = 0
    skipped: int = 0
    unjudgeable: int = 0  # of the judged, traces that cannot be judged: unscored, their verdicts say why
    means: dict[str, float] = field(default_factory=dict)
    unscored: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def metrics(self, waiting: int) -> dict[str, float]:
        """The figures logged at the tick's step: `<scorer>/mean`, `<scorer>/unscored`, `watch/*`."""
        out = {"watch/judged": float(self.judged), "watch/skipped": float(self.skipped)}
        out["watch/unjudgeable"] = float(self.unjudgeable)
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
        p = pipeline.plan(dict(config), set_aside=True)  # one trace that cannot be judged stops no watcher
    except judged.AllJudged as e:  # every trace of the window carries every verdict already
        tick.skipped = e.skipped
        return tick
    except DataError as e:
        if "has no rows" in str(e):  # the window's traces were all left out by the sample or limit
            return tick
        raise
    # Its rows are the window's traces still without their verdicts: fewer after a stop mid-way through
    # writing them, which the tick's mode does not take for changed rows. Its finished items are kept
    # unless the settings changed since (their verdicts would be stale): then it starts afresh.
    resume = resume and Journal(directory).manifest.digests == p.digests
    done = pipeline.run_plan(p, directory, modes.TICK, resume, run_id=run_id)
    done.journal.logged(run_id)
    # The tick's own line says what was judged: only what went wrong is said besides.
    tick.notes = [n for line in done.notes for n in line.splitlines() if n.startswith(("warning", "error"))]
    if p.aside is not None and p.aside.aside:
        tick.unjudgeable = p.aside.aside
        tick.notes += [f"warning: {why}: left unscored, its verdict says why" for why in p.aside.reasons]
        if p.aside.aside > len(p.aside.reasons):
            tick.notes.append(f"warning: {p.aside.aside - len(p.aside.reasons)} more traces cannot be judged")
    return _counted(tick, done.result, p.unjudged)


def digests(config: Mapping[str, Any]) -> dict[str, str]:
    """Each scorer's verdict digest under `config`: what a trace's verdicts of this watcher carry."""
    scorers = planning.scorers_of(config, {})
    return verdict_digests(config, scorers, planning.target_of(config, None).identity())


def _counted(tick: Tick, result: RunResult, unjudged: judged.Unjudged | None) -> Tick:
    tick.judged = result.count
    tick.skipped = unjudged.skipped if unjudged else 0
    for name, summary in result.summaries.items():
        tick.means[name] = summary.mean
        tick.unscored[name] = summary.unscored
    return tick
