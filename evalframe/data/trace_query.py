"""Which traces a run reads (dataset=mlflow_traces): the query's keys checked once, before the store is
asked anything, its time window pinned, and MLflow's trace filter string written from it. Pure: the
reader in evalframe.tracking sends the filter and pages through the answer."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from evalframe.errors import ConfigError

STATES = ("OK", "ERROR", "IN_PROGRESS")  # MLflow's trace states
MOST_PER_PAGE = 50000  # MLflow's own cap on one search's max_results
_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc).timestamp()  # as far back as a time can be written
_UNQUOTABLE = re.compile(r"['\"\\]")  # what a LIKE pattern written for a value has in its place


@dataclass(frozen=True)
class Query:
    """The traces to read: an experiment's, filtered in the store (status, tags, the user's filter, a
    time window), then sampled and capped as they are read (evalframe.data.traces.rows)."""

    experiment: str | None  # a name or an id; None: not set (the reader's error lists the experiments)
    tracking_uri: str | None  # None: the run's own store
    until_ms: int  # pinned: the stream is read twice (validate, then score) and gives the same traces
    since_ms: int | None = None
    status: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    filter: str | None = None
    page_size: int = 100

    @classmethod
    def of(cls, cfg: Mapping[str, Any], now: float) -> Query:
        """The `dataset` config's query, checked; relative times count back from `now` (seconds since
        the epoch), and a missing `until` is `now`, so later traces never slip into a second read."""
        until = instant(cfg.get("until"), "dataset.until", now)
        since = instant(cfg.get("since"), "dataset.since", now)
        if since is not None and until is not None and since >= until:
            raise ConfigError(
                f"dataset.since={cfg.get('since')!r} is not before dataset.until={cfg.get('until')!r}; "
                "the window would hold no trace"
            )
        status = cfg.get("status")
        if status is not None and str(status).upper() not in STATES:
            raise ConfigError(
                f"dataset.status={status!r}: choose one of {', '.join(STATES)}, or null for any"
            )
        _check_sample(cfg.get("sample") or {})
        _count(cfg.get("limit"), "dataset.limit", None)
        experiment = cfg.get("experiment")
        return cls(
            experiment=None if experiment is None or str(experiment) == "" else str(experiment),
            tracking_uri=cfg.get("tracking_uri") or None,
            until_ms=until if until is not None else int(now * 1000),
            since_ms=since,
            status=None if status is None else str(status).upper(),
            tags=_tags(cfg.get("tags")),
            filter=str(cfg["filter"]) if cfg.get("filter") else None,
            page_size=_count(cfg.get("page_size") or 100, "dataset.page_size", MOST_PER_PAGE) or 100,
        )

    def filter_string(self) -> str:
        """MLflow's trace filter for the query: every condition AND-ed."""
        conditions = [f"trace.timestamp_ms < {self.until_ms}"]
        if self.since_ms is not None:
            conditions.append(f"trace.timestamp_ms >= {self.since_ms}")
        if self.status is not None:
            conditions.append(f"trace.status = '{self.status}'")
        conditions += [equals(f"tags.`{key}`", value) for key, value in self.tags.items()]
        if self.filter:
            conditions.append(self.filter)
        return " AND ".join(conditions)

    def keeps(self, tags: Mapping[str, str]) -> bool:
        """Whether a trace the store found, with these tags, is one of the query's: the store matched
        a tag value its filter language cannot hold (`equals`) with a pattern, which may find more."""
        return all(tags.get(key) == value for key, value in self.tags.items() if not _quotable(value))


def instant(value: Any, key: str, now: float) -> int | None:
    """A point in time in milliseconds since the epoch: ISO 8601 (2025-06-01, 2025-06-01T12:00,
    ...+02:00; no zone: UTC) or a time ago (30m, 24h, 7d, 2w; s, m, h, d, w) counted from `now`."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    ago = _AGO.fullmatch(text)
    if ago:
        seconds = now - float(ago.group(1)) * _SECONDS[ago.group(2)]
        if seconds < _EARLIEST:  # a store cannot compare with it: it would refuse the whole search
            raise ConfigError(
                f"{key}={value!r} is out of range: a time ago reaches back to the year 1 at most; "
                "write one such as 30m, 24h, 7d or 2w"
            )
        return int(seconds * 1000)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))  # Python 3.10 reads no Z
    except ValueError:
        raise ConfigError(
            f"{key}={value!r} is not a time; write an ISO time (2025-06-01, 2025-06-01T12:00:00Z) or a "
            "time ago (30m, 24h, 7d, 2w)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def _count(value: Any, key: str, most: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (most and value > most):
        upto = f" up to {most}" if most else ""
        raise ConfigError(f"{key}={value!r}: it should be a whole number from 1{upto}; set {key}=...")
    return value


def _check_sample(sample: Mapping[str, Any]) -> None:
    rate = sample.get("rate")
    if rate is None:
        return
    try:
        share = float(rate)
    except (TypeError, ValueError):
        share = math.nan
    if isinstance(rate, bool) or not 0 < share <= 1:
        raise ConfigError(
            f"dataset.sample.rate={rate!r}: the share of traces to read, above 0 and at most 1 "
            "(null: every trace)"
        )


def _tags(tags: Any) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise ConfigError(
            f"dataset.tags={tags!r}: give a mapping of tag to value, e.g. 'dataset.tags={{env: prod}}'"
        )
    for key, value in tags.items():
        if value is None or isinstance(value, Mapping | list):
            raise ConfigError(
                f"dataset.tags.{key}={value!r}: a tag's value is text; set dataset.tags.{key}=VALUE"
            )
    return {str(k): str(v) for k, v in tags.items()}


def _quotable(value: str) -> bool:
    """Whether a string literal of MLflow's filter language can hold `value`. The language has no
    escapes, and its parser reads a backslash before a quote as one: a value ending in a backslash
    would swallow its closing quote and the conditions after it (the store then refuses the query)."""
    return not value.endswith("\\") and not ("'" in value and '"' in value)


def quoted(value: str, what: str) -> str:
    """A value (a trace id, `what` names it) as a string literal of MLflow's filter language."""
    if not _quotable(value):
        raise ConfigError(f"{what}: a value holding both ' and \" or ending in \\ cannot be searched for")
    return f"'{value}'" if "'" not in value else f'"{value}"'


def equals(column: str, value: str) -> str:
    """The condition `column` = `value` (a tag's, a session id), whatever the value holds: one no literal
    can hold is matched with LIKE, its quotes and backslashes (and LIKE's own wildcards) each standing
    for any one character, so the store finds it and maybe a few more; the reader keeps exact matches."""
    if _quotable(value):
        return f"{column} = {quoted(value, column)}"
    pattern = _UNQUOTABLE.sub("_", value)
    return f"{column} LIKE '{pattern}'"
