"""One evaluation sharded across a launcher's worker processes (`-m shards=2` with joblib, and on a Ray
cluster the command joins, as the README's cluster command does) is the unsharded evaluation: the same
per-item scores, mean, interval and gate; and a shard killed with SIGKILL resumes alone, losing and
repeating nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalframe.data.shards import shard_of
from evalframe.paths import SAMPLE_DATASET
from tests.conftest import fake_model, run_cli, run_process, sweep_runs
from tests.fake_judge import judge
from tests.mlflow_server import free_port
from tests.run.test_reliability import KEY, Stall, _signature, _start, _wait_until
from tests.testserver import FakeLLMServer

GATE = "+gate.min_score.answer_similarity=0.4"  # one shard alone passes it; the whole fails it


def _common(server: FakeLLMServer) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(server), "dataset.limit=10", GATE]


def _scores(path: Path) -> dict[str, Any]:
    return {i["id"]: i["scores"]["answer_similarity"]["score"] for i in map(json.loads, path.open())}


def _summary(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("│ answer_similarity")]


def _same_as_unsharded(server: FakeLLMServer, tmp_path: Path, *launcher: str, **env: str) -> None:
    """Run the evaluation unsharded, then with `-m shards=2` and `launcher`; compare the two."""
    one, sharded = tmp_path / "one", tmp_path / "sharded"
    one.mkdir()
    sharded.mkdir(exist_ok=True)  # a Ray cluster's head runs there already
    whole = run_cli(_common(server), one, {**KEY, "EVALFRAME_CACHE_DIR": str(one)})
    assert whole.returncode == 1, whole.stderr  # the gate fails on the whole
    result = run_process(
        ["-m", "shards=2", *_common(server), *launcher],
        cwd=sharded,
        env={**KEY, "EVALFRAME_CACHE_DIR": str(sharded), **env},
    )
    assert result.returncode == 1, result.stderr[-3000:]  # the whole's gate, though each shard passed its own
    [sweep_dir] = sharded.glob("multirun/*/*")
    [single] = one.glob("outputs/*/*")
    assert _scores(sweep_dir / "results.jsonl") == _scores(single / "results.jsonl")
    for k in (0, 1):  # each shard scored only its own rows
        assert {shard_of(i, 2) for i in _scores(sweep_dir / str(k) / "results.jsonl")} == {k}
    assert _summary(result.stdout) == _summary(whole.stdout) != []  # mean, interval, std, ..., gate
    merged, alone = (json.loads((d / "run.json").read_text()) for d in (sweep_dir, single))
    assert merged["means"] == alone["means"] and merged["gate"] == alone["gate"]

    parent, children = sweep_runs(f"sqlite:///{sharded / 'mlflow.db'}")
    _, [run] = sweep_or_single(f"sqlite:///{one / 'mlflow.db'}")
    for figure in ("mean", "mean_ci_low", "mean_ci_high", "std", "scored"):
        key = f"answer_similarity/{figure}"
        assert parent.data.metrics[key] == run.data.metrics[key], key
    assert parent.data.tags["evalframe.gate"] == "failed" and len(children) == 2
    workers = {c.data.tags["evalframe.pid"] for c in children}
    assert parent.data.tags["evalframe.pid"] not in workers  # the shards ran in worker processes


def sweep_or_single(uri: str) -> tuple[None, list[Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    return None, client.search_runs([experiment.experiment_id])


@pytest.mark.slow
def test_shards_on_joblib_are_the_unsharded_evaluation(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    _same_as_unsharded(judge_server, tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")


@pytest.fixture
def ray_head(tmp_path: Path) -> Iterator[str]:
    """A Ray cluster of one machine, started as on a cluster's head node (`ray start --head`); its
    address. Its workers run where it was started, with its environment (not the command's): started
    in tmp_path/sharded with the judge's key and cache, as a user readies a cluster's nodes. Stopped
    after with everything it started (its own process group)."""
    work = tmp_path / "sharded"
    work.mkdir()
    port = free_port()
    # Ray's sockets live under its temp dir, whose path must stay short (a Unix socket's is 107 bytes).
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ray = Path(sys.executable).with_name("ray")
    args = [str(ray), "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false"]
    args += ["--disable-usage-stats", "--block", f"--temp-dir={temp}"]
    log = Path(temp) / "head.log"
    with log.open("w") as out:
        head = subprocess.Popen(
            args,
            cwd=work,
            env={**os.environ, **KEY, "EVALFRAME_CACHE_DIR": str(work), "RAY_AUTH_MODE": "disabled"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # What `ray start --block` says once the head's processes are all up.
        _wait_until(lambda: head.poll() is not None or "block forever" in log.read_text(), timeout=120)
        assert head.poll() is None, log.read_text()[-3000:]
        yield f"127.0.0.1:{port}"
    finally:
        # SIGKILL: a graceful `ray stop` takes some 30 s here, and nothing of the cluster is kept.
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_shards_on_a_ray_cluster_are_the_unsharded_evaluation(
    judge_server: FakeLLMServer, tmp_path: Path, ray_head: str
) -> None:
    # hydra-ray-launcher gives every ray.init an object_store_memory, which Ray refuses when joining a
    # cluster: the CLI leaves it out (evalframe.sweep.ray_cluster), or this fails with a traceback.
    _same_as_unsharded(
        judge_server,
        tmp_path,
        "hydra/launcher=ray",
        f"hydra.launcher.ray.init.address={ray_head}",
        RAY_AUTH_MODE="disabled",
    )


@pytest.mark.slow
def test_a_shard_killed_with_sigkill_resumes_alone(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    # 12 rows: 7 in shard 0, 5 in shard 1 (by hash). Shard 0 (3 requests an item) finishes; shard 1
    # gets a few answers, then its judge stalls and the process running it is killed.
    stall = Stall(limit=7 * 3 + 6)
    judge_server.responder = stall
    args = ["-m", "shards=2", "scorer=answer_similarity", *fake_model(judge_server), "dataset.limit=12"]
    args += ["model.timeout=120", "concurrency=1", "tracking=none"]
    proc = _start(args, tmp_path)
    try:
        _wait_until(lambda: stall.answered > stall.limit)
        time.sleep(1.0)  # let the client take in (and journal) every reply it was sent
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        stall.release.set()
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    shard0 = (sweep_dir / "0" / "results.jsonl").read_text()
    before = (sweep_dir / "1" / "results.jsonl").read_text().splitlines()
    assert json.loads((sweep_dir / "0" / "run.json").read_text())["status"] == "finished"
    assert len(shard0.splitlines()) == 7 and 0 < len(before) < 5
    assert not (sweep_dir / "results.jsonl").exists()  # nothing merged from a part

    judge_server.responder = judge
    resumed = run_cli([*args, "resume=true"], cwd=tmp_path, env=KEY)
    assert resumed.returncode == 0, resumed.stderr
    assert "job 0: finished before the sweep was stopped; kept" in resumed.stderr
    assert f"{len(before)} of 5 items already done" in resumed.stderr
    assert (sweep_dir / "0" / "results.jsonl").read_text() == shard0  # shard 0 not run again
    after = (sweep_dir / "1" / "results.jsonl").read_text().splitlines()
    assert after[: len(before)] == before and len(after) == 5  # append-only, each item once
    merged = [json.loads(line)["id"] for line in (sweep_dir / "results.jsonl").open()]
    assert len(merged) == len(set(merged)) == 12  # the whole: nothing lost, nothing twice
    calls = Counter(_signature(r) for r in judge_server.requests)
    assert max(calls.values()) == 1  # no answered judge call asked again
    assert "shards: 2 of 2 finished; the whole evaluation, 12 items" in resumed.stdout


DIES = '''import os, signal


def answer(question, row):
    """The application under test; its process dies (as the out-of-memory killer ends it) on one row."""
    if row["id"] == os.environ.get("DIE_ON"):
        os.kill(os.getpid(), signal.SIGKILL)
    return "Paris"
'''


@pytest.mark.slow
def test_a_shard_whose_worker_process_is_killed_says_so_in_one_line(tmp_path: Path) -> None:
    """joblib alone raised TerminatedWorkerError ("could be caused by a segmentation fault"), a traceback
    and exit code 2, with no word that resume=true continues (it does)."""
    (tmp_path / "dies.py").write_text(DIES)
    rows = [json.loads(line)["id"] for line in SAMPLE_DATASET.open()][:6]
    victim = next(i for i in rows if shard_of(i, 2) == 1)
    args = ["-m", "shards=2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "dataset.limit=6"]
    args += [
        "scorer=exact_match",
        "target=python",
        "target.fn=dies:answer",
        "target.pass_row=true",
        "tracking=none",
    ]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    killed = run_process(args, tmp_path, {**env, "DIE_ON": victim})
    assert killed.returncode == 128 + signal.SIGKILL, killed.stderr[-3000:]
    assert "Traceback" not in killed.stderr and "TerminatedWorkerError" not in killed.stderr
    [line] = killed.stderr.strip().splitlines()
    assert line.startswith("error: a worker process of the joblib launcher died (SIGKILL) with ")
    assert "shard 1 (0 of 2 items done)" in line
    assert line.endswith("the same command plus resume=true continues, keeping every finished item")

    resumed = run_process([*args, "resume=true"], tmp_path, env)  # as the line says: it continues
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    merged = [json.loads(line)["id"] for line in (sweep_dir / "results.jsonl").open()]
    assert sorted(merged) == sorted(rows)  # the whole evaluation, each item once
