"""Joining a running Ray cluster: the command line Ray accepts, and a job on a node without the sweep's
environment that takes what the sweep hands its jobs from the sweep's record (tests/e2e/test_shards.py
runs a sharded evaluation on a Ray cluster end to end)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.types import RunMode

from evalframe.sweep import callback
from evalframe.sweep.ray_cluster import joined, reachable
from tests.conftest import run_cli
from tests.mlflow_server import free_port

STORE = "+hydra.launcher.ray.init.object_store_memory=null"


@pytest.mark.parametrize(
    ("args", "added"),
    [
        (["-m", "shards=2", "hydra/launcher=ray", "hydra.launcher.ray.init.address=auto"], True),
        (
            [
                "-m",
                "hydra/launcher=ray",
                "hydra.launcher.ray.init.address=10.0.0.1:6379",
                "penalties.missing=0.1,0.2",
            ],
            True,
        ),
        (
            ["-m", "shards=2", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2"],
            False,
        ),  # a local one
        (
            [
                "-m",
                "hydra/launcher=ray",
                "hydra.launcher.ray.init.address=auto",
                "+hydra.launcher.ray.init.object_store_memory=1e9",
            ],
            False,
        ),
        (["-m", "hydra/launcher=joblib", "penalties.missing=0.1,0.2"], False),
        (["scorer=exact_match"], False),
    ],
)
def test_joining_a_cluster_leaves_object_store_memory_to_the_cluster(args: list[str], added: bool) -> None:
    assert joined(args) == ([*args, STORE] if added else args)


def test_a_job_without_the_sweeps_environment_takes_it_from_the_sweeps_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = {callback.PARENT_RUN: "abc123", callback.SWEPT: '["shard"]', callback.PARALLEL_JOBS: "2"}
    (tmp_path / callback.SWEEP).write_text(json.dumps({"status": "running", "handed": handed}))
    for key in callback.HANDED:  # set, then unset: monkeypatch then removes what joined_job sets
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    job = SimpleNamespace(mode=RunMode.MULTIRUN, sweep=SimpleNamespace(dir=str(tmp_path)))
    callback.joined_job(job)
    assert {k: os.environ[k] for k in callback.HANDED} == handed

    # A worker that inherited the sweep's environment keeps it as it is.
    monkeypatch.setenv(callback.PARENT_RUN, "inherited")
    monkeypatch.delenv(callback.SWEPT)
    callback.joined_job(job)
    assert os.environ[callback.PARENT_RUN] == "inherited" and callback.SWEPT not in os.environ


RAY = ["-m", "shards=2", "scorer=exact_match", "hydra/launcher=ray"]


def test_a_cluster_address_nothing_answers_at_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    port = free_port()  # nothing listens on it
    started = time.monotonic()
    done = run_cli([*RAY, f"hydra.launcher.ray.init.address=127.0.0.1:{port}"], tmp_path)
    assert done.returncode == 2 and time.monotonic() - started < 10
    where = f"127.0.0.1:{port}"
    assert done.stderr.strip().splitlines() == [
        f"error: hydra.launcher.ray.init.address={where}: no Ray cluster answers at {where} "
        f"(Connection refused); start one there (`ray start --head --port={port}`) or give the address "
        "`ray start` printed"
    ]
    assert not (tmp_path / "multirun").exists()  # nothing ran


@pytest.mark.parametrize("form", ["{host}:{port}", "ray://{host}:{port}", "auto", "null"])
def test_a_cluster_that_answers_or_no_address_at_all_passes(form: str) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = form.format(host="127.0.0.1", port=listening.getsockname()[1])
        reachable([*RAY, f"hydra.launcher.ray.init.address={address}"], timeout=1)
    reachable(["-m", "hydra/launcher=joblib", "penalties.missing=0.1,0.2"])  # not Ray: nothing to check
