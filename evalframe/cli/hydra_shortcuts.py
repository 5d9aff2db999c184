"""Two pieces of work Hydra does on every command that evalframe's command line can do without, each
safe for what it skips (Hydra 1.3, pinned). Why: Hydra composing and copying configs is most of what
`--help` costs, and time before a run's first model request (it holds the GIL while litellm imports).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hydra.core.config_store import ConfigStore

# Flags that put another config in play (a user's config dir or primary config), which may set hydra.mode.
_OTHER_CONFIG = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def _store_not_copied(store: ConfigStore, memo: dict[int, Any]) -> ConfigStore:
    return store


def share_the_config_store() -> None:
    """Hydra deep-copies its config repository for every group it lists, and with it the ConfigStore (a
    singleton: every launcher's and sweeper's structured configs): `--help` lists ~90 groups, 0.5-0.9 s
    of copying, most of its time. The store hands out a deep copy of a node on each load
    (ConfigStore.load), so the one instance is safe to share."""
    ConfigStore.__deepcopy__ = _store_not_copied  # type: ignore[attr-defined]


@contextmanager
def mode_from_the_command_line(argv: list[str]) -> Iterator[None]:
    """Before a run, Hydra composes the whole config once more only to read `hydra.mode` (~0.1 s).
    evalframe's conf/ never sets it, so on a command line that brings no config of its own the mode
    is the command line's: `hydra.mode=...` if given (Hydra composes as before), else -m decides, as
    Hydra does when the mode is unset."""
    from hydra._internal.hydra import Hydra

    if any(a.split("=", 1)[0] in _OTHER_CONFIG for a in argv):
        yield
        return
    composed = Hydra.get_mode

    def get_mode(hydra: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        if any(o.lstrip("+~").startswith("hydra.mode=") for o in overrides):
            return composed(hydra, config_name, overrides)
        return None

    Hydra.get_mode = get_mode  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        Hydra.get_mode = composed  # type: ignore[method-assign]
