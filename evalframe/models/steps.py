"""The nouns of a model call: messages, usage and cost, one step's result, and a run's running totals
(calls, cache hits, cost, rate limits) that the model door keeps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from evalframe.models.limits import ModelLimits

Message = dict[str, str]  # one chat message: {"role": ..., "content": ...}


@dataclass
class Stats:
    """A run's running totals, for the progress bar and the summary."""

    calls: int = 0  # requests sent to a model, retries included
    hits: int = 0  # replies taken from the cache or shared with an identical request in flight
    cost: float = 0.0  # USD; NaN (unknown) once a model without a known price answered (pricing.Pricing)
    batched: int = 0  # requests sent through a batch API (model.batch=true), counted in calls too
    batch_cost: float = 0.0  # what those cost at the batch price (part of cost)
    unbatched_cost: float = 0.0  # what they would have cost as normal calls
    limits: dict[str, ModelLimits] = field(default_factory=dict)  # model name -> its rate limits
    unpriced: set[str] = field(default_factory=set)  # the models whose calls' cost is unknown
    # those of them served at a custom api_base (a local server, a proxy): why their price is unknown
    behind_api_base: set[str] = field(default_factory=set)

    def add_cost(self, cost: float, model: str, api_base: str | None = None) -> None:
        self.cost += cost
        if math.isnan(cost):
            self.unpriced.add(model)
            if api_base:
                self.behind_api_base.add(model)

    @property
    def rate_limited(self) -> int:
        """Requests answered 429 (rate limited) and sent again."""
        return sum(m.rate_limited for m in self.limits.values())

    @property
    def rate_wait(self) -> float:
        """Seconds requests to a model were held back by its cool-downs and budgets (per model)."""
        return sum(m.waited for m in self.limits.values())

    def throttled(self) -> str:
        """The in-flight limits below the run's concurrency ("" when none is), for the progress line."""
        low = [m for m in self.limits.values() if m.current < m.ceiling]
        return ", ".join(f"in flight ≤ {m.current} of {m.ceiling}" for m in low)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # USD, at the model's price in the config or LiteLLM's local price map; NaN when the model has no
    # known price (a sum with an unknown part is unknown); 0 for a cached reply: nothing was paid
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost + other.cost,
        )


def cut(text: str, limit: int, what: str) -> str:
    """`text` up to `limit` characters; a longer one keeps its head and says how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{what} cut: {len(text)} characters, the first {limit} kept]"


@dataclass
class StepResult:
    """One step of a scorer or target: a rendered prompt, the model's reply, and what it cost."""

    step: str
    messages: list[Message]
    reply: dict[str, Any] | None = None  # the validated structured reply
    raw: str | None = None  # the model's last raw text, kept for debugging unparseable replies
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    latency: float = 0.0  # seconds spent waiting for the model, all attempts
    error: str | None = None
    cached: bool = False  # served from the cache or shared with an identical request: no cost
    # The request's cache key (model, parameters, messages, schema): a re-score of a logged run
    # serves exactly the requests it made from its stored steps, and no other (evalframe.rescore).
    key: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.reply is not None

    def stored(self, limit: int) -> StepResult:
        """The step as results.jsonl and MLflow keep it: a raw reply longer than `limit` characters is
        dropped when its validated reply holds it already (the cache keeps the full text), else cut
        to its head and its original size. A message longer than that is cut too: it is rendered from
        the item and the earlier steps' replies, all stored (a reason step's prompt quotes the whole
        analysis). A 5 MB judge reply is then stored once, as the validated reply."""
        raw = self.raw
        if raw is not None and len(raw) > limit:
            raw = None if self.ok else cut(raw, limit, "raw reply")
        messages = [{**m, "content": cut(m["content"], limit, "message")} for m in self.messages]
        return replace(self, raw=raw, messages=messages)
