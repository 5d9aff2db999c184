"""`evalframe ui`: the MLflow UI on the store the runs use, with the settings it needs offline.

The store is the one a run would log to with the same arguments (`tracking.uri=...`, else
`$MLFLOW_TRACKING_URI`, else ./mlflow.db), so `evalframe ui` shows what `evalframe` just logged.
"""

from __future__ import annotations

import os
import sys

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.tracking.read import last_run
from evalframe.tracking.store import display_uri

DEFAULT_PORT = 5000
HOST = "127.0.0.1"


def _port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ConfigError(f"port={value}: give a TCP port number, e.g. port={DEFAULT_PORT}")
    return int(value)


def main(args: list[str]) -> int:
    """Print where the last run is, then become `mlflow ui` (it runs until Ctrl-C)."""
    port = DEFAULT_PORT
    overrides = []
    for arg in args:
        if arg.startswith("port="):
            port = _port(arg.removeprefix("port="))
        else:
            overrides.append(arg)  # tracking.uri=..., tracking.experiment=...
    settings = configs.resolve(configs.compose(overrides))["tracking"]
    uri, experiment = str(settings["uri"]), str(settings["experiment"])
    if uri.startswith(("http://", "https://")):
        # A tracking server has its own UI: nothing to start here.
        print(f"runs are on the MLflow server {display_uri(uri)}; open it in a browser")
        return 0
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
    ]
    os.execve(sys.executable, command, env)
    return 0  # not reached: the process is mlflow ui now
