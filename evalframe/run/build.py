"""The objects a run's config names, built: its scorers and its target (the classes their `_target_`
names, or the caller's own objects), then the credentials of every model they call checked. The first
part of planning a run; what is built here is checked before any row is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalframe.errors import ConfigError
from evalframe.scorers.base import Scorer
from evalframe.targets.base import Target


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


def scorers(config: Mapping[str, Any], given: Mapping[str, Scorer]) -> dict[str, Scorer]:
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


def target(config: Mapping[str, Any], given: Target | None) -> Target:
    """The system under test: the caller's, else the one `target` names."""
    return given if given is not None else build(config["target"], "target")


def check_credentials(target: Target, scorers: Mapping[str, Scorer]) -> None:
    """Every model the target and the scorers call has its key: a missing key is the most common
    mistake and costs nothing to find, so it is found before anything else is read."""
    for model in target.models():
        model.check_credentials("target.model")
    for model in {m for s in scorers.values() for m in s.models()}:
        model.check_credentials("model")
