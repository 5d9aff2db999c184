"""Whether LiteLLM can place a model string (`openai/gpt-4o`: provider / model), asked before any work.

A name it cannot place (a typo in the provider, `opnai/gpt-4o`; a provider registered only inside the
tests, `scripted/judge`; no provider at all) would otherwise fail on every call of the run with
LiteLLM's "LLM Provider NOT provided" and end with exit code 4; it is a config error, found first.
"""

from __future__ import annotations

from difflib import SequenceMatcher, get_close_matches

from evalframe.errors import ConfigError
from evalframe.models.loader import lib


def known() -> list[str]:
    """LiteLLM's providers, and those registered with it as custom providers (`local/`, the tests'
    `scripted/`): litellm.custom_provider_map, also before custom_llm_setup() adds them to its list."""
    litellm = lib()
    names = [getattr(p, "value", str(p)) for p in litellm.provider_list]
    return [*names, *(str(p.get("provider")) for p in litellm.custom_provider_map)]


def check(name: str, api_base: str | None, key: str = "model") -> None:
    """A ConfigError naming `key`.name and the nearest providers when LiteLLM cannot place `name`."""
    provider, slash, model = name.partition("/")
    providers = known()
    if slash and provider in providers:
        return
    try:
        lib().get_llm_provider(name, api_base=api_base)
        return  # a bare name LiteLLM knows (gpt-4o is OpenAI's)
    except Exception:  # LiteLLM's BadRequestError: "LLM Provider NOT provided"
        pass
    example = "e.g. openai/gpt-4o-mini, anthropic/..., gemini/..., ollama_chat/..."
    if not slash:
        raise ConfigError(
            f"{key}.name={name}: LiteLLM cannot tell its provider; write it as PROVIDER/MODEL ({example}; "
            f"an OpenAI-compatible server at {key}.api_base: openai/{name})"
        )
    near = get_close_matches(provider, providers, n=3, cutoff=0.6)
    # the nearest, and those nearly as near (opnai: openai, not openai_like or topaz)
    near = [p for p in near if _alike(provider, p) >= _alike(provider, near[0]) - 0.1]
    said = " or ".join(f"{p}/{model}" for p in near)
    raise ConfigError(
        f"{key}.name={name}: {provider!r} is not one of LiteLLM's providers; "
        + (f"did you mean {said}?" if near else f"write it as PROVIDER/MODEL ({example})")
    )


def _alike(a: str, b: str) -> float:
    return SequenceMatcher(None, a, b).ratio()
