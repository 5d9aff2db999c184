"""`evalframe ui`: the MLflow UI on the store a run logged to, as the line after a run says."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from evalframe.cli import ui
from evalframe.errors import ConfigError
from evalframe.report.console import ui_command
from tests.conftest import _LEAKY, run_cli
from tests.mlflow_server import free_port


def test_a_bad_port_is_a_usage_error() -> None:
    with pytest.raises(ConfigError, match="port=abc: give a TCP port number"):
        ui.main(["port=abc"])


@pytest.fixture
def no_server_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """`evalframe ui` in process must stop before it becomes `mlflow ui` (an execve would replace pytest)."""

    def execve(*args: object) -> None:
        raise AssertionError("evalframe ui started the MLflow UI")

    monkeypatch.setattr(ui.os, "execve", execve)


def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path, no_server_start: None) -> None:
    """Before: the UI's address printed, mlflow's "address already in use" among its INFO lines, exit 0."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(["ui", f"port={port}"], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: port {port} on 127.0.0.1 is in use") and "port=" in line
    assert list(tmp_path.iterdir()) == []


def test_no_store_is_named_and_nothing_is_created(tmp_path: Path, no_server_start: None) -> None:
    """Before: MLflow created an empty mlflow.db (and any missing directories) and served an empty UI."""
    default, missing = tmp_path / "mlflow.db", tmp_path / "no" / "such" / "dir" / "mlflow.db"
    for args, db in (([], default), ([f"tracking.uri=sqlite:///{missing}"], missing)):
        done = run_cli(["ui", f"port={free_port()}", *args], cwd=tmp_path)
        assert (done.returncode, done.stdout) == (2, "")
        [line] = done.stderr.splitlines()
        assert line.startswith(f"error: no MLflow database at {db}: ") and "run an evaluation first" in line
        assert list(tmp_path.iterdir()) == []


def test_a_tracking_server_is_named_not_started(capsys: pytest.CaptureFixture[str]) -> None:
    assert ui.main(["tracking.uri=https://alice:s3cr3t-pass@mlflow.example:5000"]) == 0
    out = capsys.readouterr().out
    assert "runs are on the MLflow server https://***@mlflow.example:5000" in out
    assert "s3cr3t-pass" not in out


@pytest.mark.slow
def test_ui_serves_the_run_the_last_line_of_a_run_points_at(tmp_path: Path) -> None:
    done = run_cli(["scorer=exact_match"], cwd=tmp_path)  # no model: logs to ./mlflow.db in seconds
    assert done.returncode == 0, done.stderr
    line = rf"^View: {re.escape(ui_command(tmp_path))}  ->  http://127.0.0.1:5000/(#/experiments/\d+/runs/(\w+))$"
    [view] = re.findall(line, done.stdout, re.M)
    page, run_id = view
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    server = subprocess.Popen(
        [sys.executable, "-m", "evalframe", "ui", f"port={port}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = said = ""
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert f"at http://127.0.0.1:{port} (last run: http://127.0.0.1:{port}/{page})" in first
        deadline = time.monotonic() + 120
        while True:  # the UI answers for the same store: the run is there
            try:
                url = f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/get?run_id={run_id}"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    assert json.load(reply)["run"]["info"]["run_id"] == run_id
                break
            except OSError:
                assert server.poll() is None, "evalframe ui exited"
                assert time.monotonic() < deadline, "evalframe ui did not answer within 120 s"
                time.sleep(0.5)
        # MLflow's job workers (a process importing MLflow again) are not started for a browse.
        started = [" ".join(_cmdline(p)) for p in _descendants(server.pid)]
        assert started and not [c for c in started if "jobs" in c], started
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
        said = first + out + err
    # Its console is evalframe's line and what goes wrong, not its libraries' chatter. Before: MLflow's
    # "Registry store URI not provided", Starlette's DeprecationWarning, an INFO line per request.
    chatter = [line for line in said.splitlines() if re.search(r"warning|INFO|Registry store", line, re.I)]
    assert chatter == [], said


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, from /proc."""
    parents: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            ppid = next(line for line in status.read_text().splitlines() if line.startswith("PPid:"))
            parents.setdefault(int(ppid.split()[1]), []).append(int(status.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return []
