"""Planning a run, the pipeline's first stage: the config's scorers and target built (or the caller's
own taken), the credentials of every model they call checked, then every row read and validated and
every prompt checked against the first, all before the first model call. What comes out is a Plan."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalframe.config.check import check
from evalframe.config.settings import RunSettings
from evalframe.data import judged, rows as data, shards, splits
from evalframe.errors import ConfigError
from evalframe.models.cache import Cache
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
        rows = sources.rows(config["dataset"], config.get("tracking"), started, set_aside)
    checked = _checker(config, target, scorers, rows.source)
    aside = judged.SetAside(rows, checked) if set_aside else None  # (each row checked as it is read)
    rows = aside if aside is not None else rows
    verdicts = digests(config, scorers, target.identity())  # onto any trace's verdicts (a live target's too)
    unjudged = None
    if sources.trace_backed(config["dataset"]):  # traces judged already under these settings: skipped
        rows = unjudged = judged.Unjudged(rows, verdicts)
    shard = shards.selected(config)  # one shard of a sharded evaluation (-m shards=N): its rows only
    counter = shards.Counter(*shard) if shard and given.rows is None else None
    # The whole file, one pass, before any call: also a shard's, so a bad row stops every shard alike.
    first: data.Row | None = rows.validate(
        counter.counting(checked) if counter else checked, data.window_size(config)
    )
    if aside is not None:
        first = aside.first  # None: no row can be judged, no prompt is rendered
    if given.rows is None:  # (rows given as they are, the API's or a re-score's, are never split)
        rows = splits.tune_part(rows, settings.tune.model_dump())
    if counter:
        rows = counter.part(rows)
    bound_work(scorers, len(rows), settings.max_judgments)
    if first is not None:
        for scorer in scorers.values():
            scorer.validate(target.sample(first))
    inputs = hashlib.sha256(f"{rows.digest}\n{target.identity()}".encode()).hexdigest()[:16]
    return Plan(config, settings, target, scorers, rows, inputs, verdicts, unjudged, started, aside)


def _checker(
    config: Mapping[str, Any], target: Target, scorers: Mapping[str, Scorer], source: str
) -> Callable[[list[data.Row]], None]:
    """The check of a window of rows before any call (raising DataError): the target's, and every
    field a scorer needs that the rows must hold. A row set aside already (unjudgeable) is not checked."""
    needs = [(name, need) for name, scorer in scorers.items() for need in scorer.required()]
    columns = data.column_names(config.get("dataset") or {})

    def checked(window: list[data.Row]) -> None:
        window = [row for row in window if row.unjudgeable is None]
        target.validate(window, source)
        for name, need in target.from_rows(needs):  # not those a live target hands over
            data.require(window, source, need, f"scorer {name} needs", columns[need])

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
    for model in {m for s in scorers.values() for m in s.models()}:
        model.check_credentials("model")
