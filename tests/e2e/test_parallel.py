"""Parallel sweeps (hydra/launcher=joblib): the same scores, parent and child runs and judge calls as a
sequential sweep, and a shared judge cache that several processes use at once without harm."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalframe.models.cache import Cache
from tests.conftest import fake_model, run_cli, run_process, sweep_runs
from tests.testserver import FakeLLMServer

SWEEP = ["penalties.missing=0.05,0.3", "penalties.contradiction=0.1,1.0"]
GATE = "+gate.min_score.answer_similarity=0.99"  # every job fails it: the worst job's code is the sweep's


def _sweep(server: FakeLLMServer, cwd: Path, cache: Path, *launcher: str) -> subprocess.CompletedProcess[str]:
    """The sweep, with `launcher` in a process of its own (its workers are processes), else in process."""
    cwd.mkdir()
    return run_cli(
        ["-m", "scorer=answer_similarity", *fake_model(server), "dataset.limit=10", *SWEEP, GATE, *launcher],
        cwd=cwd,
        env={"OPENAI_API_KEY": "sk-x", "EVALFRAME_CACHE_DIR": str(cache)},
        process=bool(launcher),
    )


def _scores(cwd: Path) -> dict[tuple[str, ...], dict[str, float | None]]:
    """Every job's per-item scores, keyed by the job's overrides."""
    jobs = {}
    for manifest in cwd.glob("multirun/*/*/*/run.json"):
        overrides = tuple(sorted(json.loads(manifest.read_text())["overrides"]))
        lines = (manifest.parent / "results.jsonl").read_text().splitlines()
        items = [json.loads(line) for line in lines]
        jobs[overrides] = {i["id"]: i["scores"]["answer_similarity"]["score"] for i in items}
    return jobs


@pytest.mark.slow
def test_a_joblib_sweep_matches_a_sequential_one(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    sequential = _sweep(judge_server, tmp_path / "seq", tmp_path / "c1")
    assert sequential.returncode == 1, sequential.stderr  # the gate
    calls = judge_server.count()
    judge_server.reset()
    parallel = _sweep(
        judge_server, tmp_path / "par", tmp_path / "c2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"
    )
    assert "sweep: 4 jobs, best first" in parallel.stdout
    # A job failing its gate in a worker process fails the sweep, as it does in process.
    assert re.search(r"^job \d: penalties.missing=0.05 .* exit 1  FAILED$", parallel.stdout, re.M)
    assert parallel.returncode == 1, parallel.stderr
    # Two jobs start at once on an empty cache; the cache's claims still ask each request once.
    assert judge_server.count() == calls > 0

    # Every job scored every item exactly as the sequential sweep did.
    expected = _scores(tmp_path / "seq")
    assert len(expected) == 4 and all(len(items) == 10 for items in expected.values())
    assert _scores(tmp_path / "par") == expected

    # The jobs ran in joblib's worker processes (each run records its process), and the parent run id
    # reached them (children below).
    parent, children = sweep_runs(f"sqlite:///{tmp_path / 'par' / 'mlflow.db'}")
    assert len(children) == 4 and parent.info.status == "FINISHED"
    workers = {c.data.tags["evalframe.pid"] for c in children}
    assert parent.data.tags["evalframe.pid"] not in workers and len(workers) >= 2
    swept = {(c.data.params["penalties.missing"], c.data.params["penalties.contradiction"]) for c in children}
    assert swept == {("0.05", "0.1"), ("0.05", "1.0"), ("0.3", "0.1"), ("0.3", "1.0")}

    # The shared cache is intact: one reply per request, no claim left behind.
    db = sqlite3.connect(tmp_path / "c2" / "replies.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert db.execute("SELECT COUNT(*) FROM replies").fetchone() == (calls,)
    assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)


# The claim itself, process against process, without the CLI around it.

_ASKER = """
import asyncio, sys, time
from evalframe.models.cache import Cache
cache = Cache("readwrite", sys.argv[1])
async def main():
    hit = await cache.claim("k", patience=60)
    if hit is None:          # this process asks: one "model call", slow enough to overlap
        print("asked", flush=True)
        time.sleep(0.5)
        cache.put("k", {"raw": sys.argv[2]})
    else:
        print("waited", hit["raw"], flush=True)
asyncio.run(main())
"""


@pytest.mark.slow
def test_processes_asking_the_same_request_make_one_call(tmp_path: Path) -> None:
    Cache("readwrite", tmp_path)  # create the file first, as a run does before its jobs
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ASKER, str(tmp_path), name], stdout=subprocess.PIPE, text=True
        )
        for name in "abcd"
    ]
    outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    asked = [o for o in outputs if o == "asked"]
    assert len(asked) == 1, outputs
    answer = Cache("read", tmp_path).get("k")
    assert answer is not None
    assert sorted(outputs) == sorted(["asked", *[f"waited {answer['raw']}"] * 3])


@pytest.mark.slow
def test_a_claim_of_a_dead_process_is_taken_over_at_once(tmp_path: Path) -> None:
    cache = Cache("readwrite", tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    db = sqlite3.connect(tmp_path / "replies.sqlite")
    db.execute("INSERT INTO pending VALUES ('k', ?, ?, ?)", (cache.host, pid, time.time()))
    db.commit()
    started = time.monotonic()
    assert asyncio.run(cache.claim("k", patience=600)) is None  # ours now: ask
    assert time.monotonic() - started < 5
    cache.release("k")
    assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)


@pytest.mark.slow
def test_a_claim_older_than_the_patience_is_taken_over(tmp_path: Path) -> None:
    cache = Cache("readwrite", tmp_path)
    db = sqlite3.connect(tmp_path / "replies.sqlite")
    # A live process on another host (its pid cannot be checked from here) that never answers.
    db.execute("INSERT INTO pending VALUES ('k', 'elsewhere', 1, ?)", (time.time(),))
    db.commit()
    started = time.monotonic()
    assert asyncio.run(cache.claim("k", patience=0.5)) is None
    assert 0.5 <= time.monotonic() - started < 5
    cache.put("k", {"raw": "x"})
    assert db.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)


def test_other_cache_modes_never_wait(tmp_path: Path) -> None:
    Cache("readwrite", tmp_path)
    db = sqlite3.connect(tmp_path / "replies.sqlite")
    db.execute("INSERT INTO pending VALUES ('k', 'elsewhere', 1, ?)", (time.time(),))
    db.commit()
    for mode in ("read", "write", "off"):
        assert asyncio.run(Cache(mode, tmp_path).claim("k", patience=600)) is None


@pytest.mark.slow
def test_a_ray_sweep_on_a_local_ray_instance(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    result = run_process(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "dataset.limit=4",
            "penalties.missing=0.05,0.3",
            "hydra/launcher=ray",
            "+hydra.launcher.ray.init.num_cpus=2",
            "+hydra.launcher.ray.init.include_dashboard=false",  # 2 s and 4 s of CPU nothing here looks at
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x", "RAY_AUTH_MODE": "disabled"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Each job's one line comes from a Ray worker process, which Ray names before what it prints.
    assert len(re.findall(r"\(_run_job pid=\d+\)\S* job \d: penalties.missing=", result.stdout)) == 2
    assert "Started a local Ray instance" in result.stdout + result.stderr
    _, children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert len(children) == 2
    assert {c.data.params["penalties.missing"] for c in children} == {"0.05", "0.3"}
    assert all(c.data.metrics["answer_similarity/scored"] == 4 for c in children)
