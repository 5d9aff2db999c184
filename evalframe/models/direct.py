"""Chat requests to an OpenAI-compatible server (model.api_base) on LiteLLM's lower-level path: the same
body LiteLLM would have the OpenAI SDK send, byte for byte, built with LiteLLM's own parameter mapping and
request transformation and sent on LiteLLM's pooled HTTP client; the reply read by LiteLLM's converter and
an error classified by its exception mapping, so the rest of the door (transport.py) sees what
`litellm.acompletion` would have given it.

Why: a local judge answers in 50-200 ms, and then the client's CPU per call is the bottleneck. Per call,
`acompletion` resolves the provider and maps the parameters again, hops to a worker thread to build the
call, has the SDK rebuild the body through its TypedDict transform, computes a price we do not use and
schedules its success logging; here the model's provider, URL, headers and parameters are worked out once,
and the call is a transform, a POST and a parse.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

from evalframe.models.loader import lib
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message


def usable(settings: ModelSettings) -> bool:
    """Whether a model's chat calls can take this path: an OpenAI-compatible server at model.api_base,
    with no extra LiteLLM arguments (those keep the whole of acompletion's handling)."""
    if not settings.api_base or settings.extra or settings.local:
        return False
    try:
        return str(lib().get_llm_provider(settings.name, api_base=settings.api_base)[1]) == "openai"
    except Exception:  # a name LiteLLM cannot place: acompletion says what is wrong with it
        return False


@functools.cache
def _body_order() -> dict[str, int]:
    """The order the OpenAI SDK writes a chat request's keys in (its create() builds the body from its
    parameters in this order; `stream` is only in the streaming variant's, before stream_options)."""
    from openai.types.chat import completion_create_params as params

    keys = list(params.CompletionCreateParamsBase.__annotations__)
    keys.insert(keys.index("stream_options"), "stream")
    return {k: i for i, k in enumerate(keys)}


def body(data: dict[str, Any]) -> bytes:
    """The request body as the SDK serialises it: its parameters in its order, then extra_body's keys,
    compact UTF-8 JSON (openai._utils._json.openapi_dumps)."""
    order = _body_order()
    extra = data.get("extra_body") or {}
    unknown = set(data) - set(order) - {"extra_body"}
    if unknown:
        raise ValueError(f"not a chat request parameter: {sorted(unknown)}")
    known = sorted((k for k in data if k != "extra_body"), key=order.__getitem__)
    payload = {**{k: data[k] for k in known}, **extra}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class Direct:
    """One OpenAI-compatible model's chat calls: what does not change between calls worked out once."""

    def __init__(self, settings: ModelSettings):
        litellm = lib()
        self.settings = settings
        self.model, _, _, _ = litellm.get_llm_provider(settings.name, api_base=settings.api_base)
        provider = litellm.LlmProviders.OPENAI
        self.config = litellm.ProviderConfigManager.get_provider_chat_config(self.model, provider)
        self.url = f"{str(settings.api_base).rstrip('/')}/chat/completions"
        key = settings.api_key()
        self.headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        }
        # by the id of the reply format (llm.response_format() gives one object per reply type), the
        # format kept with them: an id is only unique while its object lives
        self._params: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._pooled: tuple[asyncio.AbstractEventLoop, float, Any] | None = None  # loop, renewal, client

    def _optional(self, fmt: dict[str, Any] | None) -> dict[str, Any]:
        """LiteLLM's mapping of the call's parameters for this model, once per reply format."""
        known = self._params.get(id(fmt))
        if known is not None and known[0] is fmt:
            return dict(known[1])  # a copy: the transformation may change what it is given
        s = self.settings
        params = lib().get_optional_params(
            model=self.model,
            custom_llm_provider="openai",
            temperature=s.temperature,
            max_tokens=s.max_tokens or None,
            response_format=fmt,
            stream=None,  # as acompletion passes it when not streaming: not sent
            drop_params=True,
        )
        self._params[id(fmt)] = (fmt, params)
        return dict(params)

    def _client(self) -> Any:
        """LiteLLM's pooled async HTTP client for OpenAI, as its client cache holds it for this event
        loop: looked up again once a minute (the cache renews its clients), else kept."""
        loop, now, pooled = asyncio.get_running_loop(), time.monotonic(), self._pooled
        if pooled is None or pooled[0] is not loop or now > pooled[1] or pooled[2].is_closed:
            from litellm.llms.custom_httpx.http_handler import get_async_httpx_client

            handler = get_async_httpx_client(llm_provider=lib().LlmProviders.OPENAI)
            pooled = self._pooled = (loop, now + 60.0, handler.client)
        return pooled[2]

    async def complete(self, messages: list[Message], response_format: dict[str, Any] | None = None) -> Any:
        """One chat completion: a ModelResponse, or the LiteLLM exception acompletion would raise."""
        litellm = lib()
        data = await self.config.async_transform_request(
            model=self.model,
            messages=messages,
            optional_params=self._optional(response_format),
            litellm_params={},
            headers={},
        )
        content = body(data)
        client = self._client()
        try:
            timeout = self.settings.timeout
            reply = await client.post(self.url, content=content, headers=self.headers, timeout=timeout)
        except Exception as e:  # no reply: as the SDK says it (a timeout, else a connection error)
            raise _mapped(self.settings.name, _no_reply(e)) from None
        if reply.status_code >= 300:
            raise _mapped(self.settings.name, _status_error(reply))
        try:
            return _response(litellm, reply)
        except Exception as e:  # a 2xx that is no chat completion: as LiteLLM's OpenAI handler says it
            from litellm.llms.openai.common_utils import OpenAIError

            said = OpenAIError(
                getattr(e, "status_code", 500), getattr(e, "message", str(e)), headers=reply.headers
            )
            raise _mapped(self.settings.name, said) from None


def _status_error(reply: Any) -> Exception:
    """A non-2xx reply as LiteLLM's OpenAI handler reports the SDK's error (the SDK's
    _make_status_error_from_response): its message, the body's `error` object (or its text), the
    reply's headers."""
    from litellm.llms.openai.common_utils import OpenAIError

    text = reply.text.strip()
    try:
        parsed: Any = json.loads(text)
        message = f"Error code: {reply.status_code} - {parsed}"
    except ValueError:
        parsed, message = text, text or f"Error code: {reply.status_code}"
    return OpenAIError(
        status_code=reply.status_code,
        message=message,
        headers=reply.headers,
        response=reply,
        body=parsed.get("error", parsed) if isinstance(parsed, dict) else parsed,
    )


def _no_reply(error: Exception) -> Exception:
    """A request that got no reply, as LiteLLM's OpenAI handler reports the SDK's APITimeoutError or
    APIConnectionError."""
    import httpx
    from litellm.llms.openai.common_utils import OpenAIError

    said = "Request timed out." if isinstance(error, httpx.TimeoutException) else "Connection error."
    return OpenAIError(status_code=500, message=said)


def _mapped(model: str, error: Exception) -> Exception:
    """The exception acompletion would raise for `error` (LiteLLM's mapping to its exception classes)."""
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type

    try:
        returned = exception_type(model=model, custom_llm_provider="openai", original_exception=error)
    except Exception as mapped:
        return mapped
    return returned if isinstance(returned, Exception) else error


def _response(litellm: Any, reply: Any) -> Any:
    """A 2xx reply as a ModelResponse, with the headers where acompletion leaves them."""
    from litellm.litellm_core_utils.core_helpers import process_response_headers
    from litellm.litellm_core_utils.llm_response_utils.convert_dict_to_response import (
        convert_to_model_response_object,
    )

    headers = dict(reply.headers)
    response = convert_to_model_response_object(
        response_object=reply.json(),
        model_response_object=litellm.ModelResponse(),
        hidden_params={"headers": headers},
        _response_headers=headers,
    )
    # as LiteLLM's response metadata leaves them (response_metadata.py), which the rate limits read
    hidden = response._hidden_params
    hidden["additional_headers"] = process_response_headers(
        hidden.get("additional_headers") or {}, preserve_litellm_internal_headers=True
    )
    return response
