"""The two batch APIs a judge can be batched through, as one interface: OpenAI's Batch API (through
LiteLLM's batch and file functions) and Anthropic's Message Batches (its own HTTP paths): how a request
is written, a batch created or cancelled, and a result file read back, line by line."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any, Protocol

from evalframe.models.loader import lib
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

ENDPOINT = "/v1/chat/completions"


class Batching(Protocol):
    """What a wire needs of the batcher that drives it."""

    model: str
    settings: ModelSettings

    async def _call(self, fn: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any: ...


class BatchError(Exception):
    """A request the batch did not answer (the item is unscored with this reason)."""


class OpenAIWire:
    """OpenAI's Batch API, wholly through LiteLLM: a JSONL of chat requests is uploaded and a batch
    created on it; the batch's output and error files hold the answers."""

    provider = "openai"

    def request(self, batcher: Batching, messages: list[Message], params: dict[str, Any]) -> dict[str, Any]:
        """The body of one request, as a normal call would send it."""
        s = batcher.settings
        return {
            "model": batcher.model,
            "messages": messages,
            "temperature": s.temperature,
            **({"max_tokens": s.max_tokens} if s.max_tokens else {}),
            **dict(s.extra),
            **params,
        }

    async def create(self, batcher: Batching, requests: dict[str, dict[str, Any]]) -> str:
        """Create a batch of these requests (by request id); its id."""
        litellm = lib()
        lines = [
            json.dumps({"custom_id": rid, "method": "POST", "url": ENDPOINT, "body": body})
            for rid, body in requests.items()
        ]
        upload = await batcher._call(
            litellm.acreate_file, file=("evalframe-batch.jsonl", "\n".join(lines).encode()), purpose="batch"
        )
        created = await batcher._call(
            litellm.acreate_batch, completion_window="24h", endpoint=ENDPOINT, input_file_id=upload.id
        )
        return str(created.id)

    async def cancel(self, batcher: Batching, batch_id: str) -> None:
        await batcher._call(lib().acancel_batch, batch_id=batch_id)

    def answers(self, content: bytes) -> dict[str, dict[str, Any]]:
        """A results file's answer lines by request id, in OpenAI's shape: `response` (`status_code`,
        `body`), or `error` for a request that was not answered. A line that is no answer (not JSON,
        not an object, no custom_id, a response or error that is not an object) is left out: its
        request is sent again, as one not answered."""
        answers: dict[str, dict[str, Any]] = {}
        for text in content.decode(errors="replace").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            readable = isinstance(line, dict) and isinstance(line.get("custom_id"), str)
            if readable and all(isinstance(line.get(part) or {}, dict) for part in ("response", "error")):
                answers[line["custom_id"]] = line
        return answers

    def response(self, body: dict[str, Any], params: dict[str, Any]) -> Any:
        """An answer's body as LiteLLM's ModelResponse, as a normal call returns it."""
        return lib().ModelResponse(**body)

    def mapped(self, error: Exception, model: str) -> Exception:
        """LiteLLM's exception for an error its batch functions let through unmapped (the OpenAI SDK's;
        on Anthropic's paths httpx's or its AnthropicError), so that a 5xx is retried and a refused key
        ends the run, as on a normal call."""
        try:
            return lib().utils.exception_type(
                model=model, original_exception=error, custom_llm_provider=self.provider
            )
        except Exception as e:  # it raises the mapped exception (and returns one of LiteLLM's as it is)
            return e


class AnthropicWire(OpenAIWire):
    """Anthropic's Message Batches. LiteLLM 1.106 retrieves them (aretrieve_batch) and reads their results
    (afile_content with the batch id: Anthropic's own JSONL, converted here), but cannot create one: its
    create_batch has no Anthropic path (BerriAI/litellm#17265). So that one call is made by hand: each
    request's body is built by LiteLLM's own Anthropic transformation from the parameters a normal call
    passes, and the URL and headers come from LiteLLM's Anthropic batch config."""

    provider = "anthropic"

    def __init__(self) -> None:
        self.betas: set[str] = set()  # the anthropic-beta features the requests need (structured output)

    def request(self, batcher: Batching, messages: list[Message], params: dict[str, Any]) -> dict[str, Any]:
        litellm = lib()
        drop = ("model", "timeout", "max_retries", "api_base", "api_key")  # not in the body
        kwargs = {k: v for k, v in batcher.settings.call_kwargs().items() if k not in drop}
        messages = copy.deepcopy(messages)  # as LiteLLM's handler does: the transformation may edit them
        optional = litellm.utils.get_optional_params(
            model=batcher.model, custom_llm_provider="anthropic", messages=messages, **kwargs, **params
        )
        optional.pop("json_mode", None)  # how LiteLLM reads the reply (see response), not part of the body
        headers: dict[str, str] = {}
        body = litellm.AnthropicConfig().transform_request(
            model=batcher.model,
            messages=messages,
            optional_params=optional,
            litellm_params={},
            headers=headers,
        )
        headers, body = litellm.anthropic_beta_headers_manager.update_request_with_filtered_beta(
            headers=headers, request_data=body, provider="anthropic"
        )
        self.betas.update(b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip())
        return dict(body)

    async def create(self, batcher: Batching, requests: dict[str, dict[str, Any]]) -> str:
        payload = {"requests": [{"custom_id": rid, "params": body} for rid, body in requests.items()]}
        return str((await self._post(batcher, "", payload))["id"])

    async def cancel(self, batcher: Batching, batch_id: str) -> None:
        """LiteLLM 1.106's acancel_batch has no Anthropic path either."""
        await self._post(batcher, f"/{batch_id}/cancel", None)

    async def _post(self, batcher: Batching, path: str, payload: dict[str, Any] | None) -> Any:
        """POST to the Message Batches URL (+ `path`) with the headers LiteLLM's batch config gives;
        the reply's JSON."""
        litellm = lib()
        s = batcher.settings
        config = litellm.llms.anthropic.batches.transformation.AnthropicBatchesConfig()
        url = config.get_complete_batch_url(
            api_base=s.api_base, api_key=None, model="", optional_params={}, litellm_params={}, data={}
        )
        betas = {"anthropic-beta": ",".join(sorted(self.betas))} if self.betas else {}

        async def post(api_key: str | None = None, **_: Any) -> Any:
            # x-api-key (or the bearer token), anthropic-version, and anthropic-beta with the batches beta
            headers = config.validate_environment(
                headers=betas, model="", messages=[], optional_params={}, litellm_params={}, api_key=api_key
            )
            client = litellm.llms.custom_httpx.http_handler.get_async_httpx_client(
                llm_provider=litellm.LlmProviders.ANTHROPIC
            )
            response = await client.post(url + path, json=payload, headers=headers, timeout=s.timeout)
            return response.json()

        return await batcher._call(post)

    def answers(self, content: bytes) -> dict[str, dict[str, Any]]:
        codes = lib().llms.anthropic.common_utils.ANTHROPIC_ERROR_STATUS_CODE_MAP
        answers: dict[str, dict[str, Any]] = {}
        for rid, line in super().answers(content).items():
            result = line.get("result")
            result = result if isinstance(result, dict) else {}
            kind = result.get("type")
            if kind == "succeeded" and isinstance(result.get("message"), dict):
                answers[rid] = {"response": {"status_code": 200, "body": result["message"]}}
            elif kind == "errored":  # {"type": "error", "error": {"type": "overloaded_error", "message"}}
                error = (result.get("error") or {}).get("error") or {}
                status = codes.get(error.get("type"), 500)
                answers[rid] = {"response": {"status_code": status, "body": {"error": error}}}
            else:  # canceled, expired, or no result to read: not answered (sent again)
                said = kind if kind in ("canceled", "expired") else "no result to read"
                answers[rid] = {"error": {"message": said}}
        return answers

    def response(self, body: dict[str, Any], params: dict[str, Any]) -> Any:
        import httpx

        litellm = lib()
        return litellm.AnthropicConfig().transform_parsed_response(
            completion_response=body,
            raw_response=httpx.Response(200),
            model_response=litellm.ModelResponse(),
            json_mode="response_format" in params,  # a forced tool's input becomes the message content
        )

    def mapped(self, error: Exception, model: str) -> Exception:
        response = getattr(error, "response", None)
        if type(error).__name__ == "HTTPStatusError" and response is not None:  # wrapped as its handler does
            error = lib().llms.anthropic.common_utils.AnthropicError(
                status_code=response.status_code, message=response.text, headers=response.headers
            )
        return super().mapped(error, model)
