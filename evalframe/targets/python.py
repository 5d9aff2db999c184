"""The `python` target: the user's function called for each row (named as `module:function` in the
config, or given as an object by the Python API), sync in worker threads or async on the caller's loop.
It returns the answer, or a mapping of the answer and what the application retrieved and called
(data.handed): {"output": ..., "contexts": [...], "context_ids": [...], "tool_calls": [...]}."""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from typing import Any

from evalframe.data import handed as handover
from evalframe.data.rows import Row
from evalframe.data.values import as_text, invalid_text
from evalframe.errors import ConfigError, DataError
from evalframe.models.context import Context
from evalframe.models.steps import StepResult
from evalframe.targets.base import error_text
from evalframe.targets.conversing import Conversing
from evalframe.targets.threads import DaemonThreads
from evalframe.targets.traced import FROM_TRACE, Traced


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


def _where(e: BaseException) -> str:
    """Where the user's code raised (its last frame): the first thing to look at, kept with the item."""
    frames = traceback.extract_tb(e.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class PythonTarget(Conversing, Traced):
    """Call your function for each row: `fn(input) -> answer`, or `fn(input, row)` with pass_row (row:
    every column of the dataset row). Async functions are awaited; sync ones run in worker threads.
    A conversation (a row with `messages`, or target.simulate) calls it once per user turn with the
    keyword `messages=[{role, content}, ...]`: the conversation so far, ending in that turn (its text is
    `input`), so the function needs a `messages` parameter.
    Either way at most `concurrency` calls run at once. An exception leaves that item unscored, with the
    error; a non-string answer becomes JSON text, as non-string dataset values do.

    A mapping is the answer (`output`) with what the application retrieved and called (`contexts`,
    `context_ids`, `tool_calls`), which go onto the item as a dataset's columns would; `provides`
    names those it always returns, which the dataset then need not have. A mapping that breaks this
    contract (no output, an unknown key, a value of the wrong type) stops the run, naming the key: the
    function is wrong for every item, and no judge is paid to find out.

    A function traced with MLflow hands over what its trace holds (`from_trace`, targets.traced): the
    contexts of its RETRIEVER span and its TOOL spans, and the trace's id."""

    reports_progress = True
    chunk = 16  # the rows of one outputs() call at once

    def __init__(
        self,
        fn: str | Callable[..., Any],
        pass_row: bool = False,
        timeout: float | None = None,
        provides: Iterable[str] | None = (),
        from_trace: Mapping[str, str | None] | None = FROM_TRACE,
        simulate: Mapping[str, Any] | None = None,
    ):
        Traced.__init__(self, from_trace, "target.from_trace")
        self.fn = resolve_callable(fn, "target.fn") if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise ConfigError(f"target.fn is a {type(self.fn).__name__}, not a function")
        provides = () if provides is None else provides
        if isinstance(provides, str) or set(provides) - set(handover.HANDED):
            raise ConfigError(
                f"target.provides={provides!r}: a list of what the function returns beside its output, "
                f"out of {', '.join(handover.HANDED)}, e.g. target.provides=[contexts]"
            )
        self.provides = frozenset(provides)
        self.label = f"target.fn={self.name}"
        self.pass_row = pass_row
        self.timeout = timeout
        self.is_async = _is_async(self.fn)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.simulate(simulate)
        # A chat-only function (a required `messages`) is fine until a plain row would call it without.
        self.chat_only = not self._check_arguments(self.simulation is not None)

    def run_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run an async function's coroutines on `loop`: evaluate_async works on a thread of its own,
        but the caller's coroutines belong on the caller's loop, with their clients and pools."""
        self._loop = loop

    @property
    def name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}:{getattr(self.fn, '__qualname__', repr(self.fn))}"

    def identity(self) -> str:
        try:
            code = inspect.getsource(self.fn)
        except (OSError, TypeError):  # defined in a REPL, a builtin: its name is all there is
            code = self.name
        return code + super().identity()

    def validate(self, rows: list[Row], source: str) -> None:
        self.validate_conversations(rows, source)
        if any(row.messages is not None for row in rows):
            self._check_arguments(conversation=True)
        plain = next((row for row in rows if not self.talks(row)), None)
        if self.chat_only and plain is not None:
            raise ConfigError(
                f"target.fn={self.name} needs `messages`, and {source}, line {plain.line} (id {plain.id}) "
                "is no conversation: give `messages` a default (None), or map dataset.columns.messages"
            )

    def _check_arguments(self, conversation: bool = False) -> bool:
        """Whether the function can be called as the config says (ConfigError if not at all); False
        for one that can only be called with `messages` (a conversation's turns)."""
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):  # some builtins have no signature: nothing to check
            return True
        given: tuple[Any, ...] = ("input", {}) if self.pass_row else ("input",)

        def binds(**kwargs: Any) -> bool:
            try:
                signature.bind(*given, **kwargs)
            except TypeError:
                return False
            return True

        if binds(**({"messages": []} if conversation else {})):
            return True
        wanted = "fn(input, row)" if self.pass_row else "fn(input)"
        if conversation:
            raise ConfigError(
                f"target.fn={self.name} has the signature {signature}; a conversation calls it as "
                f"{wanted[:-1]}, messages=[...]) once per user turn: add a `messages` parameter"
            )
        if binds(messages=[]):
            return False
        raise ConfigError(
            f"target.fn={self.name} has the signature {signature}; it is called as {wanted}"
            + ("" if self.pass_row else ", or as fn(input, row) with target.pass_row=true")
        )

    async def answers(self, rows: list[Row], ctx: Context) -> list[tuple[str, StepResult | None]]:
        # A daemon thread per call, the limiter keeping at most `concurrency` busy: one that outlives
        # target.timeout must not keep the process alive once the run is done (targets.threads).
        pool = DaemonThreads("evalframe-fn")
        made: dict[str, str] = {}  # row id -> the trace its call produced (a traced function)
        try:
            produced = list(await asyncio.gather(*(self._one(row, ctx, pool, made) for row in rows)))
            await self.read_traces(rows, produced, made, pool, self.label)
            return produced
        finally:
            pool.shutdown(wait=False)

    async def _one(
        self, row: Row, ctx: Context, pool: Executor, made: dict[str, str]
    ) -> tuple[str, StepResult | None]:
        step = StepResult("target", messages=[], attempts=1)
        args = (row.input, dict(row.extra)) if self.pass_row else (row.input,)
        # The conversation so far, as OpenAI-style records (tool calls, contexts where a turn has them).
        kwargs = {"messages": row.messages.as_records()} if row.messages is not None else {}
        value: Any = None
        trace_id: str | None = None
        async with ctx.limiter:
            started = time.perf_counter()
            try:
                value, trace_id = await asyncio.wait_for(self._call(args, kwargs, pool), self.timeout)
            except asyncio.TimeoutError:  # the builtin TimeoutError only from 3.11 on
                step.error = f"{self.name} did not return within target.timeout={self.timeout} s"
            except Exception as e:
                step.error = f"{self.name} raised {error_text(e)}{_where(e)}"
            step.latency = time.perf_counter() - started
        ctx.advance()
        if step.error is None and value is None:
            step.error = f"{self.name} returned None; return the answer (a string)"
        if step.error is None and (problem := invalid_text(value, "its answer")):
            # checked at the door, as a dataset's text is: results.jsonl could not hold this item
            step.error = (
                f"{self.name} returned text that cannot be stored: {problem}; return whole characters"
            )
        if step.error is None and isinstance(value, Mapping):
            value = self._reply(value, row, step)
        if step.error is None and trace_id is not None:
            made[row.id] = trace_id
        if step.error is not None:
            return "", step
        try:
            step.raw = as_text(value)
        except (TypeError, ValueError) as e:  # an object that is no JSON data (a datetime, a class)
            step.error = f"{self.name} returned a {type(value).__name__}, not text or JSON data ({e})"
            return "", step
        if step.reply is not None:
            step.reply["output"] = step.raw
        return step.raw or "", step

    def _reply(self, reply: Mapping[Any, Any], row: Row, step: StepResult) -> Any:
        """The answer of a mapping, its other fields checked and kept as the step's reply (for
        Target.handed); a broken contract is a ConfigError, a null output that item's error."""
        where = f"{self.label} returned a mapping for item {row.id}"
        unknown = sorted(str(k) for k in reply if k != "output" and k not in handover.HANDED)
        if unknown or "output" not in reply:
            problem = f"the unknown key {unknown[0]!r}" if unknown else "no 'output'"
            raise ConfigError(
                f"{where} with {problem} (keys: {', '.join(map(str, reply)) or 'none'}); return the answer, "
                f"or a mapping of 'output' and any of {', '.join(map(repr, handover.HANDED))}"
            )
        try:
            found = handover.fields(reply, where)
        except DataError as e:
            raise ConfigError(str(e)) from None
        if reply["output"] is None:
            step.error = f"{self.name} returned the output None; return the answer (a string)"
        step.reply = {"output": None, **handover.as_json(found)}
        return reply["output"]

    async def _call(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], pool: Executor
    ) -> tuple[Any, str | None]:
        """The function's answer, and the id of the trace the call produced when traces are read."""
        loop = asyncio.get_running_loop()
        traces = self.traces if self.reads_traces() else None
        fn = functools.partial(self.fn, **kwargs) if kwargs else self.fn
        if self.is_async:
            pending = fn(*args)
            watched = traces.wait(pending) if traces else _untraced(pending)  # in the task the call runs in
            if self._loop is not None and self._loop is not loop:
                return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(watched, self._loop))
            return await watched
        call = functools.partial(traces.call, fn, *args) if traces else functools.partial(_plain, fn, *args)
        value, trace_id = await loop.run_in_executor(pool, call)
        if inspect.isawaitable(value):  # a sync wrapper returning a coroutine
            return await (traces.wait(value) if traces else _untraced(value))
        return value, trace_id


def _plain(fn: Callable[..., Any], *args: Any) -> tuple[Any, None]:
    return fn(*args), None


async def _untraced(pending: Awaitable[Any]) -> tuple[Any, None]:
    return await pending, None
