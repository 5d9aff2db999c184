"""A model as the config describes it (the `model` group, a target's model, an embedding model): its
keys checked, its credentials, and what follows from it for each call (the call's arguments, how long
it may take or be waited for, the model's rate-limit budgets)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalframe.errors import ConfigError
from evalframe.models import providers
from evalframe.models.limits import ModelLimits, parallel_jobs
from evalframe.models.loader import lib


@dataclass(frozen=True)
class ModelSettings:
    """A model as the `model` config group describes it."""

    name: str
    api_key_env: str | None = None
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout: float = 60.0
    max_retries: int = 3  # transport: server error, timeout, dropped connection (429s have their own)
    reply_retries: int = 2  # an invalid reply given back to the model with what is wrong with it
    extra: Mapping[str, Any] = field(default_factory=dict)
    rpm: float | None = None  # requests per minute this client keeps under (a sweep's jobs share it)
    tpm: float | None = None  # tokens per minute, likewise
    batch: bool = False  # through the provider's batch API at half price (evalframe.batch)
    batch_poll: float = 30.0  # seconds between two looks at a pending batch
    input_cost_per_token: float | None = None  # USD: the model's price as the user knows it (both null:
    output_cost_per_token: float | None = None  # LiteLLM's price, when it has one; see pricing.py)

    def __hash__(self) -> int:  # `extra` is a dict; settings key the per-model client cache (per call:
        # the fields as they are, only `extra` serialised)
        return hash(
            tuple(
                json.dumps(v, sort_keys=True, default=str) if isinstance(v, Mapping) else v
                for v in (getattr(self, name) for name in self.__dataclass_fields__)
            )
        )

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], key: str = "model") -> ModelSettings:
        """The settings of the model at `key` in the config (named in the errors)."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ConfigError(f"unknown model setting(s) {unknown}; known: {sorted(known)}")
        if not cfg.get("name"):
            raise ConfigError(
                "model.name is empty; set it to a LiteLLM model string, e.g. openai/gpt-4o-mini"
            )
        for budget in ("rpm", "tpm"):
            value = cfg.get(budget)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not (number and value > 0):
                raise ConfigError(f"model.{budget}={value!r}: give a number above 0, or null for no budget")
        for price in ("input_cost_per_token", "output_cost_per_token"):
            value = cfg.get(price)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not (number and value >= 0):
                raise ConfigError(
                    f"{key}.{price}={value!r}: give USD per token (e.g. 1.5e-7; 0 for a free model), "
                    "or null for LiteLLM's price"
                )
        return cls(**{k: v for k, v in cfg.items() if v is not None or k in ("api_key_env", "api_base")})

    def api_key(self) -> str | None:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if not key and self.api_base:
            # A self-hosted OpenAI-compatible server usually needs no key, but the OpenAI client
            # refuses to start without one.
            return "no-key"
        return key or None

    def check_credentials(self, key: str = "model", pick: str | None = None) -> None:
        """Fail before any work if LiteLLM cannot place the model's name (a provider's typo), or the
        key is missing, naming the variable and the alternatives.

        `key` is where this model sits in the config: `model` (the judge) or `target.model`; `pick`
        how another preset is chosen there (`model=`, `model@target.model=`, or `KEY=` for a key
        that names a preset, like target.simulate.user_model).
        """
        pick = pick or ("model=" if key == "model" else f"model@{key}=")
        providers.check(self.name, self.api_base, key)
        if self.batch and lib().get_llm_provider(self.name)[1] not in ("openai", "anthropic"):
            # evalframe.batch drives OpenAI's Batch API and Anthropic's Message Batches; Gemini (AI
            # Studio) and Ollama have no batch API that LiteLLM drives.
            raise ConfigError(
                f"{key}.batch=true: batches go through OpenAI's Batch API or Anthropic's Message Batches, "
                f"and {self.name} is neither; use {pick}gpt (or an OpenAI-compatible {key}.api_base) or "
                f"{pick}claude, or {key}.batch=false"
            )
        if self.api_key_env and not os.environ.get(self.api_key_env) and not self.api_base:
            raise ConfigError(
                f"{self.api_key_env} is not set, and the model {self.name} ({key}) needs it. "
                f"Set it (export {self.api_key_env}=...), or choose another model: {pick}claude "
                f"(ANTHROPIC_API_KEY), {pick}gemini (GEMINI_API_KEY), {pick}ollama (local, no key), "
                f"or {pick}local (an OpenAI-compatible server, no key: {key}.api_base=http://HOST:PORT/v1)"
            )

    @property
    def local(self) -> bool:
        """Served in this process (local_embeddings), at no price."""
        from evalframe.models.local_embeddings import PROVIDER

        return self.name.startswith(f"{PROVIDER}/")

    def deadline(self) -> float:
        """Seconds a request may keep waiting out 429s (and trying again) from its first attempt."""
        return self.timeout * (1 + self.max_retries)

    def patience(self) -> float:
        """How long another process may hold a claim on a request before this one asks itself: the
        longest a live process can take to get its reply (every attempt timing out, plus backoff)."""
        return (self.timeout + 30.0) * (self.max_retries + self.reply_retries + 1)

    def limits(self, concurrency: int) -> ModelLimits:
        """This process's rate limits for the model: a parallel sweep's jobs split the budgets, and
        no wait the provider asks for outlasts a request's deadline."""
        share = parallel_jobs()
        return ModelLimits(
            concurrency,
            rpm=self.rpm / share if self.rpm else None,
            tpm=self.tpm / share if self.tpm else None,
            horizon=self.deadline(),
        )

    def call_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "temperature": self.temperature,
            "timeout": self.timeout,
            "max_retries": 0,  # retries are ours (backoff, Retry-After), not the provider SDK's
            **dict(self.extra),
        }
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = self.api_key()
        if key:
            kwargs["api_key"] = key
        return kwargs


def missing_keys(model: str) -> list[str]:
    """Environment variables a provider needs for `model` that are not set (none for local/...)."""
    from evalframe.models.local_embeddings import PROVIDER

    if model.startswith(f"{PROVIDER}/"):
        return []
    return list(lib().validate_environment(model=model).get("missing_keys") or [])
