"""The same trace evaluation made four ways: a plain run; `-m shards=2` on joblib's worker processes; one
watch tick; `tracking=none`, then `evalframe log-run DIR`. Each is the one run lifecycle in another mode
(evalframe.run.modes), so each leaves exactly one valid verdict per scorer on every OK trace, none on the
ERROR traces (the dataset reads OK traces only), and the same mean. The judge is the HTTP test server,
the same door a real judge comes through, reached from the shards' worker processes too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import copied_store, fake_model, run_cli, run_process
from tests.testserver import FakeLLMServer
from tests.traced_app import Seeded, feedbacks, verdicts

pytestmark = pytest.mark.slow  # a sharded run on joblib's worker processes
KEY = {"OPENAI_API_KEY": "sk-x"}
WAYS = ("plain", "shards", "tick", "log-run")


def _made(way: str, store: Seeded, server: FakeLLMServer, cwd: Path) -> float:
    """Make the evaluation `way` in `cwd` on `store`; the mean faithfulness its run directory records."""
    args = [*store.overrides(), "scorer=faithfulness", *fake_model(server)]
    env = {**KEY, "EVALFRAME_CACHE_DIR": str(cwd / "cache")}  # each way asks the judge itself
    if way == "shards":
        done = run_process(
            ["-m", "shards=2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *args], cwd, env
        )
    elif way == "tick":
        done = run_cli([*args, "watch.every=1s", "watch.settle=0s", "watch.ticks=1"], cwd, env)
    elif way == "log-run":
        done = run_cli([*args, "tracking=none", f"dataset.tracking_uri={store.uri}"], cwd, env)
        assert done.returncode == 0, done.stderr
        [directory] = (cwd / "outputs").glob("*/*")
        done = run_cli(["log-run", str(directory), f"tracking.uri={store.uri}"], cwd, env)
    else:
        done = run_cli(args, cwd, env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr[-3000:]
    [record] = {
        "plain": cwd.glob("outputs/*/*/run.json"),
        "shards": cwd.glob("multirun/*/*/run.json"),
        "tick": cwd.glob("outputs/*/*/tick-000000/run.json"),
        "log-run": cwd.glob("outputs/*/*/run.json"),
    }[way]
    return float(json.loads(record.read_text())["means"]["faithfulness"])


def test_four_ways_leave_one_verdict_per_ok_trace_and_the_same_mean(
    _traced: Seeded, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    means = {}
    for way in WAYS:
        cwd = tmp_path / way
        cwd.mkdir()
        store = copied_store(_traced, cwd / "traces.db")
        means[way] = _made(way, store, judge_server, cwd)
        found = verdicts(store)
        assert set(found) == set(store.ok), (way, len(found), len(store.ok))
        assert all(names == Counter({"faithfulness": 1}) for names in found.values()), (way, found)
        assert not set(feedbacks(store)) & set(store.error), way  # nothing at all on an ERROR trace
    assert len(set(means.values())) == 1, means
