"""The config outside the command line's own Hydra app: composing conf/ for the Python API and for
rescore's look-ups, and resolving a composed config into plain data with errors that say what to fix.
`python -m evalframe` composes through @hydra.main (evalframe.cli.hydra_app); everything else comes here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

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


def multirun_overrides(argv: Sequence[str]) -> list[Any] | None:
    """A `-m` command line's overrides as Hydra parses them, in order (a key given twice is there
    twice, as the sweep records it); None for a single run, or a command line Hydra will refuse itself
    (it says what is wrong)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not {"-m", "--multirun"} & set(argv):
        return None
    given = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(given)
    except Exception:
        return None
    return list(parsed)


def keyed(overrides: list[Any]) -> dict[str, Any]:
    """Parsed overrides by key, `+`/`~` dropped (the last of a key given twice)."""
    return {o.get_key_element().lstrip("+~"): o for o in overrides}


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
    _model_overrides_reach_every_judge(config, overrides)
    from evalframe.config.check import check  # pydantic: not on `--help`'s path

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
        # Only an LLM judge (it has `model`) names presets; semantic_similarity's `models` are embedders.
        if not mine or not isinstance(models, list) or "model" not in spec:
            continue
        presets = [i for i, entry in enumerate(models) if isinstance(entry, str)]
        if presets and renamed:
            raise ConfigError(
                f"{renamed[0]} would make every preset of scorers.{name}.models that one model: name each "
                f"judge's model in the panel instead, e.g. scorers.{name}.models=[{{name: ..., label: ...}}]"
            )
        for i in presets:
            models[i] = {**preset(models[i], f"scorers.{name}.models[{i}]", mine), "label": models[i]}
