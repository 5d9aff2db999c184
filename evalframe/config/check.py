"""A composed config checked before any work: every number in its range (concurrency, timeouts,
penalties, gate thresholds), and `repeats` and command-line `model.*` overrides reaching every judge.
A ConfigError names the key to fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    StrictBool,
    TypeAdapter,
    ValidationError,
)

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
_TRACKING: dict[str, TypeAdapter[Any]] = {"feedback": TypeAdapter(StrictBool)}  # "no" would read as true
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
    _repeats_reach_every_judge(dict(config))
    for key, adapter in _TOP.items():
        if key in config:
            _value(adapter, config[key], key)
    tracking = config.get("tracking") or {}
    for key, adapter in _TRACKING.items():
        if key in tracking:
            _value(adapter, tracking[key], f"tracking.{key}")
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
