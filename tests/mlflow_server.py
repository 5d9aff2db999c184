"""A real `mlflow server` for the tests that need one (the UI test on SQLite, team tracking on
PostgreSQL): started on 127.0.0.1 with a free port, waited for, and always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mlflow_server(backend_uri: str, root: Path, startup: float = 180) -> Iterator[str]:
    """`mlflow server` on `backend_uri`, artifacts and log under `root`; yields its URL."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "mlflow", "server"),
        *("--backend-store-uri", backend_uri),
        *("--artifacts-destination", str(root / "artifacts")),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    env = {
        **os.environ,
        # Without it LiteLLM (which the server loads) fetches its price list and hangs offline.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        # No background job workers (GenAI evaluation jobs): processes no test here uses.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    log_path = root / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}"
        health = f"{url}/health"
        try:
            deadline = time.monotonic() + startup  # a first start creates MLflow's tables
            while True:
                with contextlib.suppress(OSError), urllib.request.urlopen(health, timeout=5) as reply:
                    if reply.status == 200:
                        break
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(f"mlflow server did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url
        finally:
            # The server forks workers: end its whole process group (which it leads), then wait.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=30)
