"""A verdict's digest: a hash of everything a scorer's verdict on an item depends on, written with the
verdict onto its trace (evalframe.digest), so a later run knows whether a trace already carries this
scorer's verdict under the same settings (not judged again) or under others (judged again, the old
verdict overridden).

In it: the scorer's config node as composed (its penalties, verdict tables, rules, `reason`, repeats,
panel), the text of its prompt files and of the files they include, import or extend, each judge
model's settings that can change a reply (name, temperature, max_tokens, extra), the target's (what
produced the judged output) and the dataset's column mapping (what of the row is judged). Left out:
where things are (prompt paths, api_base, a target's url, the dataset's location), how they are
reached (timeouts, retries, rate limits, batching, prices), the run (its id, concurrency, cache) and
credentials entirely (a hash of a key is still derived from it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from evalframe.redaction import is_secret
from evalframe.scorers.base import Scorer

# Keys that say where something is or how it is reached, never what a verdict says.
_NOT_VERDICT = frozenset(
    {
        *("api_key_env", "api_base", "timeout", "max_retries", "reply_retries", "rpm", "tpm"),
        *("batch", "batch_poll", "batch_size", "input_cost_per_token", "output_cost_per_token"),
        *("prompt", "system", "prompt_dir", "extract_prompt_dir"),  # paths: their files' text counts
        *("url",),  # an HTTP target's address (it may hold a credential)
        *("label",),  # a panel member's display name
    }
)


def _kept(value: Any) -> Any:
    """`value` without the keys above and without anything named like a secret, at any depth."""
    if isinstance(value, Mapping):
        return {str(k): _kept(v) for k, v in value.items() if k not in _NOT_VERDICT and not is_secret(str(k))}
    if isinstance(value, list | tuple):
        return [_kept(v) for v in value]
    return value


def _mapped(columns: Mapping[str, Any]) -> Any:
    """The column mapping as it reads rows: a field spelled out as read from its own name (a preset
    listing its columns) reads what the default does, so it judges the same."""
    return _kept({field: column for field, column in columns.items() if column != field})


def payload(config: Mapping[str, Any], name: str, scorer: Scorer, target_identity: str = "") -> str:
    """What the digest of scorer `name` hashes, as JSON text (tests read it: no secret is in it)."""
    judges = [_kept(asdict(settings)) for settings in scorer.models()]
    what = {
        "scorer": _kept((config.get("scorers") or {}).get(name) or {}),
        "class": f"{type(scorer).__module__}.{type(scorer).__qualname__}",
        "prompts": scorer.identity(),
        "judges": judges,
        "target": _kept(config.get("target") or {}),
        "target_identity": target_identity,
        "columns": _mapped((config.get("dataset") or {}).get("columns") or {}),
    }
    return json.dumps(what, sort_keys=True, ensure_ascii=False, default=str)


def digests(
    config: Mapping[str, Any], scorers: Mapping[str, Scorer], target_identity: str = ""
) -> dict[str, str]:
    """{scorer name: its verdicts' digest}: 16 hex digits."""
    return {
        name: hashlib.sha256(payload(config, name, scorer, target_identity).encode()).hexdigest()[:16]
        for name, scorer in scorers.items()
    }
