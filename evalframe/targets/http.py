"""The `http` target: each row's input posted as JSON to the user's service, the answer read from a
path in its JSON reply, under the service's rate limits and with the judge's retries; a conversation
(targets.conversing) posted once per user turn, with the messages so far in the body."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from evalframe.data import handed as handover
from evalframe.data.conversations import Turn
from evalframe.data.rows import Row
from evalframe.data.values import as_text, invalid_text
from evalframe.errors import ConfigError, DataError
from evalframe.models.context import Context
from evalframe.models.limits import Deadline, ModelLimits, Overdue
from evalframe.models.retry import with_retries
from evalframe.models.steps import StepResult
from evalframe.scorers.prompts import TextTemplate
from evalframe.targets.base import error_text
from evalframe.targets.conversing import Conversing

# Replies worth retrying: rate limits and server-side failures (not 501 Not Implemented).
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TARGET = "target"  # the HTTP target's rate limits, kept by this name beside each model's (Stats.limits)
# A body value that is exactly `{{ messages }}` becomes the list itself, not its text.
_MESSAGES = re.compile(r"\{\{\s*messages\s*\}\}")


class _Messages:
    """Where the conversation so far goes in the body, as a JSON list of {role, content} records."""


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


def extract(reply: Any, path: str | None, key: str = "output_path") -> Any:
    """The value at a dotted path of a JSON reply: `answer`, `choices.0.message.content`; a `*` takes
    every element of a list, so `sources.*.text` is the list of each source's text. Errors end by
    saying to fix `key`, the setting that holds the path."""
    if not path:
        return reply
    return _walk(reply, path.split("."), [], key)


def _walk(value: Any, parts: list[str], walked: list[str], key: str) -> Any:
    for i, part in enumerate(parts):
        where = ".".join(walked) or "the top level"
        if part == "*":
            if not isinstance(value, list):
                raise ReplyError(f"the reply has {_kind(value)} at {where}, not a list for '*'; fix {key}")
            return [_walk(v, parts[i + 1 :], [*walked, str(n)], key) for n, v in enumerate(value)]
        if isinstance(value, Mapping):
            if part not in value:
                keys = ", ".join(map(str, value)) or "none"
                raise ReplyError(f"the reply has no {part!r} at {where} (keys there: {keys}); fix {key}")
            value = value[part]
        elif isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                raise ReplyError(
                    f"the reply has a list of {len(value)} at {where}, and {part!r} is not an index into it"
                ) from None
        else:
            raise ReplyError(f"the reply has {_kind(value)} at {where}, not an object")
        walked.append(part)
    return value


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.80}"


def _compiled(node: Any, where: str) -> Any:
    """A body from config with its string values compiled (`where`: the key, for errors)."""
    if isinstance(node, str) and _MESSAGES.fullmatch(node.strip()):
        return _Messages()
    if isinstance(node, str):
        return TextTemplate(node, where)
    if isinstance(node, Mapping):
        return {k: _compiled(v, f"{where}.{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_compiled(v, f"{where}.{i}") for i, v in enumerate(node)]
    return node


class HTTPTarget(Conversing):
    """POST each row's input as JSON to your service and read the answer from a path in its JSON reply.

    `body` is the request's JSON; its string values are Jinja2 templates with `input`, `row` and
    `messages`; a value "{{ messages }}" is the list itself (request_body: conversations).
    The service is rate limited as a judge model is (limits.ModelLimits): a 429 cools it down for every
    row (for its Retry-After, else a backoff) and is sent again without using max_retries; server
    errors and timeouts are retried with the judge's backoff (Retry-After honoured); a refused
    credential (401, 403) stops the run; any other failure leaves that item unscored with the reason.

    `contexts_path`, `context_ids_path` and `tool_calls_path` read what the service retrieved and
    called from the same reply (data.handed); a reply without one of them leaves that item unscored.
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
        contexts_path: str | None = None,
        context_ids_path: str | None = None,
        tool_calls_path: str | None = None,
        simulate: Mapping[str, Any] | None = None,
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
        self.body = _compiled({"input": "{{ input }}"} if body is None else body, "target.body")
        self.chat_body = _compiled({"input": "{{ input }}", "messages": "{{ messages }}"}, "target.body")
        self.default_body = body is None
        self.output_path = output_path
        given = {"contexts": contexts_path, "context_ids": context_ids_path, "tool_calls": tool_calls_path}
        self.paths = {name: str(path) for name, path in given.items() if path}  # field -> path in the reply
        self.provides = frozenset(self.paths)
        self.label = f"target.url={self.url}"
        self.headers = dict(headers or {})
        self.api_key_env = api_key_env
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.simulate(simulate)

    def request_body(self, row: Row) -> Any:
        """The body for `row`. A conversation's turn (a row with `messages`: the conversation so far,
        `input` its last user turn) has its messages in `messages`, a plain row its one user message;
        the default body sends them only for a conversation: {"input": ..., "messages": [...]}."""
        turns = row.messages or [Turn(1, "user", row.input)]
        messages = [{"role": t.role, "content": t.content} for t in turns]

        def fill(node: Any) -> Any:
            if isinstance(node, _Messages):
                return messages
            if isinstance(node, TextTemplate):
                return node.render(input=row.input, row=dict(row.extra), messages=messages)
            if isinstance(node, dict):
                return {k: fill(v) for k, v in node.items()}
            if isinstance(node, list):
                return [fill(v) for v in node]
            return node

        return fill(self.chat_body if self.default_body and row.messages is not None else self.body)

    def validate(self, rows: list[Row], source: str) -> None:
        self.validate_conversations(rows, source)
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ConfigError(
                f"{self.api_key_env} is not set, and target.api_key_env names it for {self.url}; "
                f"export {self.api_key_env}=... or set target.api_key_env=null"
            )
        for row in rows:  # every row: a column the body uses must exist in all of them
            self.request_body(row)

    async def answers(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
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
            if problem := invalid_text(value, f"the reply's {self.output_path or 'body'}"):
                raise ReplyError(f"{problem}; the service must send whole characters")  # as a dataset's text
            output = as_text(value) or ""
            if self.paths:
                step.reply = {"output": output, **self._handed(reply, row)}
        except ReplyError as e:
            step.error = str(e)
        ctx.advance()
        return output, step

    def _handed(self, reply: Any, row: Row) -> dict[str, Any]:
        """What the reply holds at contexts_path and the others, checked as a dataset's columns are."""
        found = {}
        for name, path in self.paths.items():
            found[name] = extract(reply, path, f"{name}_path")
            if found[name] is None:
                raise ReplyError(f"the reply's {path} is null; fix {name}_path, or reply [] for none")
        try:
            return handover.as_json(handover.fields(found, f"the reply to item {row.id}"))
        except DataError as e:
            read = ", ".join(f"{name}_path={path}" for name, path in self.paths.items())
            raise ReplyError(f"{e} (read at {read})") from None

    async def _send(self, client: Any, body: Any, step: StepResult, ctx: Context) -> Any:
        """One request under the service's rate limits. A 429 is sent again until timeout × (1 +
        max_retries) from the first attempt, as a judge's is (past it, the 429 is the request's end);
        server errors, timeouts and dropped connections are retried while max_retries lasts, unless
        the service asks to wait past that deadline."""
        deadline = Deadline(self.timeout * (1 + self.max_retries))  # counts from the first attempt
        limits = ctx.limits(TARGET, deadline.seconds)

        def request() -> Awaitable[Any]:
            return self._request(client, body, step, limits)

        def rate_limited(e: BaseException) -> bool:
            return isinstance(e, _RateLimited) and limits.cool_until <= deadline.at

        def retried(e: BaseException) -> bool:
            return isinstance(e, _Retryable) and not isinstance(e, _RateLimited)

        attempt = functools.partial(limits.send, ctx.limiter, 0, request, deadline)
        try:
            return await with_retries(attempt, self.max_retries, retried, rate_limited, deadline)
        except (_Retryable, Overdue) as e:
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
            raise _Retryable(f"cannot reach {self.url}: {error_text(e)}") from None
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
