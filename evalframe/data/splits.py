"""Hold-out splits: which rows a tuning sweep scores and which it keeps back, the same on every machine."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evalframe.data.rows import Row, Rows
from evalframe.errors import ConfigError


def holdout_ids(rows: Iterable[Row], share: float, seed: int) -> set[str]:
    """The ids of a seeded, held-out `share` of the rows (tune.holdout), stratified by the human score
    (rows without one are a stratum of their own) so both parts mix the labels alike."""
    import sys

    from sklearn.model_selection import train_test_split

    if not 0 < share < 1:
        raise ConfigError(f"tune.holdout={share}: hold out a share of the rows between 0 and 1, e.g. 0.3")
    ids, strata = [], []
    for row in rows:
        ids.append(row.id)
        strata.append("none" if row.human is None else repr(row.human))
    if round(len(ids) * share) < 1 or round(len(ids) * (1 - share)) < 1:
        raise ConfigError(
            f"tune.holdout={share} of {len(ids)} rows leaves a part empty: use more rows or another share"
        )
    try:
        _, held = train_test_split(ids, test_size=share, random_state=seed, stratify=strata)
    except ValueError:  # a human score given to one row only cannot be on both sides
        print(
            f"note: tune.holdout: a human score has too few rows to stratify; the {len(ids)} split at random",
            file=sys.stderr,
        )
        _, held = train_test_split(ids, test_size=share, random_state=seed)
    return set(held)


PARTS = ("tune", "holdout")  # tune.part: the rows a run scores when tune.holdout splits them


def tune_part(rows: Rows, tune: Mapping[str, Any]) -> Rows:
    """The part of the rows a run scores when `tune.holdout` splits them (all of them otherwise): a
    sweep tunes on one part and checks the result on the other."""
    if not tune.get("holdout"):
        return rows
    part = tune.get("part") or "tune"
    if part not in PARTS:
        raise ConfigError(f"tune.part={part}: choose {' or '.join(PARTS)}")
    held_out = holdout_ids(rows, float(tune["holdout"]), int(tune.get("seed") or 0))
    return rows.part(held_out, part == "holdout")
