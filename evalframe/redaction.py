"""Secrets: never in MLflow, on disk or on the console, found by name and by value.

By name: a value under a key named like a key, token, password, secret or authorization header is
blanked. By value: one registry of the secret values themselves (`remember`), collected when a run
starts from its config and command line: secret-named values, the password of a URL
(`http://user:PASS@host`), the credential of an `Authorization`-style value (`Bearer XYZ`), and the
value of every environment variable an `*_env` key names. Every sink scrubs those values from its text:
the run's files, the judge cache, MLflow, Hydra's own files and, through `guard_console`, the console,
so a key that a judge or a target echoes back in a reply or an error is blanked too.

Config keys ending in `_env` name an environment variable (OPENAI_API_KEY), which is not a secret.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote

from evalframe.paths import write_atomically

# `token` ends a name (auth_token, X-Api-Token): max_tokens, the token_f1 scorer and a price per token
# (input_cost_per_token) are settings, not secrets.
SECRET = re.compile(
    r"(api[-_]?key|(?<!_per_)token(?![a-z0-9_])|password|passwd|secret|credential|authori[sz]ation|cookie)",
    re.IGNORECASE,
)
REDACTED = "***"
# A 1-3 character "secret" would blank half of every file: such values are not scrubbed by value.
MIN_LENGTH = 4
_URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]*:([^/\s@]+)@", re.IGNORECASE)
_AUTH_SCHEME = re.compile(r"^\s*(?:Bearer|Basic|Token|Bot|Digest)\s+(\S+)", re.IGNORECASE)

_known: set[str] = set()  # the registry: every secret value met so far in this process


def is_secret(key: str) -> bool:
    return bool(SECRET.search(key)) and not key.endswith("_env")


def _add(value: str) -> None:
    if len(value) >= MIN_LENGTH:
        _known.add(value)
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]  # as it appears inside a JSON string
        if escaped != value:
            _known.add(escaped)


def remember(config: Any, key: str = "") -> None:
    """Add the secret values of a config (or any nested data) to the registry."""
    if isinstance(config, Mapping):
        for k, v in config.items():
            remember(v, f"{key}.{k}" if key else str(k))
    elif isinstance(config, list | tuple):
        for v in config:
            remember(v, key)
    elif isinstance(config, str):
        if key.endswith("_env") and os.environ.get(config):
            _add(os.environ[config])  # the key itself, read from the variable this key names
        elif key and is_secret(key.rsplit(".", 1)[-1]):
            _add(config)
        for password in _URL_PASSWORD.findall(config):
            _add(password)
            _add(unquote(password))
        for credential in _AUTH_SCHEME.findall(config):
            _add(credential)
    elif key and is_secret(key.rsplit(".", 1)[-1]) and config is not None:
        _add(str(config))


def remember_overrides(overrides: Iterable[str]) -> None:
    """Add the secret values of command-line overrides (`key=value`, sweeps `key=a,b` included)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in overrides:
        if "=" not in text or text.startswith("-"):
            continue
        key, raw = text.split("=", 1)
        values: list[Any] = [raw]
        try:
            [override] = parser.parse_overrides([text])
            values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        except Exception:  # a malformed override or an interval sweep: the text as typed
            pass
        for value in values:
            remember(value, key.lstrip("+~"))


def known() -> list[str]:
    """The registered secret values, longest first (a secret containing another is blanked whole)."""
    return sorted(_known, key=len, reverse=True)


def scrub_text(text: str) -> str:
    """`text` with every known secret value blanked."""
    for secret in known():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrubbed(value: Any) -> Any:
    """A copy of a result (dataclasses, dicts, lists, strings) with every known secret value blanked;
    the object itself when it holds none."""
    if not _known:
        return value
    if isinstance(value, str):
        return scrub_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: scrubbed(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    return value


def redact(value: Any, key: str = "") -> Any:
    """A copy of a config with every secret-named value blanked and every known secret value scrubbed."""
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if key and is_secret(key) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str):
        return _mask_urls(scrub_text(value))
    return value


def _mask_urls(text: str) -> str:
    # A URL's password is blanked even before the registry knows it (a config read back from disk).
    return _URL_PASSWORD.sub(lambda m: m.group(0).replace(f":{m.group(1)}@", f":{REDACTED}@"), text)


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (`key=value`) with secret values blanked."""
    return [
        f"{o.split('=', 1)[0]}={REDACTED}"
        if "=" in o and is_secret(o.split("=", 1)[0].lstrip("+~"))
        else _mask_urls(scrub_text(o))
        for o in overrides
    ]


def scrub_file(path: Path) -> None:
    """Blank every known secret value in a file written by others (Hydra's .hydra/ and multirun.yaml)."""
    if not _known or not path.is_file():
        return
    text = path.read_text(errors="replace")
    cleaned = scrub_text(text)
    if cleaned != text:
        write_atomically(path, cleaned)  # the jobs of a parallel sweep each scrub: none sees half a file


def scrub(directory: Path) -> None:
    """Blank every known secret value in every file under `directory`."""
    if directory.is_dir():
        for path in directory.rglob("*"):
            scrub_file(path)


class _ScrubbedStream:
    """A console stream that blanks known secret values in everything written to it."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub_text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding...
        return getattr(self._stream, name)


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _known:
            message = record.getMessage()
            cleaned = scrub_text(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


def guard_console() -> None:
    """Scrub known secret values from the console (print, rich, Hydra's launch lines, tracebacks) and
    from every log handler configured so far (Hydra's evalframe.log)."""
    if not isinstance(sys.stdout, _ScrubbedStream):
        sys.stdout = _ScrubbedStream(sys.stdout)
    if not isinstance(sys.stderr, _ScrubbedStream):
        sys.stderr = _ScrubbedStream(sys.stderr)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _ScrubFilter) for f in handler.filters):
            handler.addFilter(_ScrubFilter())
