"""`from evalframe import evaluate`: run an evaluation from Python, through the CLI's own pipeline.

The arguments become the config `python -m evalframe` would compose (the same `conf/` groups and
defaults, composed with Hydra), and what only code can hand over — a function as the target, scorer
objects, rows in memory — goes to `pipeline.plan` as it is. So checks, journal, cache, scores and MLflow
logging are the CLI's, byte for byte.

    result = evaluate(rows, ["answer_similarity", "token_f1"], target=my_agent, model="gpt")
    result.mean("answer_similarity"), result.items, result.run_id
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalframe.errors import ConfigError, StorageError
from evalframe.models.cache import MODES
from evalframe.paths import CONF_DIR

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

    from evalframe.data.rows import Row
    from evalframe.results.nouns import RunResult, ScorerSummary
    from evalframe.run.pipeline import Given
    from evalframe.scorers.base import Scorer
    from evalframe.targets.kinds import Target

# A LiteLLM model string's provider -> the model preset carrying its key variable and defaults.
_PROVIDER_PRESET = {
    "openai": "gpt",
    "anthropic": "claude",
    "gemini": "gemini",
    "ollama": "ollama",
    "ollama_chat": "ollama",
}


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


# --- the results ------------------------------------------------------------------------------------


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

        return pd.DataFrame(self.result.table())

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


# --- from arguments to a config ---------------------------------------------------------------------


def _scorer_name(scorer: Any) -> str:
    """A scorer object's own name, else its class name in snake case (TokenF1 -> token_f1)."""
    return getattr(scorer, "name", "") or re.sub(r"(?<!^)(?=[A-Z])", "_", type(scorer).__name__).lower()


def _split_scorers(scorers: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Scorer]]:
    """Scorer names (with options) and scorer objects, from any of the accepted forms."""
    from evalframe.scorers.base import Scorer

    if isinstance(scorers, str | Scorer):
        scorers = [scorers]
    pairs: Iterable[tuple[str, Any]]
    if isinstance(scorers, Mapping):
        pairs = scorers.items()
    elif isinstance(scorers, Iterable):
        pairs = [(s, {}) if isinstance(s, str) else (_scorer_name(s), s) for s in scorers]
    else:
        raise ConfigError(f"scorers is a {type(scorers).__name__}; pass a name, a list, or a dict")
    named: dict[str, dict[str, Any]] = {}
    objects: dict[str, Scorer] = {}
    known = _options("scorer")
    for name, spec in pairs:
        if name in named or name in objects:
            raise ConfigError(f"two scorers are called {name!r}; give one a name: {{'other_name': scorer}}")
        if isinstance(spec, Scorer):
            objects[name] = spec
        elif name not in known:
            raise ConfigError(
                f"unknown scorer {name!r}; choose from {', '.join(known)}, or pass a Scorer object"
            )
        elif isinstance(spec, Mapping):
            named[name] = dict(spec)
        else:
            raise ConfigError(f"scorer {name!r}: options must be a dict, got {type(spec).__name__}")
    if not named and not objects:
        raise ConfigError("no scorer given; e.g. scorers=['answer_similarity']")
    return named, objects


def _model(model: str | Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    """A preset name ("claude"), a LiteLLM model string ("anthropic/claude-opus-4-1") or a dict of
    model settings -> the `model=` override and the keys to set on top of that preset."""
    if model is None:
        return [], {}
    settings: dict[str, Any] = {"name": model} if isinstance(model, str) else dict(model)
    if isinstance(model, str) and model in _options("model"):
        return [f"model={model}"], {}
    if isinstance(model, str) and "/" not in model:
        raise ConfigError(
            f"model={model!r} is neither a preset ({', '.join(_options('model'))}) nor a LiteLLM model "
            "string (provider/model, e.g. openai/gpt-4o)"
        )
    name = str(settings.get("name") or "")
    provider = name.split("/", 1)[0] if "/" in name else ""
    preset = _PROVIDER_PRESET.get(provider, "gpt")
    if provider and provider not in _PROVIDER_PRESET:
        # Another provider: LiteLLM reads its own key variable (MISTRAL_API_KEY, ...) unless told one.
        settings.setdefault("api_key_env", None)
    return [f"model={preset}"], settings


def _penalties(penalties: str | Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
    if penalties is None:
        return [], {}
    if isinstance(penalties, str):
        if penalties not in _options("penalties"):
            raise ConfigError(
                f"penalties={penalties!r}; choose from {', '.join(_options('penalties'))} or a dict"
            )
        return [f"penalties={penalties}"], {}
    return [], dict(penalties)


def _tracking(tracking: bool | str) -> tuple[list[str], dict[str, Any]]:
    if tracking is False or tracking is None:
        return ["tracking=none"], {}
    if tracking is True:
        return ["tracking=mlflow"], {}
    return ["tracking=mlflow"], {"uri": str(tracking)}


def _file_dataset(path: str | Path) -> list[str]:
    path = Path(path).expanduser()
    formats = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
    if path.suffix.lower() not in formats:
        raise ConfigError(f"data={str(path)!r}: a .jsonl or .csv file, a list of dicts, or a DataFrame")
    return [f"dataset={formats[path.suffix.lower()]}", f"dataset.path={path.resolve()}"]


def _describe(obj: Any) -> dict[str, Any]:
    """An object handed over as it is, as config: its class and plain settings (logged to MLflow)."""
    cls = type(obj)
    node: dict[str, Any] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
    for key, value in vars(obj).items():
        if not key.startswith("_") and (value is None or isinstance(value, str | int | float | bool)):
            node[key] = value
    if hasattr(obj, "fn"):
        node["fn"] = getattr(obj, "name", None) or repr(obj.fn)
    models = obj.models() if hasattr(obj, "models") else []
    if models:
        node["model"] = {"name": models[0].name}
    return node


def _merge(cfg: DictConfig, key: str, values: Mapping[str, Any]) -> None:
    from omegaconf import OmegaConf, open_dict

    if values:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, dict(values), merge=True)


@dataclass
class _Prepared:
    config: dict[str, Any]
    given: Given
    output_dir: Path
    resume_from: Path | None
    overrides: list[str]
    verbose: bool


def _prepare(
    data: Any,
    scorers: Any,
    target: Any,
    *,
    output_dir: str | Path | None,
    resume: bool | str | Path | None,
    verbose: bool,
    **settings: Any,
) -> _Prepared:
    """Everything that can go wrong, found here, before any call: the config, the rows, the target."""
    from evalframe.data import rows as datasets
    from evalframe.results import journal
    from evalframe.run.pipeline import Given
    from evalframe.targets.kinds import PythonTarget, Target

    named, objects = _split_scorers(scorers)
    in_memory = data is not None and not isinstance(data, str | Path)
    config, overrides = _config(data, named, target, in_memory=in_memory, **settings)

    # What only code can hand over goes to the pipeline as it is; the config describes it for MLflow.
    built_target: Target | None = None
    if target is not None and not isinstance(target, str):
        if isinstance(target, Target):
            built_target = target
        elif callable(target):
            built_target = PythonTarget(target)
        else:
            raise ConfigError(
                f"target is a {type(target).__name__}; pass a function, 'module:function', or a Target"
            )
        config["target"] = _describe(built_target)
    if objects:
        config.setdefault("scorers", {}).update({name: _describe(s) for name, s in objects.items()})
    rows, source = None, "data"
    if in_memory:
        records, source = datasets.records_of(data)
        rows = datasets.rows_from_records(records, config["dataset"], source)
        # In the config, so a run of other data never resumes this one (and MLflow shows which data).
        config["dataset"]["digest"] = _digest(rows)

    outputs = Path("outputs").resolve()
    resume_from = journal.resume_dir(resume, outputs, config) if resume else None
    run_dir = Path(output_dir) if output_dir is not None else resume_from or _fresh_dir(outputs)
    given = Given(target=built_target, scorers=objects, rows=rows, source=source)
    return _Prepared(config, given, run_dir, resume_from, overrides, verbose)


def _config(
    data: Any,
    named: dict[str, dict[str, Any]],
    target: Any,
    *,
    in_memory: bool,
    model: str | Mapping[str, Any] | None,
    penalties: str | Mapping[str, Any] | None,
    columns: Mapping[str, str | None] | None,
    limit: int | None,
    concurrency: int,
    tracking: bool | str,
    experiment: str | None,
    run_name: str | None,
    dataset_name: str | None,
    cache: str,
    reason: str | None,
    overrides: Sequence[str],
) -> tuple[dict[str, Any], list[str]]:
    """The resolved config `python -m evalframe` would run with, and the overrides that chose it:
    group options as overrides, values (which may be any Python data) merged in before resolving, so
    interpolations such as the scorers' `${model}` see them."""
    from omegaconf import open_dict

    from evalframe.config import compose as configs

    model_choice, model_keys = _model(model)
    penalty_choice, penalty_keys = _penalties(penalties)
    tracking_choice, tracking_keys = _tracking(tracking)
    if cache not in MODES:
        raise ConfigError(f"cache={cache!r}; choose from {', '.join(MODES)}")
    choices = [
        f"scorer=[{','.join(named)}]" if named else "~scorer",
        *model_choice,
        *penalty_choice,
        *tracking_choice,
        f"cache.mode={cache}",
    ]
    if isinstance(data, str | Path):
        choices += _file_dataset(data)
    if isinstance(target, str):
        choices.append("target=python")
    cfg = configs.compose([*choices, *overrides])

    _merge(cfg, "model", model_keys)
    _merge(cfg, "penalties", penalty_keys)
    _merge(cfg, "tracking", {**tracking_keys, **_given(experiment=experiment, run_name=run_name)})
    for name, options in named.items():
        _merge(cfg, f"scorers.{name}", options)
    dataset = {"columns": dict(columns or {}), **_given(limit=limit, name=dataset_name)}
    if in_memory:
        dataset.update(name=dataset_name or "data", path=None, format="records")
    _merge(cfg, "dataset", dataset)
    if isinstance(target, str):
        _merge(cfg, "target", {"fn": target})
    with open_dict(cfg):
        cfg.merge_with({"concurrency": concurrency, **_given(reason=reason)})
        if in_memory:  # the rows are in memory already: Evaluation.items holds every one of them
            cfg.merge_with({"keep_items": None})
    return configs.resolve(cfg, overrides), [*choices, *overrides]


def _given(**values: Any) -> dict[str, Any]:
    """The arguments that were given (not None)."""
    return {k: v for k, v in values.items() if v is not None}


def _digest(rows: list[Row]) -> str:
    content = [[r.id, r.input, r.ground_truth, r.output, r.human, dict(r.extra)] for r in rows]
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fresh_dir(outputs: Path) -> Path:
    """outputs/DATE/TIME as the CLI's runs (so resume=True finds both), a new one of this run's own."""
    from evalframe.results.journal import new_run_dir

    now = datetime.now()
    base = outputs / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
    try:
        return new_run_dir(base)
    except OSError as e:
        raise StorageError(
            f"cannot create the run directory {base} ({e.strerror}); pass output_dir=..."
        ) from None


# --- running ----------------------------------------------------------------------------------------


def _run(prepared: _Prepared) -> Evaluation:
    from evalframe.errors import EXIT_INTERRUPTED
    from evalframe.report import console as report
    from evalframe.run import pipeline

    report.quiet_libraries()
    try:
        with report.silenced(not prepared.verbose):  # code prints what it wants: str(result), .summary()
            result, code = pipeline.evaluate(
                prepared.config, prepared.output_dir, prepared.resume_from, prepared.overrides, prepared.given
            )
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:  # the CLI's Ctrl-C exit; in code it is what it was
            raise KeyboardInterrupt from None
        raise
    return Evaluation(result, prepared.config, prepared.resume_from or prepared.output_dir, code)


def evaluate(
    data: Any,
    scorers: str | Scorer | Iterable[str | Scorer] | Mapping[str, Mapping[str, Any] | Scorer],
    target: Callable[..., Any] | str | Target | None = None,
    *,
    model: str | Mapping[str, Any] | None = None,
    penalties: str | Mapping[str, Any] | None = None,
    columns: Mapping[str, str | None] | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    tracking: bool | str = False,
    experiment: str | None = None,
    run_name: str | None = None,
    dataset_name: str | None = None,
    output_dir: str | Path | None = None,
    cache: str = "readwrite",
    reason: str | None = None,
    resume: bool | str | Path | None = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> Evaluation:
    """Evaluate `target` on `data` with `scorers`; the same run as `python -m evalframe ...`.

    data: a list of dicts, a pandas DataFrame, a .jsonl/.csv path, or None for the config's dataset
        (the bundled sample, or `overrides=["dataset=..."]`); `columns` maps your column names
        ({"input": "question"}), `limit` keeps the first N rows.
    scorers: "answer_similarity", a list of names and Scorer objects, or {name: {option: value}}.
    target: a function `input -> answer` (sync or async), "module:function", a Target object
        (evalframe.targets.kinds.HTTPTarget, PythonTarget(fn, pass_row=True), ...), or None for the outputs
        recorded in the data's `output` column.
    model: the judge: a preset ("gpt", "claude", ...), a LiteLLM model string, or a dict of settings.
    penalties: a preset ("strict") or a dict of weights over the defaults.
    tracking: False (default: results on disk only), True (MLflow at $MLFLOW_TRACKING_URI, else
        ./mlflow.db), or a tracking URI.
    output_dir: where results.jsonl and run.json go (default outputs/DATE/TIME, as the CLI).
    resume: a run directory (or True: the newest unfinished run like this one under outputs/) to finish.
    overrides: any other CLI override, e.g. ["max_unscored_rate=0.2", "scorers.answer_similarity.scale=10"].
    verbose: print the progress bar and summary as the CLI does (default: print nothing; `print(result)`).

    Works where an event loop is already running (Jupyter, async tests): the run then goes to a worker
    thread. In async code, `await evaluate_async(...)` keeps your loop free and runs an async target on it.
    """
    prepared = _prepare(**locals())  # first statement: locals() are exactly the arguments
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(prepared)
    # A loop is running in this thread (a notebook cell, an async test) and asyncio cannot nest loops:
    # run on a worker thread with its own loop, and wait for it.
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evalframe")
    try:
        return pool.submit(_run, prepared).result()
    except KeyboardInterrupt:
        # A thread cannot be stopped from outside: say so rather than hang until it is done.
        print(
            f"interrupted: the run goes on in the background until it finishes, journaling into "
            f"{prepared.resume_from or prepared.output_dir}",
            file=sys.stderr,
        )
        raise
    finally:
        pool.shutdown(wait=False)


async def evaluate_async(
    data: Any,
    scorers: str | Scorer | Iterable[str | Scorer] | Mapping[str, Mapping[str, Any] | Scorer],
    target: Callable[..., Any] | str | Target | None = None,
    *,
    model: str | Mapping[str, Any] | None = None,
    penalties: str | Mapping[str, Any] | None = None,
    columns: Mapping[str, str | None] | None = None,
    limit: int | None = None,
    concurrency: int = 8,
    tracking: bool | str = False,
    experiment: str | None = None,
    run_name: str | None = None,
    dataset_name: str | None = None,
    output_dir: str | Path | None = None,
    cache: str = "readwrite",
    reason: str | None = None,
    resume: bool | str | Path | None = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> Evaluation:
    """`evaluate` for async code (same arguments): the run works on a worker thread while your loop
    stays free, and an async target function runs on your loop, where its clients and pools live."""
    prepared = _prepare(**locals())  # first statement: locals() are exactly the arguments
    from evalframe.targets.kinds import PythonTarget

    if isinstance(prepared.given.target, PythonTarget):
        prepared.given.target.run_on(asyncio.get_running_loop())
    return await asyncio.to_thread(_run, prepared)
