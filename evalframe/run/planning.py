"""Planning a run, the pipeline's first stage: the config's scorers and target built (or the caller's
own taken), the credentials of every model they call checked, then every row read and validated and
every prompt checked against the first, all before the first model call. What comes out is a Plan."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalframe.config.check import check
from evalframe.config.settings import RunSettings
from evalframe.data import judged, rows as data, shards, splits
from evalframe.errors import ConfigError
from evalframe.models.cache import Cache
from evalframe.models.settings import ModelSettings
from evalframe.run import sources
from evalframe.scorers.base import Scorer, bound_work
from evalframe.scorers.digest import digests
from evalframe.targets.base import Target
from evalframe.tracking import live_traces, store


@dataclass
class Plan:
    """A validated evaluation, ready to run."""

    config: dict[str, Any]
    settings: RunSettings  # the config typed (config.check): what the lifecycle reads
    target: Target
    scorers: dict[str, Scorer]
    rows: data.Rows  # validated; read again as the run executes
    inputs: str = ""  # digest of the rows' content and the target's prompt or code: what resume checks
    digests: dict[str, str] = field(default_factory=dict)  # each scorer's verdict digest (scorers.digest)
    unjudged: judged.Unjudged | None = None  # the rows, less those whose traces carry every verdict
    started: float = 0.0  # when the run started (seconds since the epoch): a trace dataset's window ends
    aside: judged.SetAside | None = None  # the rows that cannot be judged, left unscored (a watch tick's)
    needs: Needs | None = None  # what each scorer needs of a row; a trace dataset's rows may lack it


class Needs:
    """The row fields each scorer needs (`needs`: (scorer, field) pairs), checked in the one pass over the
    rows before any call. A file's row without one stops the run (data.require): a missing column is a
    mistake. A trace dataset's rows may lack one (production traces carry expectations on a few of
    them): the scorer is not applicable to those rows (counted, and written onto their traces as such),
    and only a scorer that applies to no row at all stops the run, naming the first row."""

    def __init__(
        self, needs: list[tuple[str, str]], columns: Mapping[str, str | None], source: str, lenient: bool
    ):
        self.needs, self.columns, self.source, self.lenient = needs, columns, source, lenient
        self.fields: dict[str, tuple[str, ...]] = {}
        for name, need in needs:
            self.fields[name] = (*self.fields.get(name, ()), need)
        self.applies: Counter[str] = Counter()
        self.lacking: dict[str, tuple[data.Row, str, int]] = {}  # scorer -> (first row lacking, field, rows)
        self.first: dict[str, data.Row] = {}  # scorer -> the first row it applies to

    def missing(self, name: str, row: data.Row) -> str | None:
        """The first field scorer `name` needs that `row` lacks (None: it applies)."""
        return next((f for f in self.fields.get(name, ()) if getattr(row, f) is None), None)

    def require(self, window: list[data.Row]) -> None:
        """A file's rows: each must hold every field (raising DataError); a trace dataset's need not."""
        for name, need in [] if self.lenient else self.needs:
            data.require(window, self.source, need, f"scorer {name} needs", self.columns[need])

    def count(self, window: list[data.Row]) -> None:
        """The rows each scorer applies to, and those it does not (a trace dataset's), counted."""
        for row in window:
            for name in self.fields if row.unjudgeable is None else ():
                lacks = self.missing(name, row)
                if lacks is None:
                    self.applies[name] += 1
                    self.first.setdefault(name, row)
                else:
                    first, field_name, count = self.lacking.get(name, (row, lacks, 0))
                    self.lacking[name] = (first, field_name, count + 1)

    def counted(self, check: Callable[[list[data.Row]], None]) -> Callable[[list[data.Row]], None]:
        """`check`, then count (the pass before the run: not a watch tick's per-row check)."""

        def both(window: list[data.Row]) -> None:
            check(window)
            self.count(window)

        return both

    def confirm(self, unjudged: judged.Unjudged | None) -> None:
        """After the pass: a scorer that applies to no row stops the run, as a file's missing column
        does (a wrong selector, say), unless traces left out as judged carry its verdicts: it applied."""
        for name, (row, lacks, _) in self.lacking.items():
            judged_before = unjudged is not None and (unjudged.skipped or unjudged.reused[name])
            if not self.applies[name] and not judged_before:
                more = " (and no other row has one)"
                data.require([row], self.source, lacks, f"scorer {name} needs{more}", self.columns[lacks])

    def said(self, unit: str = "row(s)") -> str | None:
        """The console's line on the rows (`unit`) a scorer does not apply to, if any."""
        if not self.lacking:
            return None
        each = "; ".join(
            f"{name} on {count} {unit} without {lacks}"
            + (f" (read from {self.columns[lacks]})" if self.columns.get(lacks) else "")
            for name, (_, lacks, count) in sorted(self.lacking.items())
        )
        return f"not applicable: {each}; counted apart, not unscored"


@dataclass
class Given:
    """What the caller already holds, used instead of building it from the config and checked the same
    way: the Python API's function, scorer objects and in-memory rows; a re-score's stored outputs,
    rows and judge replies."""

    target: Target | None = None
    scorers: Mapping[str, Scorer] = field(default_factory=dict)
    rows: list[data.Row] | None = None
    source: str = "data"  # what errors call the in-memory rows
    cache: Cache | None = None  # the replies to serve instead of the judge cache's (a re-score's)


def plan(
    config: dict[str, Any], given: Given | None = None, started: float | None = None, set_aside: bool = False
) -> Plan:
    """Build target and scorers, check credentials, read and validate every row and prompt. `started`
    (seconds since the epoch; None: now) is when the run started, which a trace dataset's time window
    counts from: a resumed run passes its first start, so it reads the traces the run started on.
    `set_aside`: a row that cannot be judged is kept, saying why, to be left unscored (judged.SetAside),
    instead of stopping the run (a watch tick's: one bad trace must not stop a watcher)."""
    settings = check(config)  # first: a bad value costs nothing
    given = given or Given()
    started = time.time() if started is None else started
    scorers = scorers_of(config, given.scorers)
    target = target_of(config, given.target)
    live_traces.attach(target)  # a traced function's calls: their traces read (tracking reads MLflow)
    bound_work(scorers, None, settings.max_judgments)  # judges x repeats alone: before reading rows
    if given.cache is None or given.cache.asks_models:  # (a re-score's replies are all stored: no key)
        check_credentials(target, scorers)
    store.check_run_store(config.get("tracking") or {})  # a URI MLflow cannot take: said before any call
    if given.rows is not None:
        rows = data.Rows.of(given.rows, given.source)
    else:
        rows = sources.rows(
            config["dataset"], config.get("tracking"), started, set_aside, config.get("scorers")
        )
    needs = Needs(  # a trace dataset's rows may lack a field: not applicable there
        target.from_rows([(n, need) for n, scorer in scorers.items() for need in scorer.required()]),
        data.column_names(config.get("dataset") or {}),
        rows.source,
        lenient=sources.trace_backed(config["dataset"]),
    )
    checked = _checker(target, needs, rows.source)
    aside = judged.SetAside(rows, checked) if set_aside else None  # (each row checked as it is read)
    rows = aside if aside is not None else rows
    verdicts = digests(config, scorers, target.identity())  # onto any trace's verdicts (a live target's too)
    unjudged = None
    if sources.trace_backed(config["dataset"]):  # traces judged already under these settings: skipped
        rows = unjudged = judged.Unjudged(rows, verdicts)
    shard = shards.selected(config)  # one shard of a sharded evaluation (-m shards=N): its rows only
    counter = shards.Counter(*shard) if shard and given.rows is None else None
    # The whole file, one pass, before any call: also a shard's, so a bad row stops every shard alike.
    counted = needs.counted(checked)
    first: data.Row | None = rows.validate(
        counter.counting(counted) if counter else counted, data.window_size(config)
    )
    if aside is not None:
        first = aside.first  # None: no row can be judged, no prompt is rendered
    else:  # (a watch tick's traces lacking an expectation are usual: no scorer of a tick stops it)
        needs.confirm(unjudged)
    if given.rows is None:  # (rows given as they are, the API's or a re-score's, are never split)
        rows = splits.tune_part(rows, settings.tune.model_dump())
    if counter:
        rows = counter.part(rows)
    bound_work(scorers, len(rows), settings.max_judgments)
    for name, scorer in scorers.items():
        if (sample := needs.first.get(name, first)) is not None:  # a row it applies to
            scorer.validate(target.sample(sample))
    inputs = hashlib.sha256(f"{rows.digest}\n{target.identity()}".encode()).hexdigest()[:16]
    return Plan(config, settings, target, scorers, rows, inputs, verdicts, unjudged, started, aside, needs)


def _checker(target: Target, needs: Needs, source: str) -> Callable[[list[data.Row]], None]:
    """The check of a window of rows before any call (raising DataError): the target's, and every
    field a scorer needs that the rows must hold (Needs). A row set aside already (unjudgeable) is not
    checked."""

    def checked(window: list[data.Row]) -> None:
        window = [row for row in window if row.unjudgeable is None]
        target.validate(window, source)
        needs.require(window)

    return checked


def build(spec: Mapping[str, Any], where: str) -> Any:
    """Build the object a config node's `_target_` names; errors say which key to fix."""
    from hydra.utils import get_class

    kwargs = {k: v for k, v in spec.items() if not k.startswith("_")}
    try:
        cls = get_class(spec["_target_"])
    except Exception:
        raise ConfigError(f"{where}._target_={spec.get('_target_')!r} is not an importable class") from None
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}; check the keys of {where}") from None


def scorers_of(config: Mapping[str, Any], given: Mapping[str, Scorer]) -> dict[str, Scorer]:
    """The selected scorers by name: the caller's objects where given, the others built from `scorers`."""
    specs = config.get("scorers") or {}
    if not specs:
        raise ConfigError("no scorer selected; choose one, e.g. scorer=answer_similarity")
    built: dict[str, Scorer] = {}
    for name, spec in specs.items():
        scorer = given[name] if name in given else build(spec, f"scorers.{name}")
        scorer.name = name
        built[name] = scorer
    return built


def target_of(config: Mapping[str, Any], given: Target | None) -> Target:
    """The system under test: the caller's, else the one `target` names."""
    return given if given is not None else build(config["target"], "target")


def check_credentials(target: Target, scorers: Mapping[str, Scorer]) -> None:
    """Every model the target and the scorers call has its key: a missing key is the most common
    mistake and costs nothing to find, so it is found before anything else is read."""
    for model in target.models():
        model.check_credentials("target.model")
    checked: set[ModelSettings] = set()
    for name, scorer in scorers.items():
        panel = scorer.models()
        for i, model in enumerate(panel):
            if model not in checked:  # a panel's judge is named where it sits: scorers.NAME.models[i]
                checked.add(model)
                if len(panel) == 1:
                    model.check_credentials("model")
                else:  # another model for it is another entry of the list: no `model=` to suggest
                    model.check_credentials(f"scorers.{name}.models[{i}]", pick="")
