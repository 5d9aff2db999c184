"""`evaluate`'s arguments -> the config `evalframe` would compose (the same conf/ groups and defaults,
composed with Hydra), and what only code can hand over (a function, scorer objects, rows in memory)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalframe.errors import ConfigError, StorageError
from evalframe.models.cache import MODES
from evalframe.paths import CONF_DIR

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from evalframe.data.rows import Row
    from evalframe.run.planning import Given
    from evalframe.scorers.base import Scorer
    from evalframe.targets.base import Target

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
    from evalframe.data import formats

    path = Path(path).expanduser()
    found = formats.of_file(path)
    if found is None:
        raise ConfigError(
            f"data={str(path)!r}: a {formats.file_suffixes()} file, a list of dicts, or a DataFrame"
        )
    return [f"dataset={found.name}", f"dataset.path={path.resolve()}"]


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
class Prepared:
    config: dict[str, Any]
    given: Given
    output_dir: Path
    resume_from: Path | None
    overrides: list[str]
    verbose: bool


def prepare(
    data: Any,
    scorers: Any,
    target: Any,
    *,
    output_dir: str | Path | None,
    resume: bool | str | Path | None,
    verbose: bool,
    **settings: Any,
) -> Prepared:
    """Everything that can go wrong, found here, before any call: the config, the rows, the target."""
    from evalframe.data import rows as datasets
    from evalframe.results import journal
    from evalframe.run.planning import Given
    from evalframe.targets.base import Target
    from evalframe.targets.python import PythonTarget

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
    return Prepared(config, given, run_dir, resume_from, overrides, verbose)


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
