"""Joining a running Ray cluster (`hydra/launcher=ray hydra.launcher.ray.init.address=...`).

hydra-ray-launcher 1.2.2 (the newest) puts `object_store_memory` (75 MiB, for its own CI) into every
`ray.init` it makes unless the config has the key, and Ray refuses that key when joining a cluster
("When connecting to an existing cluster, object_store_memory must not be provided"): every command that
named a cluster failed with a traceback. Given an address and no object_store_memory, the command line
gets the key as null, which the launcher keeps and Ray reads as "not provided".
"""

from __future__ import annotations

from evalframe.config.compose import keyed, multirun_overrides

INIT = "hydra.launcher.ray.init"


def joined(argv: list[str]) -> list[str]:
    """`argv` as it is, or with `+hydra.launcher.ray.init.object_store_memory=null` when it joins a
    running Ray cluster through the Ray launcher."""
    parsed = multirun_overrides(argv)
    keys = keyed(parsed or [])
    launcher = keys.get("hydra/launcher")
    if launcher is None or launcher.value() != "ray" or f"{INIT}.object_store_memory" in keys:
        return argv
    address = keys.get(f"{INIT}.address")
    if address is None or str(address.value()).lower() in ("none", "null", ""):
        return argv  # a local instance: the launcher's setting stands
    return [*argv, f"+{INIT}.object_store_memory=null"]
