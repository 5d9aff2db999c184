"""One evaluation, sharded: `evalframe -m shards=N ...` runs the rows as N jobs of the selected Hydra
launcher (basic, joblib, Ray), each scoring the rows whose id hashes to it (evalframe.data.shards),
and at the sweep's end merges them into one run (evalframe.run.merged).

The jobs are a plain Hydra sweep: the command line's `shards=N` gets `shard=range(0,N)` beside it
before Hydra parses it, so every sweeper and launcher runs the shards as they run any sweep's jobs,
each with its own directory, journal, resume and share of the rate budget (model.rpm/tpm split over
the jobs that run at once, as for any sweep)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from evalframe.config.compose import keyed, multirun_overrides
from evalframe.errors import ConfigError


def expand(argv: list[str]) -> list[str]:
    """`-m shards=N ...` -> `-m shards=N ... shard=range(0,N)`; anything else as it is. Sharding splits
    one evaluation, so it is not combined with swept values (each job would be a shard of another
    evaluation): one sharded command per setting."""
    parsed = multirun_overrides(argv)
    keys = keyed(parsed or [])
    if parsed is None or "shards" not in keys or "shard" in keys:
        return argv
    shards = keys["shards"]
    value = None if shards.is_sweep_override() else shards.value()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"shards={str(shards.input_line).split('=', 1)[1]}: give one whole number, 1 or more"
        )
    swept = [str(o.input_line) for o in parsed if o.is_sweep_override() and not o.is_hydra_override()]
    if swept or "sweep" in keys:
        what = ", ".join(swept) or f"sweep={keys['sweep'].value()}"
        raise ConfigError(
            f"shards={value} splits one evaluation; it does not combine with a sweep ({what}): run one "
            "sharded command per setting"
        )
    return [*argv, f"shard=range(0,{value})"]


def count(config: DictConfig) -> int | None:
    """How many shards the sweep `config` runs (None: it is not a sharded evaluation)."""
    shards = OmegaConf.select(config, "shards")
    overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task") or []]
    if shards is None or not any(o.split("=", 1)[0].lstrip("+~") == "shard" for o in overrides):
        return None
    return int(shards)


def finish(config: DictConfig, sweep_dir: Path, shards: int, parent: str | None) -> tuple[int, bool]:
    """The whole evaluation at the sweep's end, in the process that ran the sweep: its exit code, and
    whether every shard finished (else nothing is merged, and the sweep is left to resume)."""
    from evalframe.run import merged

    if merged.unfinished(sweep_dir, shards):
        return merged.incomplete(sweep_dir, shards), False
    tracking = OmegaConf.to_container(config.tracking, resolve=True)
    assert isinstance(tracking, dict)
    overrides = [str(o) for o in config.hydra.overrides.task]
    return merged.merge(sweep_dir, shards, {str(k): v for k, v in tracking.items()}, parent, overrides), True
