"""The config outside the command line's own Hydra app: composing conf/ for the Python API and for
rescore's look-ups, and resolving a composed config into plain data with errors that say what to fix.
`python -m evalframe` composes through @hydra.main (evalframe.cli.run); everything else comes here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    TypeAdapter,
    ValidationError,
)

from evalframe.errors import ConfigError
from evalframe.models.cache import MODES
from evalframe.paths import CONF_DIR


def compose(overrides: list[str]) -> DictConfig:
    """Compose conf/ with Hydra, also from inside a running @hydra.main app (the host's Hydra state
    is set aside and put back, so its HydraConfig and later compose calls are untouched)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    host = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"config error: {e}") from None
    finally:
        restore_gh_from_backup(host)


def preset(name: str, key: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """conf/model/NAME.yaml as Hydra composes it (with the base it pulls in), and `overrides`
    (model.api_base=...) on top: from the running app's search path when it has that preset (so a
    --config-dir of the user's own counts), else from the bundled conf/."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    hydra = GlobalHydra.instance()
    in_app = hydra.is_initialized() and name in hydra.config_loader().get_group_options("model")
    bundled = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
    if not in_app and name not in bundled:
        raise ConfigError(
            f"{key}: {name!r} is not a model preset ({', '.join(bundled)}); or give a mapping with the "
            "model's keys, e.g. {name: openai/gpt-4o, api_key_env: OPENAI_API_KEY}"
        )
    lines = [f"+model={name}", *overrides]
    try:
        if in_app:
            cfg = hydra_compose(overrides=lines)
        else:
            host = get_gh_backup()  # evaluate() may run inside the user's own Hydra app: put it back
            hydra.clear()
            try:
                with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                    cfg = hydra_compose(overrides=lines)
            finally:
                restore_gh_from_backup(host)
        found = OmegaConf.to_container(cfg.model, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"{key}: the preset {name} with {' '.join(overrides)}: {e}") from None
    assert isinstance(found, dict)
    return {str(k): v for k, v in found.items()}


def resolve(cfg: DictConfig, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The composed config as plain data, every interpolation resolved and every `???` filled;
    `overrides` is the command line that composed it (its model.* reach a panel's presets)."""
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as e:
        raise ConfigError(
            f"{e.full_key} is required: set it on the command line ({e.full_key}=...)"
        ) from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"config error: {e}") from None
    config = {str(k): v for k, v in cast(dict[Any, Any], resolved).items()}
    if "cache" in config and not isinstance(config["cache"], dict):
        # `cache=off` was a group choice before the cache became one node; Hydra takes it as a value.
        raise ConfigError(
            f"cache={config['cache']}: choose the mode with cache.mode={config['cache']} "
            f"({', '.join(MODES)}); the folder is cache.dir"
        )
    _repeats_reach_every_judge(config)
    _model_overrides_reach_every_judge(config, overrides)
    check(config)
    return config


def _model_overrides_reach_every_judge(config: dict[str, Any], overrides: Sequence[str]) -> None:
    """A panel's preset (`scorers.X.models=[gpt,claude]`) gets the command line's `model.*` overrides,
    as `model=gpt` would: `model.api_base=...` sends every judge there, where the presets used to go
    to their providers' public addresses, with the key, silently. Each becomes the mapping of its
    settings (labelled as before), so the logged config says where every judge went. `model.name`
    would make every judge one model under several labels: refused."""
    mine = [o for o in overrides if o.lstrip("+~").startswith("model.")]
    renamed = [o for o in mine if o.lstrip("+~").startswith("model.name=")]
    for name, spec in (config.get("scorers") or {}).items():
        models = spec.get("models") if isinstance(spec, dict) else None
        if not mine or not isinstance(models, list):
            continue
        presets = [i for i, entry in enumerate(models) if isinstance(entry, str)]
        if presets and renamed:
            raise ConfigError(
                f"{renamed[0]} would make every preset of scorers.{name}.models that one model: name each "
                f"judge's model in the panel instead, e.g. scorers.{name}.models=[{{name: ..., label: ...}}]"
            )
        for i in presets:
            models[i] = {**preset(models[i], f"scorers.{name}.models[{i}]", mine), "label": models[i]}


def _repeats_reach_every_judge(config: dict[str, Any]) -> None:
    """`repeats=N` reaches a judge through `repeats: ${repeats}` in its config file, as `model` does:
    a judge of the user's own without that line would silently judge once."""
    repeats = config.get("repeats", 1)
    for name, spec in (config.get("scorers") or {}).items():
        if repeats != 1 and isinstance(spec, dict) and "model" in spec and "repeats" not in spec:
            raise ConfigError(
                f"repeats={repeats}, but scorers.{name} has no repeats key: add `repeats: ${{repeats}}` "
                "to its config file (or `defaults: [/judge_base@_here_, _self_]`, as the bundled judges "
                f"do), or set +scorers.{name}.repeats={repeats}"
            )


# Every number a run depends on, checked here before any model call (a negative penalty or timeout
# is accepted by nothing downstream; `max_unscored_rate=abc` would fail after the run was paid for).
# Keys checked wherever they appear: the judge's model, a target's, each scorer's own.
_ANYWHERE: dict[str, TypeAdapter[Any]] = {
    "timeout": TypeAdapter(PositiveFloat | None),
    "max_retries": TypeAdapter(NonNegativeInt),
    "reply_retries": TypeAdapter(NonNegativeInt),
    "scale": TypeAdapter(PositiveFloat),
}
_TOP: dict[str, TypeAdapter[Any]] = {
    "concurrency": TypeAdapter(PositiveInt),  # 0 would wait forever for a free slot
    "window": TypeAdapter(PositiveInt | None),
    "keep_items": TypeAdapter(NonNegativeInt | None),
    "max_judgments": TypeAdapter(PositiveInt | None),
    "max_unscored_rate": TypeAdapter(Annotated[float, Field(ge=0, le=1)]),
}
_PENALTY = TypeAdapter(NonNegativeFloat)  # every weight of a `penalties` mapping
_NUMBER = TypeAdapter(float)


def _value(adapter: TypeAdapter[Any], value: Any, where: str) -> None:
    try:
        adapter.validate_python(value)
    except ValidationError as e:
        reason = e.errors()[0]["msg"].replace("Input should", "it should")
        raise ConfigError(f"{where}={value!r}: {reason}; set it on the command line ({where}=...)") from None


def _walk(node: Mapping[str, Any], prefix: str) -> None:
    for key, value in node.items():
        where = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if key == "penalties":
                for name, weight in value.items():
                    _value(_PENALTY, weight, f"{where}.{name}")
            _walk(value, f"{where}.")
        elif key in _ANYWHERE:
            _value(_ANYWHERE[key], value, where)


def check(config: Mapping[str, Any]) -> None:
    """The config's values, in one place: a ConfigError (exit code 2) names the first bad one."""
    for key, adapter in _TOP.items():
        if key in config:
            _value(adapter, config[key], key)
    gate = config.get("gate") or {}
    threshold = gate.get("pass_threshold", 0.5)
    for name, value in threshold.items() if isinstance(threshold, Mapping) else [("", threshold)]:
        _value(_NUMBER, value, f"gate.pass_threshold{'.' + name if name else ''}")
    for kind in ("min_score", "max_score", "min_pass_rate"):
        for name, value in (gate.get(kind) or {}).items():
            if value is not None:
                _value(_NUMBER, value, f"gate.{kind}.{name}")
    # The root's keys first: a scorer's `${model}` or `${penalties}` copy names them, but the user set them.
    _walk({k: v for k, v in config.items() if k != "scorers"}, "")
    _walk({"scorers": config.get("scorers") or {}}, "")
