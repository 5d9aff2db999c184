"""The judge calls `evalframe align` makes, counted before the first one (align.max_calls), and those it
need not make: the verdicts a logged run holds already.

Aligning a logged run (`run_id=`, i.e. dataset=run: the items of a run its scorer judged), the judge as
it was scores that run's items again, the training part and the held-out part ("before"): the very
requests the run made, whose steps keep their cache keys and replies (rescore.replies). Those are
served from the run first (cache.Layered), on any machine and with any cache, so no verdict is bought
twice; a request the run did not make (another judge model, an edited prompt, an item it could not
score) goes to the model through the disk cache as usual. The aligned judge's requests are never
looked up in the run: its prompt differs, and so do its keys.

Before any call, each of those requests' keys is computed as the judge's model computes it (the
rendered prompt, the reply schema, the model's settings per judge and repeat), so the budget counts
only what will really be asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalframe.config.settings import RunSettings
from evalframe.data.rows import Row
from evalframe.errors import ConfigError
from evalframe.models.cache import Layered
from evalframe.models.llm import response_format
from evalframe.models.replies import request_key
from evalframe.results.run_result import RunResult
from evalframe.run import earlier
from evalframe.run.rescore import replies
from evalframe.scorers.base import JudgeScorer
from evalframe.scorers.judge import Judge
from evalframe.scorers.panel import for_repeat
from evalframe.targets.base import RecordedOutput, Target


@dataclass
class FromRun:
    """The judge's verdicts a logged run holds: its usable replies by cache key, and its name."""

    name: str  # "run RUN_ID", or the run directory dataset.path names
    replies: dict[str, dict[str, Any]]

    def cache(self, settings: RunSettings) -> Layered:
        """The run's replies first, then the disk cache of `settings` (cache.mode, cache.dir)."""
        return Layered(self.replies, settings.cache.mode, settings.cache.dir)

    def read(self, results: Iterable[RunResult], scorer: str) -> int:
        """The verdicts of `scorer` in `results` that came from the run (no call made for them)."""
        return sum(
            1
            for result in results
            for item in result.items
            if scorer in item.scores
            for step in item.scores[scorer].steps
            if step.cached and step.key in self.replies
        )


def from_run(dataset: Mapping[str, Any]) -> FromRun | None:
    """The logged run's stored replies when the rows are a run's items (dataset=run), else None."""
    if dataset.get("format") != "run":
        return None
    found = {k: v for k, v in replies(earlier.stored(dataset)).items() if not v["error"]}
    return FromRun(f"run {dataset['run_id']}" if dataset.get("run_id") else str(dataset["path"]), found)


def requests(judge: JudgeScorer, target: Target, rows: Iterable[Row]) -> list[str] | None:
    """The cache keys of the requests `judge` makes for `rows`, each judge of its panel and repeat, as
    the model computes them (models.replies); None when they cannot be known before a call: outputs
    made anew (a live target) or examples retrieved by embedding."""
    if not isinstance(judge, Judge) or not isinstance(target, RecordedOutput) or judge.retrieval:
        return None
    fmt = response_format(judge.reply_model)
    settings = [for_repeat(j.settings, r) for j in judge.panel.judges for r in range(judge.panel.repeats)]
    return [request_key(s, judge.render(row, row.output or ""), fmt) for row in rows for s in settings]


def budget(
    judge: JudgeScorer,
    train: int,
    held: int,
    rules: int,
    max_calls: int | None,
    read: int = 0,
    source: str = "",
) -> int:
    """The judge calls align makes, refused up front over `max_calls`: the training part once, the
    held-out part twice (the judge as it was, then aligned), each once per judge and repeat; with
    `rules` (guidelines) one call to write them and the training part once per rule tried; less the
    `read` requests of the judge as it was that the logged run `source` made already."""
    per_item = len(judge.panel.judges) * judge.panel.repeats
    count = per_item * (train * (1 + rules) + 2 * held) + (1 if rules else 0) - read
    if max_calls is not None and count > max_calls:
        tried = f" + {rules} rules tried x {train} training items + 1 to write them" if rules else ""
        spared = f", less {read} verdicts read from {source}" if read else ""
        raise ConfigError(
            f"align.max_calls={max_calls}: aligning asks for {count} judge calls ({train} training "
            f"items + 2 x {held} held-out items{tried}, x {per_item} per item{spared}); raise "
            "align.max_calls or use fewer items"
        )
    return count


def planned(
    dataset: Mapping[str, Any],
    judge: JudgeScorer,
    target: Target,
    parts: tuple[list[Row], list[Row]],
    rules: int,
    max_calls: int | None,
) -> tuple[int, FromRun | None]:
    """The judge calls align will make on the training and held-out `parts` (budget), less the requests
    of the judge as it was that the logged run made (dataset=run), and that run's verdicts."""
    stored = from_run(dataset)
    keys = requests(judge, target, [*parts[0], *parts[1]]) if stored else None
    read = sum(k in stored.replies for k in keys) if stored and keys else 0
    source = stored.name if stored else ""
    return budget(judge, len(parts[0]), len(parts[1]), rules, max_calls, read, source), stored
