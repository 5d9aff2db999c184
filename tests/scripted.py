"""An in-process scripted model that enters through LiteLLM's own door, as a custom provider.

`model.name=scripted/judge` reaches it through evalframe's model door and LiteLLM exactly as a real
model is reached (request building, response_format, usage, exceptions, retries), minus the socket:
the unit tests run on it, and the HTTP server (tests/testserver.py) stays for the tests of the wire
protocols themselves and of the command line as a subprocess. It takes the server's responders
(`FakeRequest -> str | dict | Fault`), so a test's judge is the same whichever it talks to, and it is
as hard on evalframe as the server: a responder may reply anything, fail or stall.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tests.testserver import (
    FakeRequest,
    Fault,
    RequestLog,
    Responder,
    _tokens,
    echo_schema_responder,
    embed,
)

PROVIDER = "scripted"
NAME = f"{PROVIDER}/judge"
EMBED = f"{PROVIDER}/embed"  # any scripted/... name embeds; this one has a price

_STATUS_ERRORS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
}


class ScriptedModel(RequestLog):
    """A responder, and what it was asked, logged as the server logs it (RequestLog)."""

    def __init__(self, responder: Responder = echo_schema_responder, latency: float = 0.0):
        super().__init__()
        self.responder = responder
        self.latency = latency

    def _record(self, request: FakeRequest) -> None:
        with self._lock:
            self.requests.append(request)

    async def _fail(self, litellm: Any, fault: Fault, model: str, timeout: float | None) -> None:
        """Raise what a provider's failure becomes after LiteLLM, with its headers (Retry-After)."""
        with self._lock:
            self.faults += 1
        if timeout is not None and fault.delay >= timeout:
            await asyncio.sleep(timeout)
            raise litellm.Timeout(
                f"scripted: no reply within {timeout} s", model=model, llm_provider=PROVIDER
            )
        await asyncio.sleep(fault.delay)
        headers = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
        request = httpx.Request("POST", "http://scripted.invalid/v1/chat/completions")
        response = httpx.Response(fault.status, headers=headers, request=request, text=fault.body or "")
        error = getattr(litellm, _STATUS_ERRORS.get(fault.status, "InternalServerError"))
        message = f"scripted {fault.status}"
        if error is litellm.BadRequestError:
            raise error(message, model=model, llm_provider=PROVIDER, response=response)
        raise error(message, llm_provider=PROVIDER, model=model, response=response)

    def provider(self, litellm: Any) -> Any:
        """The LiteLLM custom handler serving this model."""
        scripted = self

        class Handler(litellm.CustomLLM):
            async def acompletion(self, model: str, messages: list[dict], *args: Any, **kwargs: Any) -> Any:
                options = kwargs.get("optional_params") or {}
                fmt = (options.get("response_format") or {}).get("json_schema") or {}
                request = FakeRequest(
                    protocol="openai",
                    path=PROVIDER,
                    model=model,
                    messages=[{"role": m["role"], "content": str(m.get("content") or "")} for m in messages],
                    schema_name=fmt.get("name"),
                    schema=fmt.get("schema"),
                    inputs=[],
                    body={"model": model, "messages": messages, **options},
                    headers={},
                )
                await asyncio.sleep(scripted.latency)
                reply = scripted.responder(request)
                if asyncio.iscoroutine(reply):  # a responder that waits for something, not for a clock
                    reply = await reply
                if isinstance(reply, Fault):
                    await scripted._fail(litellm, reply, model, kwargs.get("timeout"))
                scripted._record(request)  # answered requests only, as the server logs them
                text = reply if isinstance(reply, str) else json.dumps(reply)
                n_in = _tokens(" ".join(m["content"] for m in request.messages))
                return litellm.ModelResponse(
                    model=model,
                    choices=[
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    usage={"prompt_tokens": n_in, "completion_tokens": _tokens(text), "total_tokens": n_in},
                )

            async def aembedding(
                self, model: str, input: list, model_response: Any, *args: Any, **kwargs: Any
            ) -> Any:
                texts = [input] if isinstance(input, str) else list(input)
                scripted._record(FakeRequest("embeddings", PROVIDER, model, [], None, None, texts, {}, {}))
                await asyncio.sleep(scripted.latency)
                model_response.data = [
                    {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)
                ]
                tokens = sum(_tokens(t) for t in texts)
                model_response.usage = litellm.Usage(prompt_tokens=tokens, total_tokens=tokens)
                return model_response

        return Handler()


def install(model: ScriptedModel) -> None:
    """Register `scripted/` with the litellm evalframe uses (its one importing module configures it)."""
    from evalframe.models import loader

    litellm = loader.lib()
    # Priced like gpt-4o-mini, so cost accounting is exercised as with a real judge.
    price = {"input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7, "litellm_provider": PROVIDER}
    price |= {"cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0}
    litellm.register_model({NAME: {**price, "mode": "chat"}})
    # An embedding model priced like text-embedding-3-small: its cost counts in a run's cost too.
    embedding = {"input_cost_per_token": 2e-8, "output_cost_per_token": 0.0, "litellm_provider": PROVIDER}
    litellm.register_model({EMBED: {**embedding, "mode": "embedding"}})
    litellm.custom_provider_map[:] = [p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER]
    litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": model.provider(litellm)})
    litellm.utils.custom_llm_setup()


def overrides(option: str = "model") -> list[str]:
    """The overrides that make `option` (the judge, or target.model) the scripted model."""
    return [
        f"{option}.name={NAME}",
        f"{option}.api_key_env=null",
        f"{option}.api_base=null",
        f"{option}.timeout=10",
    ]
