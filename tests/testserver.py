"""A local fake LLM server that real LiteLLM calls hit over HTTP.

Tests and benchmarks point LiteLLM at it (``api_base=server.base_url``, or ``server.openai_base`` for
OpenAI) so they exercise LiteLLM's real HTTP, retry and parsing code. Wire shapes are those LiteLLM
1.106.2 sends; where the structured-output schema travels:

* OpenAI     POST /v1/chat/completions  response_format.json_schema {name, schema}
             POST /v1/embeddings        (deterministic bag-of-words vectors)
* Anthropic  POST /v1/messages          output_format.schema (models with native structured output,
                                        e.g. claude-sonnet-4-5) or the input_schema of a forced tool
                                        "json_tool_call" (older models, e.g. claude-3-5-haiku)
* Gemini     POST /models/M:generateContent  generationConfig.response_json_schema
* Ollama     POST /api/chat             "format"

OpenAI's Batch API too: POST /v1/files (multipart upload of a JSONL of chat requests), POST /v1/batches,
GET /v1/batches/ID (in progress until `batch_delay` seconds after its creation, then completed, every
line answered by the responder as a chat request would be), GET /v1/files/ID/content. And Anthropic's
Message Batches: POST /v1/messages/batches (the requests inline), GET /v1/messages/batches/ID
(processing_status in_progress until `batch_delay` after its creation, then ended, each request answered
as POST /v1/messages would answer it), GET /v1/messages/batches/ID/results (JSONL). Both cancel a pending
batch (POST /v1/batches/ID/cancel, POST /v1/messages/batches/ID/cancel: counted, and the batch is
cancelling, as a real one is until it stops: it is then never answered). `expire_next`
batches, or one given to `expire`, expire instead of completing, as each provider reports it;
`batch_faults` answer the next calls of an endpoint with errors (None in the queue: that call answered as
usual); `broken_lines` break the next lines of
batches' results (cut short, without their custom_id, null).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import email.parser
import hashlib
import json
import math
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeRequest:
    protocol: str  # "openai" | "anthropic" | "gemini" | "ollama" | "embeddings"
    path: str
    model: str  # model name as sent on the wire
    messages: list[dict]  # [{"role": "system"|"user"|"assistant", "content": str}], parts joined by "\n"
    schema_name: str | None  # only OpenAI transmits the json_schema name
    schema: dict | None
    inputs: list[str]  # embeddings only
    body: dict
    headers: dict[str, str]  # keys lower-cased
    arrived: float = field(default_factory=time.monotonic)  # when it reached the server
    raw: bytes = b""  # the body as it came on the wire, byte for byte


@dataclass
class Fault:
    """Make the server misbehave on one call (returned by a responder, or drawn by error_rate)."""

    status: int = 500
    retry_after: float | None = None  # sent as Retry-After (seconds)
    delay: float = 0.0  # sleep before answering, to provoke client timeouts
    body: str | None = None  # raw body override; default is the protocol's native error JSON
    headers: dict[str, str] | None = None  # sent as they are
    trickle: float = 0.0  # answer 200 with a body sent one byte every `trickle` seconds instead


@dataclass
class RateLimit:
    """A provider's rate limit: `requests` (and, if set, `tokens` of prompt) per fixed `window` of
    seconds. Past it, a 429 with Retry-After (whole seconds), retry-after-ms and x-ratelimit-* headers
    (every answer carries the x-ratelimit-* headers, as OpenAI's do). On Anthropic's wire the headers
    are Anthropic's: anthropic-ratelimit-{requests,tokens,input-tokens}-* with the reset as an RFC 3339
    time, and a 429 says only Retry-After. Rejected requests use no budget."""

    requests: int
    window: float = 1.0
    tokens: int | None = None


Responder = Callable[[FakeRequest], "str | dict | Fault"]


# ------------------------------------------------------------------ default responder: schema echo
def _example(schema: Any, root: dict, depth: int = 0) -> Any:
    """Minimal valid instance of a JSON schema: required properties only, one array item."""
    if not isinstance(schema, dict) or depth > 32:  # depth guard against recursive $refs
        return None
    if "$ref" in schema:  # local JSON pointer such as "#/$defs/Item"
        target: Any = root
        for part in filter(None, schema["$ref"].lstrip("#").split("/")):
            target = target.get(part, {})
        return _example(target, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):  # Optional[X] arrives as anyOf [X, null]: prefer the non-null branch
        if schema.get(key):
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return _example(options[0], root, depth + 1)
    if schema.get("allOf"):  # merge the parts into one schema
        return _example({k: v for part in schema["allOf"] for k, v in part.items()}, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _example(props.get(k, {}), root, depth + 1) for k in schema.get("required", [])}
    if kind == "array":
        return [_example(schema.get("items", {}), root, depth + 1)] * max(1, schema.get("minItems", 1))
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        return max(0, math.ceil(low or 0) + ("exclusiveMinimum" in schema))
    return False if kind == "boolean" else None


def echo_schema_responder(req: FakeRequest) -> str | dict:
    """Default responder: a minimal valid instance of the request's schema, or "ok" without one."""
    return "ok" if req.schema is None else json.dumps(_example(req.schema, req.schema))


# ------------------------------------------------------------------ constrained decoder
WORDS = [
    "the",
    "a",
    "judge",
    "river",
    "seven",
    "blue",
    "capital",
    "runs",
    "quickly",
    "paris",
    "1945",
    "water",
    "not",
    "is",
    "of",
    "and",
]


def _resolve(schema: dict, root: dict) -> dict:
    """Follow a local $ref ("#/$defs/Item"; LiteLLM's Anthropic tool form drops the "#")."""
    while "$ref" in schema:
        target: Any = root
        for part in filter(None, schema["$ref"].lstrip("#").split("/")):
            target = target.get(part, {})
        schema = target
    return schema


def random_instance(schema: Any, root: dict, rng: random.Random, depth: int = 0) -> Any:
    """A random instance of a JSON schema, as a constrained decoder produces one knowing nothing but the
    schema: a random member of each enum, a random branch of each anyOf (null included), every required
    property and a coin flip for each optional one, arrays of random length within minItems/maxItems (0
    to 3 when unbounded), numbers within minimum/maximum (-1000 to 1000 when unbounded), strings of
    random words (empty ones included)."""
    if not isinstance(schema, dict) or depth > 32:
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return random_instance(rng.choice(schema[key]), root, rng, depth + 1)
    if schema.get("allOf"):
        merged = {k: v for part in schema["allOf"] for k, v in _resolve(part, root).items()}
        return random_instance(merged, root, rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", [])
        keys = [k for k in props if k in required or rng.random() < 0.5]
        return {k: random_instance(props[k], root, rng, depth + 1) for k in keys}
    if kind == "array":
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", low + 3)
        n = rng.randint(low, high)
        return [random_instance(schema.get("items", {}), root, rng, depth + 1) for _ in range(n)]
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
        text = text.ljust(low, "x")
        return text if high is None else text[:high]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1000))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 1000))
        if kind == "integer":
            low = math.ceil(low) + ("exclusiveMinimum" in schema)
            high = math.floor(high) - ("exclusiveMaximum" in schema)
            return rng.randint(low, high)
        value = rng.uniform(low, high)
        return (
            value
            if low < value < high or not ({"exclusiveMinimum", "exclusiveMaximum"} & set(schema))
            else (low + high) / 2
        )
    if kind == "boolean":
        return rng.random() < 0.5
    return None


def constrained_decoder(seed: int = 0) -> Responder:
    """A responder that answers every structured request with a random instance of the schema it
    received, on every wire, and free text with random words: a judge that follows the schema exactly
    and knows nothing of the prompt. Seeded, so a run is reproducible (for the same request order)."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def respond(req: FakeRequest) -> str:
        with lock:
            if req.schema is None:
                return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
            return json.dumps(random_instance(req.schema, req.schema, rng))

    return respond


# ------------------------------------------------------------------ request parsing
def _text(content: Any) -> str:
    """Flatten str / list-of-parts content (OpenAI, Anthropic and Gemini part shapes) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in map(_text, content) if t)
    if isinstance(content, dict):
        text = content.get("text")
        return text if isinstance(text, str) else _text(content.get("content") or content.get("parts"))
    return ""


def _msg(role: str, content: Any) -> dict:
    return {"role": {"model": "assistant", "developer": "system"}.get(role, role), "content": _text(content)}


def _anthropic_forced_tool(body: dict) -> dict | None:
    choice = body.get("tool_choice") or {}
    if choice.get("type") != "tool":
        return None
    return next((t for t in body.get("tools", []) if t.get("name") == choice.get("name")), None)


def _parse(path: str, body: dict, headers: dict[str, str]) -> FakeRequest | None:
    """Recognise the protocol by path and pull out model, messages and schema; None if unknown."""
    model = body.get("model", "")
    msgs = [_msg(m.get("role", "user"), m.get("content")) for m in body.get("messages", [])]
    name: str | None = None
    schema: dict | None = None
    if path.endswith("/embeddings"):
        raw = body.get("input", [])
        inputs = [raw] if isinstance(raw, str) else [str(i) for i in raw]
        return FakeRequest("embeddings", path, model, [], None, None, inputs, body, headers)
    if path.endswith("/chat/completions"):
        protocol, rf = "openai", body.get("response_format") or {}
        if rf.get("type") == "json_schema":
            js = rf.get("json_schema") or {}
            name, schema = js.get("name"), js.get("schema")
    elif path.endswith("/messages"):
        protocol = "anthropic"
        if body.get("system"):
            msgs.insert(0, _msg("system", body["system"]))
        fmt = body.get("output_format") or (body.get("output_config") or {}).get("format") or {}
        tool = _anthropic_forced_tool(body)
        schema = fmt.get("schema") or (tool or {}).get("input_schema")
    elif path.endswith(":generateContent"):
        protocol, model = "gemini", path.rsplit("/models/", 1)[-1].split(":", 1)[0]
        system = body.get("system_instruction") or body.get("systemInstruction")
        msgs = [_msg("system", system)] if system else []  # gemini-2.0 gets system text inlined instead
        msgs += [_msg(c.get("role", "user"), c.get("parts")) for c in body.get("contents", [])]
        gc = body.get("generationConfig") or body.get("generation_config") or {}
        keys = ("response_json_schema", "responseJsonSchema", "response_schema", "responseSchema")
        schema = next((gc[k] for k in keys if gc.get(k)), None)
    elif path == "/api/chat":
        protocol, fmt = "ollama", body.get("format")
        schema = fmt if isinstance(fmt, dict) else None  # format="json" is schema-less JSON mode
    else:
        return None
    return FakeRequest(protocol, path, model, msgs, name, schema, [], body, headers)


# ------------------------------------------------------------------ replies in each native shape
def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)  # ~4 chars/token: only needs to be positive and stable


def _chat_reply(req: FakeRequest, text: str) -> dict:
    n_in, n_out = _tokens(" ".join(m["content"] for m in req.messages)), _tokens(text)
    if req.protocol == "openai":
        message = {"role": "assistant", "content": text}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        }
    if req.protocol == "anthropic":
        block: dict = {"type": "text", "text": text}
        tool = _anthropic_forced_tool(req.body)
        # With a forced tool the model answers by calling it, and LiteLLM turns the tool input back
        # into message.content. Text that is not a JSON object cannot be a tool input, so it goes out
        # as a text block, which LiteLLM passes through verbatim: deliberate junk stays testable.
        try:
            parsed = json.loads(text) if tool else None
        except ValueError:
            parsed = None
        if tool and isinstance(parsed, dict):
            block = {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": tool["name"],
                "input": parsed,
            }
        return {
            "id": f"msg_{uuid.uuid4().hex[:12]}",
            "type": "message",
            "role": "assistant",
            "model": req.model,
            "content": [block],
            "stop_sequence": None,
            "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
            "usage": {"input_tokens": n_in, "output_tokens": n_out},
        }
    if req.protocol == "gemini":
        content = {"role": "model", "parts": [{"text": text}]}
        candidate = {"content": content, "finishReason": "STOP", "index": 0}
        usage = {"promptTokenCount": n_in, "candidatesTokenCount": n_out, "totalTokenCount": n_in + n_out}
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": req.model}
    return {
        "model": req.model,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),  # ollama
        "message": {"role": "assistant", "content": text},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": n_in,
        "eval_count": n_out,
    }


def embed(text: str, dims: int = 16) -> list[float]:
    """Unit-length hashed bag of words: equal texts -> cosine 1.0, shared words -> higher cosine."""
    vec = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()) or [""]:  # "" keeps an empty text away from 0-vector
        vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % dims] += 1.0  # md5: stable across runs
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


def _embeddings_reply(req: FakeRequest) -> dict:
    dims = int(req.body.get("dimensions") or 16)
    data: list[dict] = []
    for i, text in enumerate(req.inputs):
        vec: Any = embed(text, dims)
        if req.body.get("encoding_format") == "base64":  # the openai SDK's default (LiteLLM omits it)
            vec = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vec})
    n = sum(_tokens(t) for t in req.inputs)
    usage = {"prompt_tokens": n, "total_tokens": n}
    return {"object": "list", "data": data, "model": req.model, "usage": usage}


def _error_body(protocol: str, status: int, message: str) -> dict:
    # Anthropic's "overloaded_error" is its 529; LiteLLM maps that text to InternalServerError whatever
    # the status, so it must not be used for 503.
    kind = {
        400: "invalid_request_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    if protocol == "gemini":
        return {"error": {"code": status, "message": message, "status": kind.upper()}}
    return {"error": {"message": message, "type": kind, "code": status}}


# ------------------------------------------------------------------ HTTP plumbing
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive like the real APIs; every reply sets Content-Length
    # Headers and body go out as two writes: with Nagle's algorithm on, the body waits for the client's
    # delayed ACK of the headers (40 ms on Linux), which real APIs' servers do not add to every reply.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests own the console
        pass

    def send(
        self, status: int, payload: dict | str, headers: dict[str, str] | None = None, trickle: float = 0.0
    ) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        try:
            self.send_response(status)
            for k, v in {
                "Content-Type": "application/json",
                "Content-Length": str(len(data)),
                **(headers or {}),
            }.items():
                self.send_header(k, v)
            self.end_headers()
            if not trickle:
                self.wfile.write(data)
            for i in range(len(data) if trickle else 0):  # a byte at a time: every read gets something
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(trickle)
        except OSError:  # the client gave up (timeout) and closed the socket
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path == "/_stats":  # for a server in another process (the benchmark counts calls here)
            owner = self.server.owner
            with owner._lock:
                by_schema: dict[str, int] = {}
                by_protocol: dict[str, int] = {}  # chat calls and embedding calls apart
                for r in owner.requests:
                    by_schema[str(r.schema_name)] = by_schema.get(str(r.schema_name), 0) + 1
                    by_protocol[r.protocol] = by_protocol.get(r.protocol, 0) + 1
                # a request that carries an earlier reply is a follow-up, e.g. a correction of an invalid one
                followups = sum(any(m["role"] == "assistant" for m in r.messages) for r in owner.requests)
                stats = {
                    "requests": len(owner.requests),
                    "faults": owner.faults,
                    "by_schema": by_schema,
                    "by_protocol": by_protocol,
                    "followups": followups,
                    "rate_limited": owner.rate_limited,
                    "early": owner.early,
                    "arrivals": owner.arrivals,
                    "first": owner.first,  # wall clock of the first request's arrival (None: none yet)
                    "peak_in_flight": owner.peak_in_flight,  # most requests in their latency at once
                    "batched": owner.batched,  # chat requests answered in batches (also in requests)
                    "batch_api": dict(owner.batch_api),  # calls of each batch endpoint
                }
            return self.send(200, stats)
        if self.path.startswith(("/v1/batches/", "/v1/files/", "/v1/messages/batches/")):
            return self.server.owner._batch_api(self, b"")
        self.send(404, _error_body("openai", 404, f"unknown path {self.path}"))

    def do_POST(self) -> None:
        self.server.owner._handle(self)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # stop() never waits for a handler sleeping through a Fault.delay
    request_queue_size = 256  # listen backlog for 32+ concurrent clients
    owner: FakeLLMServer
    conns: set[socket.socket]

    def process_request(self, request: Any, client_address: Any) -> None:
        self.conns.add(request)  # remembered so stop() can cut idle keep-alive connections
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.conns.discard(request)
        super().shutdown_request(request)


class RequestLog:
    """What a fake model was asked (`requests`, embeddings included) and how often it failed on
    purpose (`faults`): the server and the in-process scripted model (tests/scripted.py) alike."""

    def __init__(self) -> None:
        self.requests: list[FakeRequest] = []
        self.faults = 0
        self.rate_limited = 0  # requests answered 429 by the rate limit (not by a Fault)
        self.early = 0  # requests that came back before the Retry-After their last 429 gave them
        self.arrivals: list[float] = []  # time.monotonic() of every request, in rate-limit mode
        self.first: float | None = None  # time.time() when the first request arrived
        self.batched = 0  # chat requests answered through the batch API
        self.batch_api: dict[str, int] = {}  # "upload", "create", "retrieve", "content" -> calls
        self.in_flight = self.peak_in_flight = 0  # requests in their latency at once: now, at most
        self._lock = threading.Lock()

    def count(self, schema_name: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if schema_name is None or r.schema_name == schema_name)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.faults = 0
            self.rate_limited = self.early = 0
            self.arrivals.clear()
            self.first = None
            self.batched = 0
            self.batch_api = {}
            self.peak_in_flight = self.in_flight


class FakeLLMServer(RequestLog):
    def __init__(
        self,
        responder: Responder | None = None,
        latency: float = 0.0,
        error_rate: float = 0.0,
        error_statuses: tuple[int, ...] = (429, 500, 503),
        seed: int = 0,
        port: int = 0,
        rate_limit: RateLimit | None = None,
        batch_delay: float = 0.0,
    ):
        self.responder: Responder = responder or echo_schema_responder
        self.batch_delay = batch_delay  # seconds from a batch's creation to its completion
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.expire_next = 0  # the next N batches created expire (the provider gave up on them) when due
        # "upload", "create", "retrieve", "content", "cancel" -> faults answering the next calls of that
        # endpoint (None: that one answered as usual)
        self.batch_faults: dict[str, list[Fault | None]] = {}
        # how the next lines of batches' results are broken, one each: "malformed", "no custom_id", "null"
        self.broken_lines: list[str] = []
        self.latency, self.error_rate, self.error_statuses = latency, error_rate, error_statuses
        self.seed, self.port = seed, port  # port=0: pick a free one
        self.rate_limit = rate_limit
        super().__init__()
        self._rng = random.Random(seed)
        self._httpd: _HTTPServer | None = None
        self._window = (time.monotonic(), 0, 0)  # rate-limit mode: (start, requests, tokens) of this window
        self._not_before: dict[str, float] = {}  # request body hash -> when its 429 said to come back

    def start(self) -> FakeLLMServer:
        httpd = self._httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        httpd.owner, httpd.conns = self, set()
        # short poll interval because shutdown() waits up to one, and tests start and stop a lot
        threading.Thread(target=httpd.serve_forever, args=(0.02,), name="fake-llm", daemon=True).start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()  # stop accepting
        for conn in list(httpd.conns):  # wake handlers parked on idle keep-alive sockets
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_base(self) -> str:
        return self.base_url + "/v1"

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._rng = random.Random(self.seed)  # same seed -> same fault sequence after a reset
            self._window = (time.monotonic(), 0, 0)
            self._not_before.clear()

    def _limits(self, now: float, protocol: str) -> tuple[dict[str, str], float]:
        """The rate-limit headers of the current window (lock held), and the seconds until it ends."""
        assert self.rate_limit is not None
        limit = self.rate_limit
        start, used, tokens = self._window
        if now >= start + limit.window:  # a new window (the fixed grid from the server's start)
            start += limit.window * ((now - start) // limit.window)
            used, tokens, self._window = 0, 0, (start, 0, 0)
        reset = start + limit.window - now
        # Anthropic's reset is a time to the second: rounded up, so a client waiting for it is never early.
        anthropic = protocol == "anthropic"
        at = _iso(math.ceil(time.time() + reset)) if anthropic else f"{reset:.3f}s"
        counts = {"requests": (limit.requests, used)}
        if limit.tokens is not None:
            counts["tokens"] = (limit.tokens, tokens)
            if anthropic:  # the prompt's tokens, which is what this server counts
                counts["input-tokens"] = counts["tokens"]
        headers = {}
        for kind, (most, spent) in counts.items():
            for what, value in (("limit", most), ("remaining", max(0, most - spent)), ("reset", at)):
                name = f"anthropic-ratelimit-{kind}-{what}" if anthropic else f"x-ratelimit-{what}-{kind}"
                headers[name] = str(value)
        return headers, reset

    def _admit(self, req: FakeRequest, raw: bytes) -> dict[str, str] | None:
        """Rate-limit mode: count the request in its window; None if within the limit, else the 429's
        headers. A request whose identical body was told to wait and is back too soon counts as early."""
        assert self.rate_limit is not None
        now, key = time.monotonic(), hashlib.sha1(raw).hexdigest()
        need = _tokens(" ".join(m["content"] for m in req.messages) + " ".join(req.inputs))
        with self._lock:
            self.arrivals.append(now)
            if now < self._not_before.pop(key, 0.0):
                self.early += 1
            headers, reset = self._limits(now, req.protocol)
            start, used, tokens = self._window
            over_tokens = self.rate_limit.tokens is not None and tokens + need > self.rate_limit.tokens
            if used < self.rate_limit.requests and not over_tokens:
                self._window = (start, used + 1, tokens + need)
                return None
            self.rate_limited += 1
            self._not_before[key] = now + math.ceil(reset * 1000) / 1000
            wait = {"Retry-After": str(math.ceil(reset))}
            if req.protocol != "anthropic":
                wait["retry-after-ms"] = str(math.ceil(reset * 1000))
            return {**headers, **wait}

    def _handle(self, h: _Handler) -> None:
        arrived = time.time()
        with self._lock:
            self.first = self.first or arrived
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        path = h.path.split("?", 1)[0]
        if path in ("/v1/files", "/v1/batches", "/v1/messages/batches") or path.endswith("/cancel"):
            return self._batch_api(h, raw)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return h.send(400, _error_body("openai", 400, "body is not JSON"))
        req = _parse(path, body, {k.lower(): v for k, v in h.headers.items()})
        if req is None:
            return h.send(404, _error_body("openai", 404, f"unknown path {path}"))
        req.raw = raw
        if body.get("stream") and req.protocol != "ollama":  # one JSON line is a valid ollama stream
            return h.send(400, _error_body(req.protocol, 400, "FakeLLMServer does not stream"))
        if self.rate_limit is not None:
            refused = self._admit(req, raw)
            if refused is not None:  # at once, as providers do: a 429 costs no model time
                return h.send(429, _error_body(req.protocol, 429, "Rate limit reached for requests"), refused)
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            time.sleep(self.latency)  # per request; the threaded server lets concurrent sleeps overlap
        finally:
            with self._lock:
                self.in_flight -= 1
        with self._lock:
            drawn = self._rng.random() < self.error_rate
            status = self._rng.choice(self.error_statuses) if drawn else 0
        result: str | dict | Fault
        if drawn:
            result = Fault(status=status, retry_after=0.05 if status == 429 else None)
        elif req.protocol == "embeddings":  # responders are written for chat, so they never see these
            result = _embeddings_reply(req)
        else:
            try:
                result = self.responder(req)
            except Exception as exc:  # a broken test responder should fail loudly, not hang the client
                return h.send(500, _error_body(req.protocol, 500, f"responder raised {exc!r}"))
        if isinstance(result, Fault):
            with self._lock:
                self.faults += 1
            time.sleep(result.delay)
            payload = result.body
            if payload is None:
                payload = json.dumps(_error_body(req.protocol, result.status, f"fake {result.status}"))
            headers = {} if result.retry_after is None else {"Retry-After": f"{result.retry_after:g}"}
            return h.send(result.status, payload, {**headers, **(result.headers or {})}, result.trickle)
        if req.protocol != "embeddings":
            result = _chat_reply(req, result if isinstance(result, str) else json.dumps(result))
        with self._lock:
            self.requests.append(req)
            limits = self._limits(time.monotonic(), req.protocol)[0] if self.rate_limit is not None else {}
        h.send(200, result, limits)

    # -------------------------------------------------------------- batch APIs: OpenAI's, Anthropic's
    def _batch_api(self, h: _Handler, raw: bytes) -> None:
        path = h.path.split("?", 1)[0]
        wire = "anthropic" if path.startswith("/v1/messages/batches") else "openai"
        kind = {"/v1/files": "upload", "/v1/batches": "create", "/v1/messages/batches": "create"}.get(path)
        kind = kind or ("content" if path.endswith(("/content", "/results")) else "retrieve")
        kind = "cancel" if path.endswith("/cancel") else kind
        with self._lock:
            queue = self.batch_faults.get(kind)
            fault = queue.pop(0) if queue else None
            self.faults += fault is not None
        if fault is not None:
            payload = fault.body or json.dumps(_error_body(wire, fault.status, f"fake {fault.status}"))
            return h.send(fault.status, payload)
        reply: dict | str | None
        if path == "/v1/files":
            reply = self._upload(h, raw)
        elif path == "/v1/batches":
            reply = self._create_batch(json.loads(raw or b"{}"))
        elif path == "/v1/messages/batches":
            headers = {k.lower(): v for k, v in h.headers.items()}
            reply = self._create_message_batch(json.loads(raw or b"{}"), headers)
        elif kind == "cancel":
            reply = self._cancel(path.split("/")[-2])
        elif path.startswith("/v1/messages/batches/") and kind == "content":
            reply = (self.batches.get(path.split("/")[4]) or {}).get("_results")  # once the batch has ended
        elif path.startswith(("/v1/batches/", "/v1/messages/batches/")):
            reply = self._batch(path.rsplit("/", 1)[-1])
        elif path.startswith("/v1/files/") and kind == "content":
            content = self.files.get(path.split("/")[3])
            reply = None if content is None else content.decode()
        else:
            return h.send(404, _error_body(wire, 404, f"unknown path {path}"))
        with self._lock:
            self.batch_api[kind] = self.batch_api.get(kind, 0) + 1
        if reply is None:
            return h.send(404, _error_body(wire, 404, f"no such batch, file or results: {path}"))
        h.send(200, reply, {"Content-Type": "application/octet-stream"} if isinstance(reply, str) else None)

    def _cancel(self, batch_id: str) -> dict | None:
        batch = self.batches.get(batch_id)
        if batch is None:
            return None
        with self._lock:  # each provider's spelling
            if "status" in batch:
                batch["status"] = "cancelling"
            else:
                batch["processing_status"] = "canceling"
        return self._public(batch)

    def expire(self, batch_id: str) -> None:
        """The provider gives up on a pending batch (as after its 24 h): when due, it expires instead."""
        self.batches[batch_id]["_expires"] = True

    def _upload(self, h: _Handler, raw: bytes) -> dict:
        """A multipart/form-data upload (purpose, file)."""
        head = f"Content-Type: {h.headers.get('Content-Type')}\r\n\r\n".encode()
        message = email.parser.BytesParser().parsebytes(head + raw)
        payload: list[Any] = message.get_payload()  # type: ignore[assignment]
        parts: dict[str, Any] = {p.get_param("name", header="content-disposition"): p for p in payload}
        data = parts["file"].get_payload(decode=True)
        file_id = f"file-{uuid.uuid4().hex[:16]}"
        with self._lock:
            self.files[file_id] = data
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": parts["file"].get_filename() or "batch.jsonl",
            "purpose": parts["purpose"].get_payload(decode=True).decode() if "purpose" in parts else "batch",
            "status": "processed",
        }

    def _create_batch(self, body: dict) -> dict | None:
        lines = self.files.get(body.get("input_file_id", ""), b"").decode().splitlines()
        if not lines:
            return None
        batch_id = f"batch_{uuid.uuid4().hex[:16]}"
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body.get("endpoint", "/v1/chat/completions"),
            "errors": None,
            "input_file_id": body["input_file_id"],
            "completion_window": body.get("completion_window", "24h"),
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(time.time()),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": body.get("metadata"),
        }
        return self._keep(batch)

    def _create_message_batch(self, body: dict, headers: dict[str, str]) -> dict | None:
        """Anthropic's: the requests come inline, `{"custom_id", "params": <a /v1/messages body>}`."""
        requests = body.get("requests") or []
        if not requests:
            return None
        now = time.time()
        batch = {
            "id": f"msgbatch_{uuid.uuid4().hex[:16]}",
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {
                "processing": len(requests),
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "ended_at": None,
            "created_at": _iso(now),
            "expires_at": _iso(now + 24 * 3600),
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": None,
            "_requests": requests,
            "_headers": headers,  # the batch's requests carry them (anthropic-beta ...)
        }
        return self._keep(batch)

    def _keep(self, batch: dict) -> dict:
        with self._lock:
            batch.update(_created=time.monotonic(), _expires=self.expire_next > 0)
            self.expire_next = max(0, self.expire_next - 1)
            self.batches[batch["id"]] = batch
        return self._public(batch)

    def _batch(self, batch_id: str) -> dict | None:
        batch = self.batches.get(batch_id)
        if batch is None:
            return None
        if batch.get("status", batch.get("processing_status")) in ("validating", "in_progress"):
            if time.monotonic() - batch["_created"] < self.batch_delay:
                batch["status" if "status" in batch else "processing_status"] = "in_progress"
            elif "_requests" in batch:
                self._end_message_batch(batch)
            else:
                self._complete(batch)
        return self._public(batch)

    def _answer(self, req: FakeRequest) -> tuple[int, dict]:
        """A batched request answered as its endpoint answers it alone: the status and the reply, or the
        error body of a Fault."""
        result = self.responder(req)
        if isinstance(result, Fault):
            with self._lock:
                self.faults += 1
            return result.status, _error_body(req.protocol, result.status, f"fake {result.status}")
        reply = _chat_reply(req, result if isinstance(result, str) else json.dumps(result))
        with self._lock:
            self.requests.append(req)
            self.batched += 1
        return 200, reply

    def _complete(self, batch: dict) -> None:
        """Answer every line as the chat endpoint would (faults become that line's error)."""
        if batch["_expires"]:
            batch.update(status="expired", expired_at=int(time.time()))
            return
        out = []
        for line in self.files[batch["input_file_id"]].decode().splitlines():
            task = json.loads(line)
            req = _parse(task["url"], task["body"], {})
            assert req is not None and req.protocol == "openai", task["url"]
            status, body = self._answer(req)
            out.append(
                {
                    "id": f"batch_req_{uuid.uuid4().hex[:12]}",
                    "custom_id": task["custom_id"],
                    "response": {"status_code": status, "request_id": uuid.uuid4().hex, "body": body},
                    "error": None,
                }
            )
        file_id = f"file-{uuid.uuid4().hex[:16]}"
        with self._lock:
            self.files[file_id] = "".join(self._line(o) + "\n" for o in out).encode()
            done = sum(1 for o in out if o["response"]["status_code"] == 200)
            batch.update(
                status="completed",
                output_file_id=file_id,
                completed_at=int(time.time()),
                request_counts={"total": len(out), "completed": done, "failed": len(out) - done},
            )

    def _end_message_batch(self, batch: dict) -> None:
        """Answer every request as POST /v1/messages would; an expiring batch ends with all expired."""
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        out = []
        for request in batch["_requests"]:
            result: dict[str, Any] = {"type": "expired"}
            if not batch["_expires"]:
                req = _parse("/v1/messages", request["params"], batch["_headers"])
                assert req is not None and req.protocol == "anthropic"
                status, body = self._answer(req)
                ok = status == 200
                result = {"type": "succeeded", "message": body} if ok else {"type": "errored", "error": body}
            counts[result["type"]] += 1
            out.append({"custom_id": request["custom_id"], "result": result})
        with self._lock:
            batch.update(
                processing_status="ended",
                ended_at=_iso(time.time()),
                request_counts=counts,
                results_url=f"{self.base_url}/v1/messages/batches/{batch['id']}/results",
                _results="".join(self._line(o) + "\n" for o in out),
            )

    def _line(self, answer: dict) -> str:
        """One line of a batch's results, broken as `broken_lines` says next (lock held)."""
        how = self.broken_lines.pop(0) if self.broken_lines else None
        text = json.dumps(answer)
        if how == "malformed":  # cut short, as a truncated download
            return text[: len(text) // 2]
        if how == "no custom_id":
            return json.dumps({k: v for k, v in answer.items() if k != "custom_id"})
        return "null" if how == "null" else text

    @staticmethod
    def _public(batch: dict) -> dict:
        return {k: v for k, v in batch.items() if not k.startswith("_")}


def _iso(seconds: float) -> str:
    """A time as Anthropic writes one (RFC 3339, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Run the evalframe fake LLM server until Ctrl-C.")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds slept per request")
    ap.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 429/500/503")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rate-limit", default=None, help="N/SECONDS: N requests per window of SECONDS, then 429 (e.g. 40/1)"
    )
    ap.add_argument("--batch-delay", type=float, default=0.0, help="seconds before a batch completes")
    ap.add_argument("--responder", default=None, help="module:function answering requests (default: echo)")
    ap.add_argument(
        "--constrained",
        action="store_true",
        help="answer every request with a random instance of its JSON schema (seeded by --seed)",
    )
    args = ap.parse_args(argv)
    responder = constrained_decoder(args.seed) if args.constrained else None
    if args.responder:
        import importlib

        module, _, name = args.responder.partition(":")
        responder = getattr(importlib.import_module(module), name)
    limit = None
    if args.rate_limit:
        n, _, window = args.rate_limit.partition("/")
        limit = RateLimit(int(n), float(window or 1))
    server = FakeLLMServer(
        responder=responder,
        latency=args.latency,
        error_rate=args.error_rate,
        seed=args.seed,
        port=args.port,
        rate_limit=limit,
        batch_delay=args.batch_delay,
    )
    print(f"fake LLM server at {server.start().base_url}  (OpenAI base: {server.openai_base})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
