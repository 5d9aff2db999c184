"""The targets' fixture: a small JSON service on 127.0.0.1, whose replies a test chooses."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome"}


def _capital(question: str) -> str:
    return next((city for country, city in CAPITALS.items() if country in question), "I do not know")


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: Any


Reply = tuple[int, Any, dict[str, str]]  # status, JSON body (or str), headers


@dataclass
class Service:
    url: str
    reply: Callable[[Call], Reply]
    calls: list[Call] = field(default_factory=list)


@pytest.fixture
def service() -> Iterator[Service]:
    """A JSON service answering `{"answer": <capital>}`; tests swap `reply` to misbehave."""
    state = Service("", lambda call: (200, {"answer": _capital(call.body["input"])}, {}))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            call = Call(self.path, headers, json.loads(raw or b"null"))
            with lock:
                state.calls.append(call)
            status, body, headers = state.reply(call)
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/answer"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
