"""Typos on the command line, found before Hydra composes anything, each one line naming the nearest
valid names: a key the config does not have (`+datset=chat_sample`: Hydra adds it as a new key and runs
the default job, exit 0; without the `+` it suggests adding it), a key under a known one that no config
file has (`penalties.mising=`: five lines of Hydra's, no name to use) and an option a group does not have
(`scorer=answer_similarty`: Hydra lists the options among its internal lines, with no "did you mean").

Read from conf/ as shipped: a command line that brings a config of its own (--config-dir, a search
path) may have other keys and options, and is left to Hydra.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher, get_close_matches
from functools import cache
from pathlib import Path
from typing import Any

from evalframe.errors import ConfigError
from evalframe.paths import CONF_DIR

# Flags that put another config in play (a user's config dir or primary config).
_OTHER_CONFIG = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")
# How alike a name must be to be named (difflib's ratio). A key near a known one is taken for a typo
# and refused (datset/dataset 0.92, concurency/concurrency 0.96; a new key such as extra_key is near
# nothing); an option not in its group is refused anyway, and gtp/gpt (0.67) is worth naming.
_KEY_CUTOFF, _OPTION_CUTOFF = 0.75, 0.6


@cache
def groups() -> dict[str, tuple[str, ...]]:
    """conf/'s groups and each one's options (its files' names)."""
    return {
        d.name: tuple(sorted(p.stem for p in d.glob("*.yaml")))
        for d in sorted(CONF_DIR.iterdir())
        if d.is_dir() and not d.name.startswith((".", "_"))
    }


@cache
def _top_files() -> tuple[Path, ...]:
    """The files whose keys sit at the config's top: the primary config and the `_global_` presets."""
    found = [p for p in CONF_DIR.glob("*/*.yaml") if p.read_text().startswith("# @package _global_")]
    return (CONF_DIR / "config.yaml", *found)


@cache
def _config_keys() -> frozenset[str]:
    """The top-level keys of the composed config: the primary config's, each group's own (a judge's is
    under scorers), and those a `_global_` preset adds."""
    keys = {"scorers", "hydra"}
    for path in _top_files():
        keys |= set(_keys_of(path))
    return frozenset(keys)


def _names(value: Any) -> list[str] | None:
    """The option names a group override chooses (one, a list, a sweep's choices); None for what is
    not names (null, a glob, a range)."""
    from hydra.core.override_parser.types import ChoiceSweep

    if isinstance(value, str):
        return [value]
    if isinstance(value, ChoiceSweep):
        value = value.list
    if not isinstance(value, list):
        return None
    found: list[str] = []
    for element in value:
        names = _names(element)
        if names is None:
            return None
        found += names
    return found


def _nearest(name: str, known: Sequence[str], cutoff: float) -> list[str]:
    """The names in `known` nearest `name`: the nearest, and those nearly as near."""
    near = get_close_matches(name, list(known), n=3, cutoff=cutoff)
    best = SequenceMatcher(None, name, near[0]).ratio() if near else 0.0
    return [n for n in near if SequenceMatcher(None, name, n).ratio() >= best - 0.1]


def _wrong_option(override: Any) -> str | None:
    group = str(override.key_or_group)
    options = groups()[group]
    key, _, value = str(override.input_line).partition("=")
    for name in _names(override.value()) or []:
        if name in options or "/" in name:
            continue
        near = _nearest(name, options, _OPTION_CUTOFF)
        if not near:
            return f"{key}={value}: {group} has no option {name!r} (options: {', '.join(options)})"
        # The line as typed with the name replaced: a list or a sweep's other choices stay.
        typed = re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")
        said = " or ".join(f"{key}={typed.sub(n, value)}" for n in near)
        return f"{key}={value}: {group} has no option {name!r}; did you mean {said}?"
    return None


@cache
def _keys_of(path: Path, seen: frozenset[Path] = frozenset()) -> dict[str, Any]:
    """A config file's mapping with the `_here_` files of its defaults list (`/model_base@_here_`)
    merged under it: the keys an option of a group has (parsed once: callers only read it)."""
    import yaml

    found = yaml.safe_load(path.read_text()) or {}
    merged: dict[str, Any] = {}
    for entry in found.pop("defaults", None) or []:
        if isinstance(entry, str) and entry.startswith("/") and entry.endswith("@_here_"):
            base = CONF_DIR / f"{entry[1:].removesuffix('@_here_')}.yaml"
            if base.is_file() and base not in seen:
                merged |= _keys_of(base, seen | {path})
    return merged | found


@cache
def _children(parent: tuple[str, ...]) -> frozenset[str] | None:
    """The keys under `parent` in any config file that can put them there (the primary config, the
    `_global_` presets, every option of the group `parent` starts with); None where a file holds
    something else there (a value, free-form `null`): nothing known to compare with."""
    files = list(_top_files())
    if parent[0] in groups():
        files += [CONF_DIR / parent[0] / f"{o}.yaml" for o in groups()[parent[0]]]
    keys: set[str] = set()
    for path in files:
        node: Any = _keys_of(path)
        if path.parent.name == parent[0] and path.parent != CONF_DIR:
            node = {parent[0]: node}  # an option's keys sit under its group's name
        for part in parent:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        if not isinstance(node, dict):
            return None
        keys |= set(node)
    return frozenset(keys) if keys else None


def _wrong_nested_key(override: Any) -> str | None:
    """`penalties.mising=0.1`: a key under a known one that no config file has, close to one that
    does (Hydra's own refusal is five lines with no name to use instead)."""
    parts = tuple(str(override.key_or_group).split("."))
    if str(override.input_line).startswith("+") or parts[0] in ("hydra", "scorers"):
        return None  # `+` adds a key on purpose; a judge's keys come from its scorer's package
    for depth in range(1, len(parts)):
        known = _children(parts[:depth])
        if known is None:
            return None
        if parts[depth] in known:
            continue
        near = _nearest(parts[depth], sorted(known), _KEY_CUTOFF)
        if not near:
            return None
        value = str(override.input_line).split("=", 1)[1] if "=" in str(override.input_line) else ""
        head, tail = ".".join(parts[:depth]), ".".join(parts[depth + 1 :])
        said = " or ".join(f"{head}.{n}{'.' + tail if tail else ''}={value}" for n in near)
        return f"{override.input_line}: {head} has no key {parts[depth]!r}; did you mean {said}?"
    return None


def _wrong_key(override: Any) -> str | None:
    """A key whose top level the config does not have and is close to one it has; a new key near
    nothing (`+my_note=...`) is the user's to add."""
    key = str(override.key_or_group)
    top, rest = key.split(".")[0], key[len(key.split(".")[0]) :]
    known = sorted(_config_keys() | set(groups()))
    if top in known:
        return _wrong_nested_key(override) if rest else None
    near = _nearest(top, known, _KEY_CUTOFF)
    if not near:
        return None
    line = str(override.input_line)
    value = line.split("=", 1)[1] if "=" in line else ""
    # A key of the config is set without `+` (with it Hydra refuses: the key is already there); a
    # deeper key keeps the user's prefix (`+gate.min_score.NAME=...` adds one).
    prefix = line[: len(line) - len(line.lstrip("+"))] if rest else ""
    said = " or ".join(f"{prefix}{n}{rest}={value}" for n in near)
    return f"{override.input_line}: {top} is not a key of the config; did you mean {said}?"


def check(argv: Sequence[str]) -> None:
    """A ConfigError for the first key or option typo in a run's command line (Hydra's flags and
    overrides); nothing when there is none, or the line brings a config of its own, or does not
    parse (Hydra says what is wrong with it)."""
    given = [a for a in argv if not a.startswith("-") and "=" in a]
    if not given or any(a.split("=", 1)[0] in _OTHER_CONFIG for a in argv):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(given)
    except Exception:
        return
    if any(o.key_or_group.startswith("hydra.searchpath") for o in parsed):
        return
    for override in parsed:
        if override.is_delete() or override.is_hydra_override():
            continue
        grouped = override.key_or_group in groups()
        problem = _wrong_option(override) if grouped else _wrong_key(override)
        if problem:
            raise ConfigError(problem)
