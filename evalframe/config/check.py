"""A composed config checked before any work into the typed settings the run reads (config.settings):
every key known, every number in its range (concurrency, timeouts, penalties, gate thresholds), and
`repeats` reaching every judge. A ConfigError names the key to fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, TypeAdapter, ValidationError

from evalframe.config.settings import RunSettings
from evalframe.errors import ConfigError


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


# Keys checked wherever they appear: the judge's model, a target's, each scorer's own. The run's own
# keys are the typed settings' (config.settings), checked by pydantic there.
_ANYWHERE: dict[str, TypeAdapter[Any]] = {
    "timeout": TypeAdapter(PositiveFloat | None),
    "max_retries": TypeAdapter(NonNegativeInt),
    "reply_retries": TypeAdapter(NonNegativeInt),
    "scale": TypeAdapter(PositiveFloat),
}
_PENALTY = TypeAdapter(NonNegativeFloat)  # every weight of a `penalties` mapping


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


def check(config: Mapping[str, Any]) -> RunSettings:
    """The config's values, in one place: the typed settings the run reads, or a ConfigError (exit code
    2) naming the first bad key."""
    _repeats_reach_every_judge(dict(config))
    _known_keys(config)
    try:
        settings = RunSettings.model_validate(dict(config))
    except ValidationError as e:
        # A union (a number, or one per scorer) fails once per branch: the deepest names the bad value.
        error = max(e.errors(), key=lambda found: len(_where(config, found["loc"])[0].split(".")))
        where, value = _where(config, error["loc"])
        if error["type"] == "literal_error":
            expected = (error.get("ctx") or {}).get("expected", "")
            raise ConfigError(f"{where}={value!r} is not an option; use one of {expected}") from None
        reason = error["msg"].replace("Input should", "it should")
        raise ConfigError(f"{where}={value!r}: {reason}; set it on the command line ({where}=...)") from None
    # The root's keys first: a scorer's `${model}` or `${penalties}` copy names them, but the user set them.
    _walk({k: v for k, v in config.items() if k != "scorers"}, "")
    _walk({"scorers": config.get("scorers") or {}}, "")
    return settings


def _where(config: Mapping[str, Any], loc: tuple[Any, ...]) -> tuple[str, Any]:
    """The key an error's location names and its value: pydantic adds the type it tried to a union's
    location (gate.pass_threshold.float), which is no key of the config."""
    keys, node = [], config
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            keys.append(str(part))
            node = node[part]
    return ".".join(keys), node


def _known_keys(config: Mapping[str, Any]) -> None:
    """A top-level key the config does not have is a typo (`+datset=...` would run the default dataset):
    refused, with the nearest key."""
    known = list(RunSettings.model_fields)
    for key in config:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ConfigError(f"{key} is not a config key: {hint}(the keys: {', '.join(sorted(known))})")
