"""`evalframe align`: a judge taught by people's labels, proven on items it was not taught with.

The labelled items are split by id into a training and a held-out part (data.splits: seeded,
stratified by people's label). The judge scores the training part; its examples are chosen there
(results.alignment.select: disagreements first, balanced over labels) and written with the aligned
judge as data (scorers.aligned). Then the held-out part is scored twice, by the judge as it was and by
the aligned one, and their agreement with people compared item by item (results.alignment.held_out).
The recorded prompts of the aligned judge are searched for any held-out item shown as an example.

Every run is an ordinary run of the one lifecycle (pipeline.evaluate, modes.ALIGN: its report.html,
no MLflow run, no verdicts onto traces), in DIR/train, DIR/before and DIR/after. Everything that can
be refused is refused before the first call, the judge calls counted against align.max_calls too.
Aligning a logged run (run_id=), the judge as it was reads that run's verdicts instead of asking its
model again (run.align_calls), and the budget counts only what will be asked.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalframe.config import compose as configs
from evalframe.config.settings import RunSettings
from evalframe.data import labels, splits
from evalframe.data.rows import Row
from evalframe.errors import EXIT_GATE_FAILED, EXIT_OK, ConfigError, DataError
from evalframe.models.cache import Cache
from evalframe.report import console as report
from evalframe.results import alignment
from evalframe.results.journal import Journal
from evalframe.results.run_result import RunResult
from evalframe.results.summary import fmt, fmt_cost, fmt_interval
from evalframe.run import align_calls, completion, guidelines, modes, pipeline, planning, sources
from evalframe.run.sinks import Concluded, publish
from evalframe.scorers import aligned
from evalframe.scorers.base import JudgeScorer
from evalframe.tracking.log import Extra

METHODS = ("examples", "guidelines", "both")
MIN_LABELLED = 10  # fewer labelled items say nothing a held-out interval could hold
MIN_HELD_OUT = 5  # below it the held-out figures' intervals span nearly everything


@dataclass(frozen=True)
class Settings:
    """align.* on the command line."""

    scorer: str
    holdout: float = 0.5
    seed: int = 0
    method: str = "examples"
    k: int = 4
    out: Path = Path("aligned")
    max_calls: int | None = None
    comment: str = "comment"  # the dataset column holding people's comments, when it has one
    # Most rules the judge's model writes (guidelines, both), each tried on the training part: 2 keeps 50
    # items within 150 calls (25 training + 1 + 2 x 25 trials + 2 x 25 held out)
    rules: int = 2
    retrieve: int | None = (
        None  # examples per judged item, the nearest by embedding (else align.k fixed ones)
    )
    embedding: str = "local/all-MiniLM-L6-v2"  # the embedding model align.retrieve compares items with


@dataclass
class Aligned:
    """What an alignment found: where the aligned judge is, and how it fared on the held-out items."""

    scorer: str
    yaml: Path
    train: list[str]
    held_out: list[str]
    examples: list[str]
    figures: alignment.HeldOut
    leaks: list[tuple[str, str]]
    prompts_checked: int
    calls: int = 0
    cost: float = 0.0
    runs: dict[str, str] = field(default_factory=dict)
    rules: list[guidelines.Trial] = field(default_factory=list)  # each rule written, tried and kept or not
    planned: int = 0  # the judge calls counted before the first (align.max_calls); fewer when cached
    from_run: int = 0  # the verdicts of the judge as it was read from the logged run aligned (no call)
    run: str = ""  # that run (dataset=run)


def _config(overrides: Sequence[str]) -> dict[str, Any]:
    # Every item kept in memory: the examples and the held-out pairing read them all.
    line = [*overrides, "keep_items=null"]
    return configs.resolve(configs.compose(line), line)


def _labelled(config: dict[str, Any], settings: Settings) -> tuple[list[Row], planning.Plan]:
    """The rows people labelled, and the plan of their run (its judge, target, settings): every row
    read and every prompt checked (planning.plan, no call), each way the labels cannot support an
    alignment refused in one line."""
    spec = (config.get("scorers") or {}).get(settings.scorer)
    if spec is None or len(config["scorers"]) != 1:
        raise ConfigError(
            f"align takes one judge: scorer={settings.scorer} (got {sorted(config['scorers'])})"
        )
    aligned.check_alignable(settings.scorer, spec)
    if sources.trace_backed(config["dataset"]):  # the lifecycle skips traces already judged: not here
        raise ConfigError(
            "align reads people's labels from a dataset file or a logged run: for traces, align the run "
            "that judged them (run_id=RUN_ID), whose items carry the traces' human scores"
        )
    p = planning.plan(config)
    rows = [row for row in p.rows if row.human is not None]
    low, high = (float(v) for v in config["dataset"].get("human_range") or (0, 1))
    if len(rows) < MIN_LABELLED:
        raise DataError(
            f"align needs at least {MIN_LABELLED} items people labelled; {len(rows)} of "
            f"{len(p.rows)} have a human score (dataset.human_score=COLUMN names it)"
        )
    outside = next((r for r in rows if not low <= float(r.human or 0) <= high), None)
    if outside is not None:
        raise DataError(
            f"item {outside.id}: people's label {outside.human:g} is outside "
            f"dataset.human_range=[{low:g},{high:g}]"
        )
    if len({r.human for r in rows}) < 2:
        raise DataError(
            f"every labelled item has the label {rows[0].human:g}: align learns from labels of at least "
            "two values (people's passes and fails)"
        )
    return rows, p


def _split(rows: list[Row], settings: Settings) -> tuple[list[Row], list[Row]]:
    # By id, not by their order: a logged run's items come in the order they finished (dataset=run)
    held = splits.holdout_ids(sorted(rows, key=lambda r: r.id), settings.holdout, settings.seed)
    train = [r for r in rows if r.id not in held]
    held_out = [r for r in rows if r.id in held]
    if len(held_out) < MIN_HELD_OUT:
        raise DataError(
            f"align.holdout={settings.holdout} holds out {len(held_out)} of {len(rows)} labelled items: too "
            f"few for an interval (at least {MIN_HELD_OUT}); label more items or raise align.holdout"
        )
    return train, held_out


def _run(config: dict[str, Any], rows: list[Row], directory: Path, cache: Cache | None = None) -> RunResult:
    given = planning.Given(rows=rows, source="the labelled items", cache=cache)
    return pipeline.evaluate(config, directory, given=given, mode=modes.ALIGN)[0]


def aligned_overrides(overrides: Sequence[str], scorer: str, out: Path) -> list[str]:
    """The command line of the aligned judge: scorer=NAME_aligned, `out` added to Hydra's search path,
    and the overrides of scorers.NAME dropped (the aligned judge's YAML holds them)."""
    kept, paths = [], [f"file://{out}"]
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "hydra.searchpath":
            paths = [p.strip() for p in value.strip("[]").split(",") if p.strip()] + paths
        elif key == "scorer":
            kept.append(f"scorer={aligned.aligned_name(scorer)}")
        elif not key.lstrip("+~").startswith(f"scorers.{scorer}."):
            kept.append(o)
    return [*kept, f"hydra.searchpath=[{','.join(paths)}]"]


def _prompts(result: RunResult, scorer: str) -> list[tuple[str, str]]:
    """Each item's recorded prompts (every message of every step), as the aligned judge sent them."""
    return [
        (item.id, "\n".join(str(m["content"]) for s in item.scores[scorer].steps for m in s.messages))
        for item in result.items
        if scorer in item.scores
    ]


def align(overrides: Sequence[str], settings: Settings, directory: Path) -> Aligned:
    """Align the judge `settings.scorer` of the config `overrides` compose; the runs go in `directory`."""
    if settings.method not in METHODS:
        raise ConfigError(f"align.method={settings.method}: the methods are {', '.join(METHODS)}")
    if settings.k < 1 or (settings.retrieve is not None and settings.retrieve < 1):
        raise ConfigError("align.k and align.retrieve: show the judge at least one example")
    if settings.retrieve and settings.method == "guidelines":
        raise ConfigError("align.retrieve picks examples: use it with align.method=examples or both")
    config = _config(overrides)
    rows, p = _labelled(config, settings)
    judge = p.scorers[settings.scorer]
    assert isinstance(judge, JudgeScorer)  # check_alignable: a Judge
    train, held = _split(rows, settings)
    rules = settings.rules if settings.method in ("guidelines", "both") else 0
    planned, stored = align_calls.planned(
        config["dataset"], judge, p.target, (train, held), rules, settings.max_calls
    )
    cache = stored.cache(p.settings) if stored else None  # the judge as it was: the run's replies first
    human_range = config["dataset"].get("human_range") or (0, 1)
    threshold = float(config.get("agreement_threshold", 0.5))
    trained = _run(config, train, directory / "train", cache)
    taught = _teach(config, overrides, settings, trained, train, directory)
    note = (
        f"written by evalframe align from {len(train)} training items (align.method={settings.method}, "
        f"align.holdout={settings.holdout}, align.seed={settings.seed}): review it as text"
    )
    spec = config["scorers"][settings.scorer]
    fixed = [] if taught.retrieved else taught.examples
    yaml = aligned.write(settings.out, settings.scorer, spec, fixed, note, taught.rules, taught.retrieved)
    before = _run(config, held, directory / "before", cache)
    new = aligned.aligned_name(settings.scorer)
    after = _run(
        _config(aligned_overrides(overrides, settings.scorer, settings.out)), held, directory / "after"
    )
    prompts = _prompts(after, new)
    results = [trained, *taught.results, before, after]
    return Aligned(
        settings.scorer,
        yaml,
        [r.id for r in train],
        [r.id for r in held],
        [e.id for e in taught.examples],
        alignment.held_out(before.items, after.items, settings.scorer, new, human_range, threshold),
        # What the prompts showed, and what the written files hold (by id): both must be training items.
        alignment.leaks(prompts, before.items)
        + [(e.id, "the aligned judge's files") for e in taught.examples if e.id in {r.id for r in held}],
        len(prompts),
        sum(r.stats.calls for r in results),
        sum(r.stats.cost for r in results),
        {
            "train": str(directory / "train"),
            "before": str(directory / "before"),
            "after": str(directory / "after"),
        },
        taught.trials,
        planned,
        stored.read([trained, before], settings.scorer) if stored else 0,
        stored.name if stored else "",
    )


@dataclass
class Taught:
    """What the training part taught: examples, rules (and every rule's trial), and the runs it took."""

    examples: list[alignment.Example] = field(default_factory=list)
    retrieved: aligned.Retrieved | None = None
    rules: list[str] = field(default_factory=list)
    trials: list[guidelines.Trial] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)


def _teach(
    config: dict[str, Any],
    overrides: Sequence[str],
    settings: Settings,
    trained: RunResult,
    train: list[Row],
    directory: Path,
) -> Taught:
    """The examples (align.method=examples, both) and the rules kept (guidelines, both)."""
    human_range = config["dataset"].get("human_range") or (0, 1)
    threshold = float(config.get("agreement_threshold", 0.5))
    given = config["dataset"].get("labels")  # review pull's labels.jsonl: people's comments with them
    said = labels.comments(str(given)) if given else None
    candidates = alignment.labelled(trained.items, settings.scorer, human_range, settings.comment, said)
    taught = Taught()
    if settings.method in ("examples", "both") and settings.retrieve:
        taught.retrieved = aligned.Retrieved(candidates, settings.retrieve, settings.embedding)
        taught.examples = list(candidates)  # every one may be shown: the training part's labelled items
    elif settings.method in ("examples", "both"):
        taught.examples = alignment.select(candidates, settings.k, settings.seed)
    if settings.method in ("guidelines", "both"):
        rules, written = guidelines.write(config, candidates, settings.rules, directory / "guidelines")
        baseline = guidelines.figures(trained, settings.scorer, human_range, threshold)

        def score(out: Path, run_dir: Path) -> RunResult:
            return _run(_config(aligned_overrides(overrides, settings.scorer, out)), train, run_dir)

        spec = config["scorers"][settings.scorer]
        taught.trials, runs = guidelines.tried(
            rules, baseline, spec, settings.scorer, score, directory, human_range, threshold
        )
        taught.rules = [t.rule for t in taught.trials if t.kept]
        taught.results = [written, *runs]
    return taught


def show(found: Aligned, overrides: Sequence[str], out: Path) -> int:
    """The held-out table and what to run next; exit code 1 when a held-out item leaked into a prompt."""
    f = found.figures

    def cell(value: float, interval: tuple[float, float], signed: bool = False) -> str:
        # A figure with no value (Spearman of a judge that gave one score to all) is one dash.
        return "–" if math.isnan(value) else f"{fmt(value, signed=signed)} {fmt_interval(interval, f.n)}"

    rows = [
        [
            c.metric,
            cell(c.before, c.before_interval),
            cell(c.after, c.after_interval),
            cell(c.difference, c.interval, signed=True),
            "–" if math.isnan(c.difference) else c.verdict,
        ]
        for c in f.changes
    ]
    title = f"{found.scorer} before and after alignment, on {f.n} held-out items"
    report.table(
        title, ("agreement", "before [95% CI]", "after [95% CI]", "change [95% paired CI]", "verdict"), rows
    )
    print(
        "pass/fail against people (rows people's fail, pass; columns the judge's): "
        f"before {f.confusion['before']}, after {f.confusion['after']}"
    )
    print(
        f"split: {len(found.train)} training items, {len(found.held_out)} held out; "
        f"{len(found.examples)} examples from the training part: {', '.join(found.examples)}"
    )
    for trial in found.rules:
        said = "kept" if trial.kept else "dropped"
        print(
            f"rule {said} (alone on the training part: kappa {fmt(trial.kappa)}, "
            f"accuracy {fmt(trial.accuracy)}): {trial.rule}"
        )
    cost = fmt_cost(found.cost) if not math.isnan(found.cost) else "unknown"
    if found.run:
        print(f"{found.from_run} of the judge's verdicts read from {found.run}, 0 calls")
    print(f"judge calls: {found.calls} made, {found.planned} counted up front (cost {cost})")
    if found.leaks:
        shown = ", ".join(f"{held} in the prompt of {judged}" for held, judged in found.leaks[:5])
        print(f"error: held-out items were shown as examples: {shown}")
        return EXIT_GATE_FAILED
    print(
        f"leak check: none of the {len(found.held_out)} held-out items is an example in any of the "
        f"{found.prompts_checked} prompts the aligned judge sent"
    )
    print(f"aligned judge: {found.yaml}")
    line = shlex.join(
        o for o in aligned_overrides(overrides, found.scorer, out) if not o.startswith("dataset")
    )
    print(f"run it: evalframe {line}")
    return EXIT_OK


def log(found: Aligned, directory: Path) -> int:
    """The aligned judge's held-out run to MLflow when tracking is on (modes.ALIGNED, as `evalframe
    log-run` publishes a finished run): the judge's files and alignment.json as artifacts, its verdict
    digest as a tag, and the held-out figures before, after and their change as metrics."""
    journal = Journal(directory / "after")
    manifest = journal.manifest
    settings = RunSettings.of_record(dict(manifest.config))
    if not settings.tracking.enabled:  # tracking=none: its report.html and alignment.json only
        return EXIT_OK
    new = aligned.aligned_name(found.scorer)
    metrics: dict[str, float] = {"align/train": len(found.train), "align/held_out": len(found.held_out)}
    metrics |= {"align/examples": len(found.examples), "align/calls": found.calls}
    metrics["align/rules_kept"] = sum(t.kept for t in found.rules)
    metrics["align/read_from_run"] = found.from_run  # the judge's verdicts read, not asked again
    for c in found.figures.changes:
        figures = {"before": c.before, "after": c.after, "change": c.difference}
        figures |= {"change_ci_low": c.interval.low, "change_ci_high": c.interval.high}
        metrics |= {f"align/{c.metric}_{k}": v for k, v in figures.items() if not math.isnan(v)}
    files = {
        "aligned_judge/scorer": found.yaml,
        f"aligned_judge/prompts/{new}": found.yaml.parent.parent / "prompts" / new,
        "": directory / "alignment.json",
    }
    tags = {"evalframe.aligned.from": found.scorer, "evalframe.aligned.digest": manifest.digests.get(new, "")}
    tags["evalframe.aligned.kappa"] = found.figures.change("kappa").verdict
    result = completion.read_back(journal, manifest.config, settings)
    run = Concluded(result, settings, manifest.config, journal, manifest.overrides, tags=tags)
    run.extra = Extra(metrics, {k: p for k, p in files.items() if p.exists()})
    return publish(run, modes.ALIGNED.sinks(settings))


def record(found: Aligned, directory: Path) -> Path:
    """alignment.json in the align directory: the split, the examples and the held-out figures."""
    path = directory / "alignment.json"
    data = asdict(found)
    data["yaml"] = str(found.yaml)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str, allow_nan=True), encoding="utf-8")
    return path
