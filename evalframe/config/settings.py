"""The run's config, typed: what `config.check.check` returns once the composed config is valid, read by
attribute by the run's lifecycle (evalframe.run). The defaults are conf/config.yaml's (and
conf/tracking/mlflow.yaml's), mirrored here only so a config built in code (the Python API, a test)
reads the same; tests/test_config.py holds the two equal. The groups a user extends with keys of their
own (dataset, target, scorers, model, penalties) stay mappings, read by the modules that own them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    StrictBool,
)

Share = Annotated[float, Field(ge=0, le=1)]


class _Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")  # a node's own keys of a newer conf/: kept


class Tracking(_Node):
    enabled: bool = True
    uri: str | None = "sqlite:///mlflow.db"  # None: tracking=none
    experiment: str | None = "evalframe"  # a trace dataset's: its traces' experiment
    run_name: str | None = None
    traces: bool = True  # each item's judge calls as MLflow traces
    max_traces: NonNegativeInt | None = 200
    feedback: StrictBool = True  # verdicts onto the traces a run's rows came from ("no" would read as true)


class Cache(_Node):
    mode: Literal["readwrite", "read", "write", "off"] = "readwrite"
    dir: str | None = None


class Gate(_Node):
    min_score: dict[str, float | None] = Field(default_factory=dict)
    max_score: dict[str, float | None] = Field(default_factory=dict)
    min_pass_rate: dict[str, float | None] = Field(default_factory=dict)
    pass_threshold: float | dict[str, float] = 0.5


class Watch(_Node):
    every: str | float | None = None
    settle: str | float = "300s"
    ticks: PositiveInt | None = None
    lookback: str | float = "24h"


class Objective(_Node):
    metric: str | None = None
    direction: Literal["maximize", "minimize"] = "maximize"


class Tune(_Node):
    holdout: Share | None = None
    seed: int = 0
    part: Literal["tune", "holdout"] = "tune"


class RunSettings(BaseModel):
    """The whole config; an unknown top-level key is refused (a typo would otherwise run the defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: dict[str, Any] = Field(default_factory=dict)
    target: dict[str, Any] = Field(default_factory=dict)
    scorers: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    penalties: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    tracking: Tracking = Tracking()
    cache: Cache = Cache()
    gate: Gate = Gate()
    watch: Watch = Watch()
    objective: Objective = Objective()
    tune: Tune = Tune()
    concurrency: PositiveInt = 8  # 0 would wait forever for a free slot
    window: PositiveInt | None = 2000
    keep_items: NonNegativeInt | None = 2000
    repeats: PositiveInt = 1
    max_judgments: PositiveInt | None = 100000
    raw_reply_limit: PositiveInt = 20000
    reason: Literal["analysis", "llm"] = "analysis"
    resume: bool | str | None = None
    shards: PositiveInt | None = None
    shard: NonNegativeInt | None = None
    max_unscored_rate: Share = 0.1
    agreement_threshold: Share = 0.5

    @classmethod
    def of_record(cls, config: dict[str, Any]) -> RunSettings:
        """The settings of a config a run recorded (its run.json), checked when it ran: the keys this
        evalframe reads (one it no longer has, an older run's `rescore`, is left out)."""
        return cls.model_validate({k: v for k, v in config.items() if k in cls.model_fields})
