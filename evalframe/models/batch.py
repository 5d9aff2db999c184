"""Batch judging (`model.batch=true`): a model's requests go through the provider's batch API, at half
the normal price, for evaluations where waiting minutes or hours is fine: OpenAI's Batch API (and any
OpenAI-compatible server that has it) and Anthropic's Message Batches. One batcher; what differs between
the two (how a request is written, how a batch is created, how its answers read) is its `wire`.
ModelSettings.check_credentials refuses `batch=true` on any other provider before the run starts.

Only the transport differs from a normal call: the same prompts, the same validation, the same cache
(the model door asks the batcher only for what the cache does not hold). Requests are gathered while
the run makes them; once none has come for `LINGER` seconds they go as one batch, so one step of every
item in flight travels together and a step that depends on it (extract -> analyze) goes in the next
batch. A reply that fails validation goes back to the model in the next batch, as a normal call would
(`reply_retries` times); a request the provider answered with a transient error (429, 5xx), or did not
answer because its batch expired or failed, or whose line of the results cannot be read, is sent again
in the next batch (`max_retries` times); then the item is unscored with the reason. Each line of the
results stands alone: one cut short costs its own request, not the batch.

Each batch's id and its requests' ids are appended to `batches.jsonl` in the run directory the moment
the batch exists: a run killed while waiting and resumed with `resume=true` collects those batches
instead of paying for the same requests again.

A batch is created and paid for: a transient error while polling it (a 500, a dropped connection) is
asked again with a growing pause until the batch is due (its expires_at, and a grace), never taken for
the batch's end. A batch given up for good (still unreadable or pending long after it was due) is
cancelled, so that it is not paid for as well as the new batch its requests go in.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evalframe.models.batch_wires import AnthropicWire, BatchError, OpenAIWire
from evalframe.models.cache import key as cache_key
from evalframe.models.loader import lib
from evalframe.models.pricing import Pricing
from evalframe.models.retry import with_retries
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message, Stats
from evalframe.models.transport import ModelRejected, transient_errors
from evalframe.redaction import REDACTED, scrub_text

BOOK = "batches.jsonl"  # in the run directory: one line per batch, written as soon as it is created
LINGER = 0.2  # seconds without a new request before the gathered ones go as a batch
RETRYABLE = {408, 409, 429, 500, 502, 503, 504}
FINAL = {"failed", "expired", "cancelled", "cancelling"}
# A batch still pending this long after its expires_at has expired, whatever its status says: LiteLLM
# reads any Anthropic processing_status but "ended" and "canceling" as in_progress.
EXPIRY_GRACE = 3600.0
WINDOW = 24 * 3600.0  # seconds: the completion window batches are created with ("24h")
POLL_CAP = 600.0  # seconds: the longest pause between two polls of a batch whose status went unread
T = TypeVar("T")


@dataclass(frozen=True)
class Book:
    """batches.jsonl in the run directory: each batch a model's requests went in, written as soon as
    it is created, so a killed run's resume collects what it paid for instead of asking again."""

    path: Path | None  # None: no run directory (nothing to resume)
    model: str
    server: str

    def read(self) -> dict[str, str]:
        """Request id -> the batch it went in, for this model on this server."""
        if self.path is None or not self.path.is_file():
            return {}
        journaled: dict[str, str] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line torn by the kill: that batch is paid for again, nothing lost
                continue
            if entry.get("model") == self.model and entry.get("server") == self.server:
                journaled.update(dict.fromkeys(entry["requests"], entry["batch"]))
        return journaled

    def write(self, batch_id: str, requests: list[str]) -> None:
        if self.path is None:
            return
        entry = {"batch": batch_id, "model": self.model, "server": self.server}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({**entry, "created": time.time(), "requests": requests}) + "\n")
            f.flush()
            os.fsync(f.fileno())


class Batcher:
    """One model's batches: `complete(messages, **params)` returns the chat completion as a normal call
    would (LiteLLM's ModelResponse), priced at the batch rate."""

    def __init__(self, settings: ModelSettings, stats: Stats, run_dir: Path | None):
        # LiteLLM 1.106's afile_content makes one coroutine too many and drops it (the content comes
        # all the same): its "never awaited" warning would reach the user's console on every batch.
        warnings.filterwarnings("ignore", "coroutine 'OpenAIFilesAPI.afile_content' was never awaited")
        self.settings = settings
        self.stats = stats
        self.model, provider = lib().get_llm_provider(settings.name)[:2]  # the name on the wire
        self.wire = AnthropicWire() if provider == "anthropic" else OpenAIWire()
        self.pricing = Pricing(settings)
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        # Which server the batches live on, as a digest (an api_base may hold credentials).
        server = cache_key({"api_base": settings.api_base})[:16]
        self.book = Book(run_dir / BOOK if run_dir else None, settings.name, server)
        self._journaled = self.book.read()  # request id -> id of the batch it went in (a killed run's)
        self._collecting: dict[str, asyncio.Task[dict[str, dict[str, Any]]]] = {}

    async def complete(self, messages: list[Message], **params: Any) -> Any:
        body = self.wire.request(self, messages, params)
        request_id = cache_key(body)
        retries = self.settings.max_retries
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
                return self._priced(self.wire.response(response["body"], params))
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
        try:
            batch_id = await self.wire.create(self, {rid: body for rid, (body, _) in batch.items()})
            self.book.write(batch_id, list(batch))
            print(f"batch {batch_id} ({self.settings.name}): submitted {len(batch)}", file=sys.stderr)
            self.stats.batched += len(batch)
            self.stats.calls += len(batch)
            try:
                answers = await self._wait(batch_id)
            except BatchError as e:  # it failed or expired: each request is sent again in a new batch
                answers = {rid: {"error": {"message": str(e)}} for rid in batch}
            missing = len(set(batch) - set(answers))
            if missing:  # left out, or on a line that could not be read
                said = f"{missing} not in its results (sent again while model.max_retries lasts)"
                print(f"batch {batch_id} ({self.settings.name}): {said}", file=sys.stderr)
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
        transient = transient_errors(litellm)
        started, said, last_said = time.monotonic(), None, 0.0
        due = time.time() + WINDOW + EXPIRY_GRACE  # until its expires_at is read
        unread = 0  # polls in a row answered with a transient error
        while True:
            try:
                batch = await self._call(litellm.aretrieve_batch, batch_id=batch_id)
            except transient as e:  # the batch goes on: ask again, later and later, until it is due
                if time.time() > due:
                    why = f"unreadable until it was due ({type(e).__name__})"
                    raise await self._given_up(batch_id, why) from e
                unread += 1
                pause = min(POLL_CAP, self.settings.batch_poll * 2**unread)
                said_now = f"status unread ({type(e).__name__}), asking again in {pause:.1f} s"
                print(f"batch {batch_id} ({self.settings.name}): {said_now}", file=sys.stderr)
                await asyncio.sleep(pause)
                continue
            unread = 0
            due = batch.expires_at + EXPIRY_GRACE if batch.expires_at else due
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
            if batch.expires_at and time.time() > due:
                raise await self._given_up(batch_id, f"expired: still {batch.status} long after it was due")
            await asyncio.sleep(self.settings.batch_poll)
        answers: dict[str, dict[str, Any]] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await self._call(litellm.afile_content, file_id=file_id)
                answers.update(self.wire.answers(content.content))
        unanswered = Counter(str(a["error"].get("message")) for a in answers.values() if a.get("error"))
        if unanswered:  # Anthropic's expired requests (its batch itself "ended"), OpenAI's error file
            missed = ", ".join(f"{n} {why[:80]}" for why, n in unanswered.items())
            print(f"batch {batch_id} ({self.settings.name}): {missed}", file=sys.stderr)
        return answers

    async def _given_up(self, batch_id: str, why: str) -> BatchError:
        """Cancel a batch given up for good (its requests go in a new one: it must not be paid for too
        should it end after all); the error that says so."""
        try:
            await self.wire.cancel(self, batch_id)
        except Exception as e:  # it may have ended meanwhile: cancelling is for the bill, not the run
            return BatchError(f"batch {batch_id} {why}; could not cancel it ({type(e).__name__})")
        return BatchError(f"batch {batch_id} {why}; cancelled")

    async def _call(self, fn: Callable[..., Awaitable[T]], **kwargs: Any) -> T:
        """One call of LiteLLM's file and batch API, retried like a completion; a refused key ends the run."""
        litellm = lib()
        s = self.settings
        # max_retries=0: the retries are with_retries' below, not also OpenAI's client's (two more
        # requests, with its own backoff, inside each of ours).
        where = {
            "custom_llm_provider": self.wire.provider,
            "timeout": s.timeout,
            "api_base": s.api_base,
            "max_retries": 0,
        }
        key = s.api_key()
        if key:
            where["api_key"] = key

        async def attempt() -> T:
            try:
                try:
                    return await fn(**kwargs, **{k: v for k, v in where.items() if v is not None})
                except Exception as e:
                    mapped = self.wire.mapped(e, s.name)
                    if mapped is e:
                        raise
                    raise mapped from None
            except (litellm.AuthenticationError, litellm.PermissionDeniedError) as e:
                said = scrub_text(str(e).replace(key, REDACTED) if key else str(e))  # a key echoed back
                raise ModelRejected(
                    f"the batch API of {s.name} rejected the request ({type(e).__name__}): {said[:300]}"
                ) from None

        transient = transient_errors(litellm)
        return await with_retries(attempt, s.max_retries, lambda e: isinstance(e, transient))

    def _priced(self, response: Any) -> Any:
        """The answer (LiteLLM's ModelResponse), its cost at the batch price (NaN when the model's price
        is unknown), and what it would have cost as a normal call."""
        cost, full = self.pricing.batched(response.usage)
        response._hidden_params["response_cost"] = cost
        self.stats.batch_cost += cost
        self.stats.unbatched_cost += full
        return response
