"""Targets: the system under test, producing one output per row.

`dataset` reads recorded outputs, `llm` asks a model with your prompt, `python` calls your function,
`http` posts each input to your service. A target that fails on one row returns a StepResult with the
error: that item is unscored (and counted), never scored as an empty answer.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import os
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalframe.data.rows import Row, _text, require
from evalframe.errors import ConfigError
from evalframe.models.calls import StepResult
from evalframe.models.context import Context
from evalframe.models.limits import ModelLimits
from evalframe.models.retry import with_retries
from evalframe.models.settings import ModelSettings
from evalframe.scorers.prompts import PromptFile, TextTemplate


class Target(ABC):
    # Whether outputs() advances the progress bar once per row (targets that do work per row).
    reports_progress = False
    chunk = 1  # rows given to outputs() at once (see Scorer.chunk)

    def models(self) -> list[ModelSettings]:
        return []

    def validate(self, rows: list[Row], source: str) -> None:  # noqa: B027 - optional hook
        """Check rows and prompts before any model call."""

    def identity(self) -> str:
        """What the outputs depend on beyond the config (a prompt file's text, a function's code): a
        run is not resumed once it changed."""
        return ""

    @abstractmethod
    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        """One (output, how it was made) per row, in order."""


class RecordedOutput(Target):
    """The outputs recorded in the dataset's output column."""

    def validate(self, rows: list[Row], source: str) -> None:
        require(rows, source, "output", "target=dataset evaluates (or use target=llm to generate outputs)")

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        return [(row.output or "", None) for row in rows]


class LLMTarget(Target):
    """Generate each output with a model and the user's Jinja2 prompt template."""

    reports_progress = True

    def __init__(self, model: Mapping[str, Any], prompt: str | None = None):
        self.settings = ModelSettings.from_config(model)
        self.prompt = PromptFile(prompt, "target/answer.j2")

    def models(self) -> list[ModelSettings]:
        return [self.settings]

    def _render(self, row: Row) -> list[dict[str, str]]:
        return self.prompt.render(input=row.input, row=dict(row.extra))

    def identity(self) -> str:
        return self.prompt.path.read_text(encoding="utf-8", errors="replace")

    def validate(self, rows: list[Row], source: str) -> None:
        for row in rows:  # rendering is cheap; every row, so a column a template uses is never missing
            self._render(row)

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        llm = ctx.llm(self.settings)

        async def generate(row: Row) -> StepResult:
            step = await llm.text("target", self._render(row))
            ctx.advance()
            return step

        steps = await asyncio.gather(*(generate(row) for row in rows))
        return [(step.raw or "", step) for step in steps]


def resolve_callable(path: str, key: str) -> Callable[..., Any]:
    """`package.module:function` (or `package.module.function`) -> the function; errors name `key`."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ConfigError(f"{key}={path!r}: name a function as module:function, e.g. mypkg.agent:answer")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise ConfigError(
            f"{key}={path!r}: cannot import {module_name!r} ({e}); run from the directory that holds it "
            "or add that directory to PYTHONPATH"
        ) from None
    except Exception as e:  # the user's module failed while importing: say where, keep it short
        raise ConfigError(f"{key}={path!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"{key}={path!r}: {module_name!r} has no {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ConfigError(f"{key}={path!r} is a {type(found).__name__}, not a function")
    return found


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _where(e: BaseException) -> str:
    """Where the user's code raised (its last frame): the first thing to look at, kept with the item."""
    frames = traceback.extract_tb(e.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class PythonTarget(Target):
    """Call your function for each row: `fn(input) -> answer`, or `fn(input, row)` with pass_row (row:
    every column of the dataset row). Async functions are awaited; sync ones run in worker threads.
    Either way at most `concurrency` calls run at once. An exception leaves that item unscored, with the
    error; a non-string answer becomes JSON text, as non-string dataset values do."""

    reports_progress = True
    chunk = 16  # the rows of one outputs() call share its thread pool

    def __init__(self, fn: str | Callable[..., Any], pass_row: bool = False, timeout: float | None = None):
        self.fn = resolve_callable(fn, "target.fn") if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise ConfigError(f"target.fn is a {type(self.fn).__name__}, not a function")
        self.pass_row = pass_row
        self.timeout = timeout
        self.is_async = _is_async(self.fn)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._check_arguments()

    def run_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run an async function's coroutines on `loop`: evaluate_async works on a thread of its own,
        but the caller's coroutines belong on the caller's loop, with their clients and pools."""
        self._loop = loop

    @property
    def name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}:{getattr(self.fn, '__qualname__', repr(self.fn))}"

    def identity(self) -> str:
        try:
            return inspect.getsource(self.fn)
        except (OSError, TypeError):  # defined in a REPL, a builtin: its name is all there is
            return self.name

    def _check_arguments(self) -> None:
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):  # some builtins have no signature: nothing to check
            return
        given: tuple[Any, ...] = ("input", {}) if self.pass_row else ("input",)
        try:
            signature.bind(*given)
        except TypeError:
            wanted = "fn(input, row)" if self.pass_row else "fn(input)"
            raise ConfigError(
                f"target.fn={self.name} has the signature {signature}; it is called as {wanted}"
                + ("" if self.pass_row else ", or as fn(input, row) with target.pass_row=true")
            ) from None

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        # Threads are made as needed, and the limiter keeps at most `concurrency` of them busy.
        pool = ThreadPoolExecutor(max_workers=max(1, min(len(rows), 256)), thread_name_prefix="evalframe-fn")
        try:
            return list(await asyncio.gather(*(self._one(row, ctx, pool) for row in rows)))
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    async def _one(self, row: Row, ctx: Context, pool: ThreadPoolExecutor) -> tuple[str, StepResult | None]:
        step = StepResult("target", messages=[], attempts=1)
        args = (row.input, dict(row.extra)) if self.pass_row else (row.input,)
        value: Any = None
        async with ctx.limiter:
            started = time.perf_counter()
            try:
                value = await asyncio.wait_for(self._call(args, pool), self.timeout)
            except asyncio.TimeoutError:  # the builtin TimeoutError only from 3.11 on
                step.error = f"{self.name} did not return within target.timeout={self.timeout} s"
            except Exception as e:
                step.error = f"{self.name} raised {_error(e)}{_where(e)}"
            step.latency = time.perf_counter() - started
        ctx.advance()
        if step.error is None and value is None:
            step.error = f"{self.name} returned None; return the answer (a string)"
        if step.error is not None:
            return "", step
        step.raw = _text(value)
        return step.raw or "", step

    async def _call(self, args: tuple[Any, ...], pool: ThreadPoolExecutor) -> Any:
        loop = asyncio.get_running_loop()
        if self.is_async:
            if self._loop is not None and self._loop is not loop:
                return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.fn(*args), self._loop))
            return await self.fn(*args)
        value = await loop.run_in_executor(pool, functools.partial(self.fn, *args))
        return await value if inspect.isawaitable(value) else value  # a sync wrapper returning a coroutine


# Replies worth retrying: rate limits and server-side failures (not 501 Not Implemented).
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TARGET = "target"  # the HTTP target's rate limits, kept by this name beside each model's (Stats.limits)


class ReplyError(Exception):
    """The service answered, but not with something we can read an output from."""


class _Retryable(ReplyError):
    """A failure worth another try: a timeout, a dropped connection, a 429 or a 5xx (whose
    `response` may say when to come back: retry.retry_after reads its Retry-After)."""

    def __init__(self, message: str, response: Any = None):
        super().__init__(message)
        self.response = response


class _RateLimited(_Retryable):
    """A 429: sent again once the service's cool-down is over, without using max_retries."""


def extract(reply: Any, path: str | None) -> Any:
    """The value at a dotted path of a JSON reply: `answer`, `choices.0.message.content`."""
    if not path:
        return reply
    value, walked = reply, list[str]()
    for part in path.split("."):
        where = ".".join(walked) or "the top level"
        if isinstance(value, Mapping):
            if part not in value:
                keys = ", ".join(map(str, value)) or "none"
                raise ReplyError(
                    f"the reply has no {part!r} at {where} (keys there: {keys}); fix output_path"
                )
            value = value[part]
        elif isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                raise ReplyError(
                    f"the reply has a list of {len(value)} at {where}, and {part!r} is not an index into it"
                ) from None
        else:
            raise ReplyError(f"the reply has {type(value).__name__} {value!r:.80} at {where}, not an object")
        walked.append(part)
    return value


class HTTPTarget(Target):
    """POST each row's input as JSON to your service and read the answer from a path in its JSON reply.

    `body` is the request's JSON; its string values are Jinja2 templates with `input` and `row`.
    The service is rate limited as a judge model is (limits.ModelLimits): a 429 cools it down for every
    row (for its Retry-After, else a backoff) and is sent again without using max_retries; server
    errors and timeouts are retried with the judge's backoff (Retry-After honoured); a refused
    credential (401, 403) stops the run; any other failure leaves that item unscored with the reason.
    """

    reports_progress = True
    chunk = 16  # the rows of one outputs() call share its HTTP client (and connections)

    def __init__(
        self,
        url: str,
        method: str = "POST",
        body: Any = None,
        output_path: str | None = "answer",
        headers: Mapping[str, str] | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
    ):
        import httpx

        try:
            parsed = httpx.URL(str(url))
        except (httpx.InvalidURL, TypeError) as e:
            raise ConfigError(f"target.url={url!r} is not a URL ({e})") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError(f"target.url={url!r} is not an http(s) URL, e.g. http://127.0.0.1:8000/answer")
        if method.upper() not in ("POST", "PUT", "PATCH"):
            raise ConfigError(
                f"target.method={method!r}: use POST, PUT or PATCH (the input goes in the body)"
            )
        self.url, self.method = str(url), method.upper()
        self.body = self._compile({"input": "{{ input }}"} if body is None else body, "target.body")
        self.output_path = output_path
        self.headers = dict(headers or {})
        self.api_key_env = api_key_env
        self.timeout, self.max_retries = float(timeout), int(max_retries)

    def _compile(self, node: Any, where: str) -> Any:
        if isinstance(node, str):
            return TextTemplate(node, where)
        if isinstance(node, Mapping):
            return {k: self._compile(v, f"{where}.{k}") for k, v in node.items()}
        if isinstance(node, list):
            return [self._compile(v, f"{where}.{i}") for i, v in enumerate(node)]
        return node

    def request_body(self, row: Row) -> Any:
        def fill(node: Any) -> Any:
            if isinstance(node, TextTemplate):
                return node.render(input=row.input, row=dict(row.extra))
            if isinstance(node, dict):
                return {k: fill(v) for k, v in node.items()}
            if isinstance(node, list):
                return [fill(v) for v in node]
            return node

        return fill(self.body)

    def validate(self, rows: list[Row], source: str) -> None:
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ConfigError(
                f"{self.api_key_env} is not set, and target.api_key_env names it for {self.url}; "
                f"export {self.api_key_env}=... or set target.api_key_env=null"
            )
        for row in rows:  # every row: a column the body uses must exist in all of them
            self.request_body(row)

    async def outputs(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        import httpx

        headers = dict(self.headers)
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        async with httpx.AsyncClient(timeout=self.timeout, headers=headers, follow_redirects=True) as client:
            return list(await asyncio.gather(*(self._one(client, row, ctx) for row in rows)))

    async def _one(self, client: Any, row: Row, ctx: Context) -> tuple[str, StepResult | None]:
        body = self.request_body(row)
        step = StepResult(
            "target", messages=[{"role": "request", "content": json.dumps(body, ensure_ascii=False)}]
        )
        output = ""
        try:
            reply = await self._send(client, body, step, ctx)
            value = extract(reply, self.output_path)
            if value is None:
                raise ReplyError(f"the reply's {self.output_path or 'body'} is null")
            output = _text(value) or ""
        except ReplyError as e:
            step.error = str(e)
        ctx.advance()
        return output, step

    async def _send(self, client: Any, body: Any, step: StepResult, ctx: Context) -> Any:
        """One request under the service's rate limits. A 429 is sent again until timeout × (1 +
        max_retries) from the first attempt, as a judge's is; server errors, timeouts and dropped
        connections are retried while max_retries lasts."""
        limits = ctx.limits(TARGET)
        first: list[float] = []  # when the request was first sent: its deadline counts from there

        def request() -> Awaitable[Any]:
            first[:] = first or [time.monotonic()]
            return self._request(client, body, step, limits)

        def rate_limited(e: BaseException) -> bool:
            deadline = first[0] + self.timeout * (1 + self.max_retries)
            return isinstance(e, _RateLimited) and limits.cool_until <= deadline

        attempt = functools.partial(limits.send, ctx.limiter, 0, request)
        try:
            return await with_retries(
                attempt, self.max_retries, lambda e: isinstance(e, _Retryable), rate_limited
            )
        except _Retryable as e:
            raise ReplyError(f"{e} (after {step.attempts} attempt(s))") from None

    async def _request(self, client: Any, body: Any, step: StepResult, limits: ModelLimits) -> Any:
        """One attempt, its 429 or reply told to the limits."""
        import httpx

        started, sent = time.perf_counter(), time.monotonic()
        step.attempts += 1
        try:
            response = await client.request(self.method, self.url, json=body)
        except httpx.TimeoutException:
            raise _Retryable(f"no reply from {self.url} within target.timeout={self.timeout} s") from None
        except httpx.TransportError as e:
            raise _Retryable(f"cannot reach {self.url}: {_error(e)}") from None
        finally:
            step.latency += time.perf_counter() - started
        if response.status_code in (401, 403):
            raise ConfigError(
                f"{self.url} refused the request (HTTP {response.status_code}: "
                f"{response.text[:200]}); check target.api_key_env and target.headers"
            )
        if response.is_success:
            limits.answered(response.headers, 0, 0)
            return self._parse(response, step)
        failure = f"HTTP {response.status_code} from {self.url}: {response.text[:300]}"
        if response.status_code == 429:
            limits.refused(sent, response.headers)
            raise _RateLimited(failure, response)
        raise _Retryable(failure, response) if response.status_code in RETRY_STATUS else ReplyError(failure)

    def _parse(self, response: Any, step: StepResult) -> Any:
        step.raw = response.text  # the whole reply, kept in the item's record for debugging
        if not self.output_path:
            try:
                return response.json()
            except ValueError:
                return response.text  # a plain-text service: the body is the answer
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise ReplyError(
                f"the reply is not JSON ({kind}): {response.text[:200]!r}; "
                "set target.output_path=null to take the body as text"
            ) from None
