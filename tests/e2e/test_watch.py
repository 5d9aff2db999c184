"""The watcher as a user runs it (issue 24's done-when): `python -m evalframe ... watch.every=...` in a
process of its own against the fake judge server, traces added by the app while it runs, a SIGKILL and a
restart, then SIGTERM. Each trace is judged once: the server's requests per question and the feedbacks
per trace say so."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _LEAKY, default_sigint, fake_model, run_cli
from tests.run.test_watch import add_traces, verdicts
from tests.testserver import FakeLLMServer
from tests.traced_app import EXPERIMENT, QUESTIONS, Seeded

pytestmark = pytest.mark.slow


class Watcher:
    """`python -m evalframe ARGS` running, its stdout read line by line as it comes."""

    def __init__(self, args: list[str], cwd: Path):
        env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evalframe", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        stdout = self.process.stdout
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        """The next tick line holding `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
                continue
            if line.startswith("tick") and text in line:
                return line
        raise AssertionError(f"no tick line with {text!r} within {timeout} s")


def test_traces_added_while_it_runs_are_judged_once_through_a_sigkill_and_a_restart(
    traced_store: Seeded, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    args = [
        "dataset=mlflow_traces",
        f"dataset.experiment={EXPERIMENT}",
        "scorer=faithfulness",
        *fake_model(judge_server),
        f"tracking.uri={traced_store.uri}",
        "cache.mode=off",  # every judgment asks the server: a trace judged twice would show in its requests
        "watch.every=0.5s",
        "watch.settle=1s",
    ]
    first = Watcher(args, tmp_path)
    first.wait_for("30 judged")
    per_question = Counter(
        q for r in judge_server.requests for q in QUESTIONS if any(q in m["content"] for m in r.messages)
    )
    added = add_traces(traced_store, QUESTIONS[:2])
    first.wait_for("2 judged")
    first.process.kill()  # SIGKILL: no clean stop
    first.process.wait(30)

    added += add_traces(traced_store, QUESTIONS[2:4])  # while no watcher runs
    second = Watcher(args, tmp_path)
    second.wait_for("2 judged")
    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(60) == 0
    assert second.process.stderr is not None and "stopped:" in second.process.stderr.read()

    asked = Counter(
        q for r in judge_server.requests for q in QUESTIONS if any(q in m["content"] for m in r.messages)
    )
    twice = set(QUESTIONS[:4])  # asked by one seeded trace and by one added trace each
    assert asked == Counter({q: n * (2 if q in twice else 1) for q, n in per_question.items()})
    judged = verdicts(traced_store)
    assert set(judged) == set(traced_store.ok) | set(added)
    assert all(names == Counter({"faithfulness": 1}) for names in judged.values())


def test_a_watcher_killed_while_writing_verdicts_back_goes_on_when_started_again(
    traced_store: Seeded, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    """SIGKILL once some of the tick's verdicts are on their traces (the store then held by the test, so
    no more land), and a restart: its tick resumes, the traces that got their verdicts are done (not
    "changed rows", which stopped every restart with exit 2), the others get theirs from the journal,
    and nothing is asked of the judge again."""
    import sqlite3

    args = [
        "dataset=mlflow_traces",
        f"dataset.experiment={EXPERIMENT}",
        "scorer=faithfulness",
        *fake_model(judge_server),
        f"tracking.uri={traced_store.uri}",
        "cache.mode=off",  # a judgment asked again would show in the server's requests
        "watch.every=1s",
        "watch.settle=0s",
    ]
    first = Watcher(args, tmp_path)
    store = sqlite3.connect(traced_store.uri.removeprefix("sqlite:///"), timeout=60, isolation_level=None)
    mine = "SELECT trace_id FROM assessments WHERE name = 'faithfulness'"
    deadline = time.monotonic() + 120
    while not store.execute(mine).fetchall():
        assert first.process.poll() is None and time.monotonic() < deadline, "no verdict written"
        time.sleep(0.005)
    store.execute("BEGIN EXCLUSIVE")  # the watcher's next write waits: none lands from here on
    written = {trace_id for (trace_id,) in store.execute(mine)}
    first.process.kill()
    first.process.wait(30)
    store.execute("ROLLBACK")
    store.close()
    assert 0 < len(written) < len(traced_store.ok)
    asked = len(judge_server.requests)

    again = run_cli([*args, "watch.ticks=1"], tmp_path)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stdout + again.stderr
    left = len(traced_store.ok) - len(written)
    assert "tick 0 at" in again.stdout and f": {left} judged, {len(written)} skipped" in again.stdout
    assert len(judge_server.requests) == asked  # every item was in the tick's journal
    judged = verdicts(traced_store)
    assert set(judged) == set(traced_store.ok)
    # One verdict on every trace: those written before the kill are read again before writing, not doubled.
    assert all(names == Counter({"faithfulness": 1}) for names in judged.values()), judged
