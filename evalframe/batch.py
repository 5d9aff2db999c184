"""Batch judging (`model.batch=true`): a model's requests go through the provider's batch API, at half
the normal price, for evaluations where waiting minutes or hours is fine. OpenAI's Batch API (and any
OpenAI-compatible server that has it), through LiteLLM's file and batch functions. Not Anthropic's
Message Batches: LiteLLM 1.106 can retrieve them and read their results but not create one, so
ModelSettings.check_credentials refuses `batch=true` on any other provider before the run starts.

Only the transport differs from a normal call: the same prompts, the same validation, the same cache
(the model door asks the batcher only for what the cache does not hold). Requests are gathered while
the run makes them; once none has come for `LINGER` seconds they go as one batch (a JSONL file
uploaded, a batch created), so one step of every item in flight travels together and a step that
depends on it (extract -> analyze) goes in the next batch. A reply that fails validation goes back to
the model in the next batch, as a normal call would (`reply_retries` times); a request the provider
answered with a transient error (429, 5xx) is sent again in the next batch (`max_retries` times);
then the item is unscored with the reason.

Each batch's id and its requests' ids are appended to `batches.jsonl` in the run directory the moment
the batch exists: a run killed while waiting and resumed with `resume=true` collects those batches
instead of paying for the same requests again.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from evalframe.cache import key as cache_key
from evalframe.llm import ModelRejected, ModelSettings, Pricing, _transient_errors, lib
from evalframe.results import Message, Stats
from evalframe.retry import with_retries

BOOK = "batches.jsonl"  # in the run directory: one line per batch, written as soon as it is created
LINGER = 0.2  # seconds without a new request before the gathered ones go as a batch
ENDPOINT = "/v1/chat/completions"
RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
FINAL = {"failed", "expired", "cancelled", "cancelling"}
T = TypeVar("T")


class BatchError(Exception):
    """A request the batch did not answer (the item is unscored with this reason)."""


class Batcher:
    """One model's batches: `complete(messages, **params)` returns the chat completion as a normal call
    would (LiteLLM's ModelResponse), priced at the batch rate."""

    def __init__(self, settings: ModelSettings, stats: Stats, run_dir: Path | None):
        # LiteLLM 1.106's afile_content makes one coroutine too many and drops it (the content comes
        # all the same): its "never awaited" warning would reach the user's console on every batch.
        warnings.filterwarnings("ignore", "coroutine 'OpenAIFilesAPI.afile_content' was never awaited")
        self.settings = settings
        self.stats = stats
        self.book = run_dir / BOOK if run_dir else None
        self.model = lib().get_llm_provider(settings.name)[0]  # the name on the wire
        self.pricing = Pricing(settings)
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._journaled = self._read_book()  # request id -> id of the batch it went in (a killed run's)
        self._collecting: dict[str, asyncio.Task[dict[str, dict[str, Any]]]] = {}

    async def complete(self, messages: list[Message], **params: Any) -> Any:
        s = self.settings
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": s.temperature,
            **({"max_tokens": s.max_tokens} if s.max_tokens else {}),
            **dict(s.extra),
            **params,
        }
        request_id = cache_key(body)
        retries = s.max_retries
        while True:
            if request_id in self._journaled:  # sent by the run that was killed: collect, don't resend
                batch_id = self._journaled.pop(request_id)
                if batch_id not in self._collecting:
                    self._collecting[batch_id] = asyncio.ensure_future(self._wait(batch_id))
                try:
                    answers = await asyncio.shield(self._collecting[batch_id])
                except BatchError as e:  # it failed or expired meanwhile: sent again in a new batch
                    answers = {request_id: {"error": {"message": str(e)}}}
                line = answers.get(request_id) or {"error": {"message": "not in the batch's output"}}
            else:
                line = await self._submit(request_id, body)
            response = line.get("response") or {}
            status = response.get("status_code")
            if status == 200:
                return self._priced(response["body"])
            if (status in RETRYABLE or status is None) and retries > 0:
                retries -= 1  # sent again in the next batch
                continue
            detail = (response.get("body") or {}).get("error") or line.get("error") or {}
            raise BatchError(f"the batch answered {status or 'nothing'}: {str(detail.get('message'))[:300]}")

    def _submit(self, request_id: str, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Add a request to the batch being gathered; its answer line once the batch is done."""
        if request_id in self._pending:  # the same request twice in one batch: asked once
            return self._pending[request_id][1]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (body, future)
        if self._timer:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(LINGER, self._go)
        return future

    def _go(self) -> None:
        batch, self._pending, self._timer = self._pending, {}, None
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]]) -> None:
        litellm = lib()
        try:
            lines = [
                json.dumps({"custom_id": rid, "method": "POST", "url": ENDPOINT, "body": body})
                for rid, (body, _) in batch.items()
            ]
            upload = await self._call(
                litellm.acreate_file,
                file=("evalframe-batch.jsonl", "\n".join(lines).encode()),
                purpose="batch",
            )
            created = await self._call(
                litellm.acreate_batch, completion_window="24h", endpoint=ENDPOINT, input_file_id=upload.id
            )
            self._write_book(created.id, list(batch))
            print(f"batch {created.id} ({self.settings.name}): submitted {len(batch)}", file=sys.stderr)
            self.stats.batched += len(batch)
            self.stats.calls += len(batch)
            answers = await self._wait(created.id)
        except BaseException as e:  # every request of the batch fails alike (a rejected key ends the run)
            for _, future in batch.values():
                if not future.done():
                    future.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        for rid, (_, future) in batch.items():
            if not future.done():
                future.set_result(answers.get(rid) or {"error": {"message": "not in the batch's output"}})

    async def _wait(self, batch_id: str) -> dict[str, dict[str, Any]]:
        """Poll the batch until it is done, saying how it goes; its answer lines by request id."""
        litellm = lib()
        started, said, last_said = time.monotonic(), None, 0.0
        while True:
            batch = await self._call(litellm.aretrieve_batch, batch_id=batch_id)
            counts = batch.request_counts
            state = (batch.status, getattr(counts, "completed", 0), getattr(counts, "failed", 0))
            waited = time.monotonic() - started
            if state != said or waited - last_said >= 60:
                print(
                    f"batch {batch_id} ({self.settings.name}): {batch.status}, "
                    f"{state[1]} of {getattr(counts, 'total', '?')} completed, {state[2]} failed; "
                    f"waited {waited:.0f} s",
                    file=sys.stderr,
                )
                said, last_said = state, waited
            if batch.status == "completed":
                break
            if batch.status in FINAL:
                raise BatchError(f"batch {batch_id} {batch.status}: {batch.errors or 'no reason given'}")
            await asyncio.sleep(self.settings.batch_poll)
        answers: dict[str, dict[str, Any]] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await self._call(litellm.afile_content, file_id=file_id)
                for line in content.content.decode().splitlines():
                    if line.strip():
                        answer = json.loads(line)
                        answers[answer["custom_id"]] = answer
        return answers

    async def _call(self, fn: Callable[..., Awaitable[T]], **kwargs: Any) -> T:
        """One call of LiteLLM's file and batch API, retried like a completion; a refused key ends the run."""
        litellm = lib()
        s = self.settings
        where = {"custom_llm_provider": "openai", "timeout": s.timeout, "api_base": s.api_base}
        key = s.api_key()
        if key:
            where["api_key"] = key

        async def attempt() -> T:
            try:
                return await fn(**kwargs, **{k: v for k, v in where.items() if v is not None})
            except (litellm.AuthenticationError, litellm.PermissionDeniedError) as e:
                raise ModelRejected(
                    f"the batch API of {s.name} rejected the request ({type(e).__name__}): {str(e)[:300]}"
                ) from None

        transient = _transient_errors(litellm)
        return await with_retries(attempt, s.max_retries, lambda e: isinstance(e, transient))

    def _priced(self, body: dict[str, Any]) -> Any:
        """The answer as LiteLLM's ModelResponse, its cost at the batch price (NaN when the model's price
        is unknown), and what it would have cost as a normal call."""
        response = lib().ModelResponse(**body)
        cost, full = self.pricing.batched(response.usage)
        response._hidden_params["response_cost"] = cost
        self.stats.batch_cost += cost
        self.stats.unbatched_cost += full
        return response

    def _server(self) -> str:
        """Which server the batches live on, as a digest (an api_base may hold credentials)."""
        return cache_key({"api_base": self.settings.api_base})[:16]

    def _read_book(self) -> dict[str, str]:
        if self.book is None or not self.book.is_file():
            return {}
        journaled: dict[str, str] = {}
        for line in self.book.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line torn by the kill: that batch is paid for again, nothing lost
                continue
            if entry.get("model") == self.settings.name and entry.get("server") == self._server():
                journaled.update(dict.fromkeys(entry["requests"], entry["batch"]))
        return journaled

    def _write_book(self, batch_id: str, requests: list[str]) -> None:
        if self.book is None:
            return
        entry = {"batch": batch_id, "model": self.settings.name, "server": self._server()}
        with self.book.open("a", encoding="utf-8") as f:
            f.write(json.dumps({**entry, "created": time.time(), "requests": requests}) + "\n")
            f.flush()
            os.fsync(f.fileno())
