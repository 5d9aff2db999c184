"""`evalframe ui`: the MLflow UI on the store the runs use, with the settings it needs offline.

The store is the one a run would log to with the same arguments (`tracking.uri=...`, else
`$MLFLOW_TRACKING_URI`, else ./mlflow.db), so `evalframe ui` shows what `evalframe` just logged. The
port and the store are checked first: a port in use, no store, or a store that does not answer or
cannot be written is one line and exit code 2 or 3, and nothing is started or created.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from evalframe import tracking
from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.tracking.read import check_store, last_run
from evalframe.tracking.store import display_uri

# Why the UI needs a store it can write, and so what to do when it cannot.
WRITES = (
    "the MLflow UI writes to it (run names, tags, notes, deletions): run it as a user who can write it and "
    "its directory"
)
# The UI's console says what goes wrong, not how its libraries are put together: no Python warnings
# (Starlette's deprecations), nothing below ERROR from MLflow or LiteLLM; a user who wants them sets
# the variables.
QUIET = {"PYTHONWARNINGS": "ignore", "MLFLOW_LOGGING_LEVEL": "ERROR", "LITELLM_LOG": "ERROR"}
DEFAULT_PORT = 5000
HOST = "127.0.0.1"
USAGE = (
    f"usage: evalframe ui [port=N] [tracking.uri=URI]\n"
    f"  the MLflow UI at http://{HOST}:N (default {DEFAULT_PORT}) on the store the runs log to "
    "(tracking.uri=..., else $MLFLOW_TRACKING_URI, else ./mlflow.db); Ctrl-C stops it"
)


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ConfigError(f"port={value}: give a TCP port number, e.g. port={DEFAULT_PORT}")
    return int(value)


def _listenable(port: int) -> OSError | None:
    """Why the UI could not listen on HOST:port, found by binding it as the UI's server will (with
    SO_REUSEADDR, so a port a closed UI left in TIME_WAIT counts as free); None when it can."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as e:
            return e
    return None


def _check_port(port: int) -> None:
    """A usage error when the UI could not listen on `port`, found before anything is printed or
    started: left to mlflow ui, the UI's address would be printed, then "address already in use"
    buried among INFO lines, and the exit code 0."""
    problem = _listenable(port)
    if problem:
        free = next((p for p in range(port + 1, min(port + 100, 65536)) if not _listenable(p)), None)
        what = "is in use" if problem.errno == errno.EADDRINUSE else f"cannot be used ({problem.strerror})"
        hint = f", e.g. port={free} (free now)" if free else " with port=N"
        raise ConfigError(f"port {port} on {HOST} {what}: choose another{hint}")


def main(args: list[str]) -> int:
    """Print where the last run is, then become `mlflow ui` (it runs until Ctrl-C)."""
    port = DEFAULT_PORT
    overrides = []
    for arg in args:
        if arg.startswith("port="):
            port = _port(arg.removeprefix("port="))
        elif arg.startswith("-"):  # Hydra would read it as an override: "LexerNoViableAltException"
            raise ConfigError(f"ui: cannot read {arg!r}\n{USAGE}")
        else:
            overrides.append(arg)  # tracking.uri=..., tracking.experiment=...
    settings = configs.resolve(configs.compose(overrides))["tracking"]
    uri, experiment = str(settings["uri"]), str(settings["experiment"])
    if uri.startswith(("http://", "https://")):
        # A tracking server has its own UI: nothing to start here.
        print(f"runs are on the MLflow server {display_uri(uri)}; open it in a browser")
        return 0
    _check_port(port)
    # A store that is not there is named, not created empty and served (MLflow would make the file and
    # its directories); one that does not answer or cannot be written is named before the UI starts.
    check_store(uri, WRITES)
    base = f"http://{HOST}:{port}"
    last = last_run(uri, experiment)
    where = (
        f"last run: {base}/#/experiments/{last[0]}/runs/{last[1]}"
        if last
        else f"no run in {experiment!r} yet"
    )
    print(f"MLflow UI for {uri} at {base} ({where}); Ctrl-C stops it", flush=True)
    # LiteLLM, which MLflow loads, would fetch its price list from the internet at start and hang offline.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for name, value in QUIET.items():
        env.setdefault(name, value)
    # MLflow's server-side job workers (GenAI evaluation and optimization jobs started from its UI): a
    # process of their own importing MLflow again, for nothing a browse of evalframe's runs uses; a user
    # who wants them sets the variable.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    if tracking.OWN_LOGGING:  # what evalframe set for its own process, not for MLflow's server
        env.pop(tracking.OWN_LOGGING, None)
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--registry-store-uri",  # else MLflow says it uses the backend store's, which is what it does
        uri,
        "--uvicorn-opts",  # no INFO line per request
        "--log-level warning",
    ]
    os.execve(sys.executable, command, env)
    return 0  # not reached: the process is mlflow ui now
