"""`evalframe review push|pull`: people label the items where it matters, in MLflow's Review tab.

push chooses `size` items of a logged evaluation run (results/review_selection.py says how) and puts
their traces in a review queue of the run's experiment, asking per scorer the question its judge was
asked (results/review_questions.py). pull reads the people's answers on the queue's completed items,
writes labels.jsonl, prints how far the judges are from the people (and the people from each other),
and logs those figures to the run. The MLflow side is tracking/review.py.

No Hydra here: like compare, review has no dataset, target or judge to compose, only a tracking URI.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalframe.cli.answered import answered
from evalframe.errors import ConfigError
from evalframe.report import console as report
from evalframe.results import review_labels, review_sheet
from evalframe.results.results_file import read_items
from evalframe.results.review_labels import Label
from evalframe.results.review_questions import Question, questions
from evalframe.results.review_selection import RULES, Candidate, candidates, disagreement, nearness, select
from evalframe.results.scores import ItemResult
from evalframe.results.summary import fmt, fmt_interval
from evalframe.tracking import review as mlflow_review
from evalframe.tracking.read import fetch_run, get_run, resolve
from evalframe.tracking.store import display_uri

USAGE = (
    "usage: evalframe review push run_id=RUN queue=NAME size=N [select=disagreement|threshold|random]\n"
    "                            [seed=0] [tracking.uri=URI]\n"
    "       evalframe review push dataset=mlflow_traces dataset.experiment=NAME queue=NAME size=N ...\n"
    "       evalframe review pull queue=NAME [run_id=RUN] [output=labels.jsonl] [tracking.uri=URI]\n"
    "  RUN: a run id, last (the newest run of experiment evalframe), last~1, or the start of a name\n"
    "  without the Review tab: push ... format=jsonl [output=review.jsonl] writes the items with empty\n"
    "  label, reviewer and comment fields; pull labels=review.jsonl reads them back filled in.\n"
    "  push: choose N items of a logged run (unlabelled first) and queue their traces for people to\n"
    "  label in MLflow's Review tab (evalframe ui), a question per scorer made from its reply schema;\n"
    "  pushing again tops the queue up to N items of the run, never adding one twice; from a trace dataset,\n"
    "  the run is the newest that judged the experiment's traces.\n"
    "  pull: the people's answers on the queue's completed items -> labels.jsonl, and per scorer the\n"
    "  judge-vs-people agreement (kappa, accuracy, Spearman) and the reviewers' alpha, logged to the run."
)
KEYS = {
    "push": (
        *("run_id", "dataset", "dataset.experiment", "queue", "size", "select", "seed", "tracking.uri"),
        *("format", "output"),
    ),
    "pull": ("queue", "labels", "run_id", "output", "tracking.uri"),
}
REQUIRED = {"push": ("size",), "pull": ()}
SHEET = "review.jsonl"  # push format=jsonl: the items to label, as a file
TRACES = "mlflow_traces"  # dataset=: push from the newest run that judged an experiment's traces


def _arguments(argv: list[str]) -> tuple[str, dict[str, str]]:
    if not argv or argv[0] not in KEYS:
        raise ConfigError(f"review: say push or pull\n{USAGE}")
    action, args = argv[0], {}
    for arg in argv[1:]:
        key, equals, value = arg.partition("=")
        if not equals or key not in KEYS[action] or not value:
            raise ConfigError(f"review {action}: cannot read {arg!r}\n{USAGE}")
        args[key] = value
    where = ("queue", "format") if action == "push" else ("queue", "labels")
    if (where[0] in args) == (where[1] in args):
        raise ConfigError(f"review {action} takes {where[0]}=NAME or {where[1]}=..., one of them\n{USAGE}")
    if args.get("format", "jsonl") != "jsonl":
        raise ConfigError(f"format={args['format']}: the one file format is jsonl")
    missing = [k for k in REQUIRED[action] if k not in args]
    if missing:
        raise ConfigError(f"review {action} needs {' and '.join(f'{k}=' for k in missing)}\n{USAGE}")
    if action == "push" and ("run_id" in args) == ("dataset" in args):
        raise ConfigError(f"review push needs run_id=ID or dataset={TRACES} dataset.experiment=NAME\n{USAGE}")
    if "dataset" in args and (args["dataset"] != TRACES or "dataset.experiment" not in args):
        raise ConfigError(f"review push takes dataset={TRACES} with dataset.experiment=NAME (or run_id=ID)")
    if args.get("select", "disagreement") not in RULES:
        raise ConfigError(f"select={args['select']}: choose one of {', '.join(RULES)}")
    for key in ("size", "seed"):
        if key in args and not (args[key].isdigit() and (key == "seed" or int(args[key]) > 0)):
            raise ConfigError(f"{key}={args[key]}: give a whole number{' above 0' if key == 'size' else ''}")
    return action, args


def _default_uri() -> str:
    """The tracking URI a run would log to: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db (conf/tracking)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"


@dataclass
class Run:
    """The evaluation run behind a queue: its items, config and the questions of its scorers."""

    run_id: str
    experiment_id: str
    items: list[ItemResult]
    config: dict[str, Any]
    questions: dict[str, Question]
    traces: dict[str, str]  # item id -> trace id


def _run(uri: str, run_id: str, scratch: Path, traced: bool = True) -> Run:
    """The run, its items' traces required when `traced` (a queue holds traces; a file does not)."""
    logged = fetch_run(uri, run_id, scratch)
    items = read_items(logged.results_file)
    config = mlflow_review.run_config(uri, run_id, scratch)
    specs = config.get("scorers") or {}
    names = [n for n in specs if any(n in item.scores for item in items)]
    traces = mlflow_review.item_traces(uri, logged, items)
    if traced and not traces:
        raise ConfigError(
            f"run {run_id} has no traces of its items to label (tracking.traces=false when it ran?): "
            "run it again with tracking.traces=true, or label them in a file (format=jsonl)"
        )
    if not traced:
        traces = {item.id: traces.get(item.id, "") for item in items}
    return Run(run_id, logged.experiment_id, items, config, questions(specs, names), traces)


def lines(config: Mapping[str, Any], scorers: list[str]) -> dict[str, list[float]]:
    """Each scorer's lines where a verdict flips: the gate's pass_threshold and agreement_threshold."""
    gate = config.get("gate") or {}
    passing = gate.get("pass_threshold", 0.5)
    agreeing = float(config.get("agreement_threshold", 0.5))
    return {
        name: sorted({float(passing.get(name, 0.5) if isinstance(passing, Mapping) else passing), agreeing})
        for name in scorers
    }


def push(uri: str, args: dict[str, str], scratch: Path) -> int:
    run_id = args.get("run_id") or mlflow_review.judged_traces(uri, args["dataset.experiment"])
    run = _run(uri, run_id, scratch, traced="queue" in args)
    size, rule, scorers = int(args["size"]), args.get("select", "disagreement"), list(run.questions)
    traced = [t for t in run.traces.values() if t]
    labelled = {a.trace_id for a in mlflow_review.answers(uri, run.experiment_id, traced, scorers)}
    sheet = Path(args.get("output", SHEET))
    written = review_sheet.read(sheet) if "format" in args and sheet.exists() else []
    labelled |= {run.traces.get(str(line["item_id"])) or "" for line in written if line["label"] is not None}
    pool = candidates(run.items, scorers, run.traces, labelled - {""})
    if size > len(pool):
        having = "with a trace" if "queue" in args else "in all"
        raise ConfigError(
            f"size={size}: run {run.run_id} has {len(pool)} items {having}; ask for at most that"
        )
    if "queue" in args:
        name = args["queue"]
        queue_id, made = mlflow_review.queue(uri, run.experiment_id, name, list(run.questions.values()))
        there = set(mlflow_review.queued(uri, queue_id))
    else:
        there = {str(line["item_id"]) for line in written if line.get("run_id") == run.run_id}
    already = [c for c in pool if c.trace_id in there or c.id in there]
    rest = [c for c in pool if c not in already]
    thresholds = lines(run.config, scorers)
    chosen = select(rest, max(size - len(already), 0), rule, thresholds, int(args.get("seed", 0)))
    _show_pushed(chosen, rule, thresholds)
    added = f"{len(chosen)} items added, {len(already)} of this run already there"
    added += f"; questions: {', '.join(scorers)}"
    if "queue" not in args:
        items = {item.id: item for item in run.items}
        review_sheet.write(sheet, [*written, *review_sheet.lines(run.run_id, chosen, items, run.questions)])
        print(f"{sheet}: {added}")
        print(f"fill in label, reviewer and comment, then: evalframe review pull labels={sheet}")
        return 0
    mlflow_review.add(uri, queue_id, [c.trace_id for c in chosen])
    mlflow_review.tag_run(uri, run.run_id, queue_id, name)
    verb = "made" if made else "found"
    print(f"review queue {name!r} ({verb} in experiment {run.experiment_id} at {display_uri(uri)}): {added}")
    print(
        f"label them in the experiment's Review tab (evalframe ui), then: evalframe review pull queue={name}"
    )
    return 0


def _show_pushed(chosen: list[Candidate], rule: str, thresholds: Mapping[str, list[float]]) -> None:
    if not chosen:
        return
    scorers = sorted({s for c in chosen for s in c.scores})
    why = {"disagreement": "judges' range", "threshold": "to a line", "random": "mean"}[rule]
    rows = []
    for c in chosen:
        key = {
            "disagreement": disagreement(c)[0],
            "threshold": nearness(c, thresholds),
            "random": sum(c.scores.values()) / max(len(c.scores), 1),
        }[rule]
        rows.append([c.id, *(fmt(c.scores.get(s)) for s in scorers), fmt(key), "yes" if c.labelled else ""])
    report.table(f"queued by {rule}", ("item", *scorers, why, "labelled before"), rows)


def _labels(run: Run, answers: list[mlflow_review.Answer]) -> list[Label]:
    items = {trace: item for item, trace in run.traces.items()}
    found = []
    for a in answers:
        if a.trace_id not in items:  # an item another run pushed to the same queue: not this run's to compare
            continue
        try:
            value = run.questions[a.name].score(a.value)
        except ConfigError as e:
            raise ConfigError(
                f"reviewer {a.reviewer} on item {items.get(a.trace_id, a.trace_id)}: {e}"
            ) from None
        when = datetime.fromtimestamp(a.time_ms / 1000, UTC).isoformat(timespec="seconds")
        found.append(
            Label(items.get(a.trace_id, ""), a.trace_id, a.name, a.value, value, a.reviewer, a.comment, when)
        )
    return sorted(found, key=lambda label: (label.scorer, label.item_id, label.reviewer))


def pull(uri: str, args: dict[str, str], scratch: Path) -> int:
    if "labels" in args:
        return _pull_file(uri, Path(args["labels"]), args, scratch)
    name = args["queue"]
    if "run_id" in args:
        experiment_id = get_run(uri, args["run_id"]).info.experiment_id
        queue_id, run_id = mlflow_review.queue_in(uri, experiment_id, name), args["run_id"]
    else:
        experiment_id, queue_id = mlflow_review.find_queue(uri, name)
        run_id = mlflow_review.pushed_from(uri, experiment_id, queue_id)
    run = _run(uri, run_id, scratch)
    status = mlflow_review.queued(uri, queue_id)
    done = [t for t, s in status.items() if s == "complete"]
    labels = _labels(run, mlflow_review.answers(uri, run.experiment_id, done, list(run.questions)))
    where = f"{len(done)} completed items of {len(status)} in queue {name!r}"
    return _report(uri, run, labels, Path(args.get("output", review_labels.FILE)), where)


def _pull_file(uri: str, path: Path, args: dict[str, str], scratch: Path) -> int:
    found = review_sheet.read(path)
    runs = sorted({str(line["run_id"]) for line in found})
    if len(runs) != 1:
        raise ConfigError(f"labels={path}: lines of {len(runs)} runs ({', '.join(runs)}); one file per run")
    run = _run(uri, runs[0], scratch, traced=False)
    labels = review_sheet.labels(path, found, run.questions)
    items = len({str(line["item_id"]) for line in found})
    return _report(uri, run, labels, Path(args.get("output", review_labels.FILE)), f"{items} items of {path}")


def _report(uri: str, run: Run, labels: list[Label], output: Path, where: str) -> int:
    """labels.jsonl, the figures printed and logged to the run: what a pull gives, from a queue or a file."""
    review_labels.once_each(labels)
    written = review_labels.write(output, labels)
    print(f"{output}: {written} labels from {len({x.reviewer for x in labels})} reviewers on {where}")
    threshold = float(run.config.get("agreement_threshold", 0.5))
    metrics: dict[str, float] = {}
    for scorer in run.questions:
        theirs = [x for x in labels if x.scorer == scorer]
        if theirs:
            judge = {item.id: item.scores[scorer].score for item in run.items if scorer in item.scores}
            found = review_labels.figures(theirs, judge, threshold)
            metrics.update({f"review/{scorer}/{k}": v for k, v in found.items()})
    _show_figures(metrics, list(run.questions))
    mlflow_review.log_figures(uri, run.run_id, metrics)
    print(f"logged to run {run.run_id} as review/<scorer>/... metrics")
    return 0


def _show_figures(metrics: Mapping[str, float], scorers: list[str]) -> None:
    def cell(scorer: str, key: str) -> str:
        value = metrics.get(f"review/{scorer}/{key}")
        span = (metrics.get(f"review/{scorer}/{key}_ci_low"), metrics.get(f"review/{scorer}/{key}_ci_high"))
        return fmt(value) if None in span else f"{fmt(value)} {fmt_interval(span)}"  # type: ignore[arg-type]

    shown = [s for s in scorers if f"review/{s}/n" in metrics]
    if not shown:
        print("no labels yet: nothing to compare")
        return
    rows = [
        [s, fmt(int(metrics[f"review/{s}/n"])), *(cell(s, k) for k in ("kappa", "accuracy", "spearman"))]
        for s in shown
    ]
    report.table("the judges against the people", ("scorer", "items", "kappa", "accuracy", "spearman"), rows)
    several = [s for s in shown if metrics.get(f"review/{s}/reviewers_n", 0) > 0]
    if several:
        rows = [
            [s, fmt(int(metrics[f"review/{s}/reviewers_n"])), cell(s, "reviewers_alpha")] for s in several
        ]
        report.table("the reviewers among themselves", ("scorer", "items", "alpha"), rows)


def run(argv: list[str]) -> int:
    action, args = _arguments(argv)
    uri = args.get("tracking.uri") or _default_uri()
    mlflow_review.opened(uri)  # within seconds, before anything is read or made
    if "run_id" in args:  # last, last~1, the start of a name -> the run's id, as compare and rescore take
        args["run_id"] = resolve(uri, "evalframe", args["run_id"])
    with tempfile.TemporaryDirectory(prefix="evalframe-review-") as scratch:
        return (push if action == "push" else pull)(uri, args, Path(scratch))


def main(argv: list[str]) -> int:
    """The command's exit code; a user error is one line on stderr, never a traceback."""
    return answered(run, argv)
