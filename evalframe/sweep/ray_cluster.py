"""Joining a running Ray cluster (`hydra/launcher=ray hydra.launcher.ray.init.address=...`).

hydra-ray-launcher 1.2.2 (the newest) puts `object_store_memory` (75 MiB, for its own CI) into every
`ray.init` it makes unless the config has the key, and Ray refuses that key when joining a cluster
("When connecting to an existing cluster, object_store_memory must not be provided"): every command that
named a cluster failed with a traceback. Given an address and no object_store_memory, the command line
gets the key as null, which the launcher keeps and Ray reads as "not provided". And an address nothing
answers at is said in one line before anything runs: Ray's own retries would last minutes.
"""

from __future__ import annotations

import socket
from typing import Any

from evalframe.config.compose import keyed, multirun_overrides
from evalframe.errors import ConfigError

INIT = "hydra.launcher.ray.init"


def _ray_keys(argv: list[str]) -> dict[str, Any] | None:
    """The command line's overrides by key when it runs a sweep on the Ray launcher, else None."""
    keys = keyed(multirun_overrides(argv) or [])
    launcher = keys.get("hydra/launcher")
    return keys if launcher is not None and launcher.value() == "ray" else None


def _address(keys: dict[str, Any]) -> str | None:
    """The cluster the command joins (None: a local instance of its own)."""
    address = keys.get(f"{INIT}.address")
    if address is None or str(address.value()).lower() in ("none", "null", ""):
        return None
    return str(address.value())


def joined(argv: list[str]) -> list[str]:
    """`argv` as it is, or with `+hydra.launcher.ray.init.object_store_memory=null` when it joins a
    running Ray cluster through the Ray launcher."""
    keys = _ray_keys(argv)
    if keys is None or f"{INIT}.object_store_memory" in keys or _address(keys) is None:
        return argv  # not Ray, the user's own setting, or a local instance: the launcher's setting stands
    return [*argv, f"+{INIT}.object_store_memory=null"]


def reachable(argv: list[str], timeout: float = 5.0) -> None:
    """A cluster named by host and port answers before anything runs: given a wrong address, Ray
    retries for minutes, printing its own warnings. `auto` (the cluster `ray start` started on this
    machine) is left to Ray."""
    keys = _ray_keys(argv)
    address = None if keys is None else _address(keys)
    if address is None or address.lower() == "auto":
        return
    client = address.startswith("ray://")  # Ray Client: its server's port, 10001 unless given
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        host, port = address.removeprefix("ray://"), "10001" if client else "6379"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"{INIT}.address={address}: no Ray cluster answers at {host}:{port} ({e.strerror or e}); "
            f"start one there (`ray start --head --port={port}`) or give the address `ray start` printed"
        ) from None
