"""What a model's calls cost in USD: at the config's price, else at LiteLLM's, unknown (NaN) when
neither is known, never a guess."""

from __future__ import annotations

import math
from typing import Any, cast

from evalframe.models.loader import lib
from evalframe.models.settings import ModelSettings


def configured(settings: ModelSettings) -> dict[str, float] | None:
    """What a token costs as the config says (LiteLLM's custom_cost_per_token), if it says: a price
    left null counts 0 once the other is set (an embedding model has no output tokens). A local model
    (local/...) is free."""
    if settings.input_cost_per_token is None and settings.output_cost_per_token is None:
        return {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0} if settings.local else None
    return {
        "input_cost_per_token": float(settings.input_cost_per_token or 0.0),
        "output_cost_per_token": float(settings.output_cost_per_token or 0.0),
    }


def known(settings: ModelSettings) -> bool:
    """Whether what a call costs is known: the config gives a price (or the model is local), or
    LiteLLM has a price for the model and it is served by its provider. Behind a custom api_base the
    name says nothing of the price (a local server, a proxy, a fine-tune under a known name), so it
    is unknown rather than guessed."""
    if configured(settings) is not None:
        return True
    if settings.api_base:
        return False
    try:
        return lib().get_model_info(settings.name).get("input_cost_per_token") is not None
    except Exception:  # a model LiteLLM has no facts about
        return False


class Pricing:
    """What one model's calls cost in USD, whether it is known decided once per model (`known`)."""

    def __init__(self, settings: ModelSettings):
        self.name = settings.name
        self.custom = configured(settings)
        self.known = known(settings)

    def of(self, response: Any) -> float:
        """What a completion or an embedding call cost."""
        if not self.known:
            return math.nan
        if self.custom is None:
            cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
            return math.nan if cost is None else float(cost)
        usage = getattr(response, "usage", None)
        tokens = {k: getattr(usage, k, 0) or 0 for k in ("prompt_tokens", "completion_tokens")}
        return sum(lib().cost_per_token(model=self.name, custom_cost_per_token=self.custom, **tokens))

    def batched(self, usage: Any) -> tuple[float, float]:
        """What a request sent in a batch cost at the batch price (LiteLLM's batch rates, else half the
        normal price), and what it would have cost as a normal call."""
        if not self.known:
            return math.nan, math.nan
        litellm = lib()
        tokens = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
        try:
            full = sum(litellm.cost_per_token(model=self.name, custom_cost_per_token=self.custom, **tokens))
            info = cast(Any, self.custom)  # the config's price in place of LiteLLM's, when it gives one
            cost = sum(litellm.cost_calculator.batch_cost_calculator(usage, self.name, model_info=info))
        except Exception:  # LiteLLM could not price this reply after all: unknown, not 0
            return math.nan, math.nan
        return cost, full
