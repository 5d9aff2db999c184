"""Secrets: anything named like a key, token, password or secret never reaches MLflow, disk or the console.

Config keys ending in `_env` name an environment variable (OPENAI_API_KEY), which is not a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# `token` ends a name (auth_token, hf_token): max_tokens and the token_f1 scorer are settings, not secrets.
SECRET = re.compile(r"(api_?key|token(?![a-z0-9_])|password|passwd|secret|credential)", re.IGNORECASE)
REDACTED = "***"


def is_secret(key: str) -> bool:
    return bool(SECRET.search(key)) and not key.endswith("_env")


def redact(value: Any, key: str = "") -> Any:
    """A copy of a config with every secret-named value blanked."""
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if key and is_secret(key) and value not in (None, ""):
        return REDACTED
    return value


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (`key=value`) with secret values blanked."""
    return [
        f"{o.split('=', 1)[0]}={REDACTED}" if "=" in o and is_secret(o.split("=", 1)[0].lstrip("+~")) else o
        for o in overrides
    ]


def values(config: Any, key: str = "") -> Iterator[str]:
    """The secret values in a config, to scrub from files written by others (Hydra)."""
    if isinstance(config, Mapping):
        for k, v in config.items():
            yield from values(v, str(k))
    elif isinstance(config, list):
        for v in config:
            yield from values(v, key)
    elif key and is_secret(key) and config not in (None, ""):
        yield str(config)


def scrub(directory: Path, secrets: list[str]) -> None:
    """Blank secret values in every file under `directory` (Hydra's .hydra/ copies of the command line)."""
    secrets = [s for s in secrets if len(s) >= 4]  # a 1-3 character "secret" would blank half the file
    if not secrets or not directory.is_dir():
        return
    for path in directory.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            cleaned = text
            for secret in secrets:
                cleaned = cleaned.replace(secret, REDACTED)
            if cleaned != text:
                path.write_text(cleaned)
