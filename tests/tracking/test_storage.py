"""The run's own storage under attack: a full disk for the cache or the run directory, a torn last
line, inputs that changed before a resume, runs that start in the same second, and killed sweeps."""

from __future__ import annotations

import errno
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from evalframe.models.cache import Cache
from evalframe.results.journal import Journal
from evalframe.results.results_file import Finished, latest_items, read_items
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.run import pipeline
from tests.conftest import compose, fake_model
from tests.scripted import ScriptedModel


def judged(scripted: ScriptedModel, *extra: str) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(scripted), "tracking=none", *extra]


class _FullDisk:
    """A cache connection on a full disk: reads work, every write fails as SQLite or the OS reports it."""

    def __init__(self, db: sqlite3.Connection, error: Exception):
        self.db, self.error = db, error

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "DELETE", "UPDATE")):
            raise self.error
        return self.db.execute(sql, *args)


@pytest.mark.parametrize(
    "error",
    [sqlite3.OperationalError("database or disk is full"), OSError(errno.ENOSPC, "No space left on device")],
)
def test_a_cache_that_cannot_write_warns_once_and_the_run_goes_on(
    error: Exception,
    scripted: ScriptedModel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    opened = Cache._db
    monkeypatch.setattr(Cache, "_db", lambda self: _FullDisk(opened(self), error))
    result, code = pipeline.evaluate(compose(judged(scripted, "dataset.limit=6")), tmp_path)
    assert code == 0 and result.summaries["answer_similarity"].scored == 6
    assert capsys.readouterr().err.count("cannot write the judge cache") == 1


# --- every run owns its directory ---------------------------------------------------------------------


def _hydra_dirs(monkeypatch: pytest.MonkeyPatch, cwd: Path, overrides: list[str]) -> tuple[str, str]:
    """hydra.run.dir and hydra.sweep.dir as `python -m evalframe` resolves them, at a frozen clock."""
    import datetime as dt

    import hydra.core.utils
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import evalframe.cli.hydra_app  # noqa: F401  (registers evalframe.run_dir, as the command does)
    from evalframe.paths import CONF_DIR

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Frozen:
            return cls(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(hydra.core.utils, "datetime", Frozen)
    monkeypatch.chdir(cwd)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    return str(cfg.hydra.run.dir), str(cfg.hydra.sweep.dir)


def test_runs_started_in_the_same_second_get_directories_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _hydra_dirs(monkeypatch, tmp_path, [])
    second = _hydra_dirs(monkeypatch, tmp_path, [])
    assert first == ("outputs/2026-01-02/03-04-05", "multirun/2026-01-02/03-04-05")
    assert second == ("outputs/2026-01-02/03-04-05-2", "multirun/2026-01-02/03-04-05-2")
    assert all((tmp_path / d).is_dir() for d in (*first, *second))  # created, so a third run skips them


def test_new_run_dir_is_exclusive_under_a_race(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from evalframe.results.journal import new_run_dir

    with ThreadPoolExecutor(16) as pool:
        made = list(pool.map(lambda _: new_run_dir(tmp_path / "outputs" / "d" / "t"), range(64)))
    assert len(set(made)) == 64 and {p.name for p in made} >= {"t", "t-2", "t-64"}


def test_a_read_only_working_directory_is_one_line_and_exit_code_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)  # root ignores chmod: fail as a read-only mount does
    with pytest.raises(SystemExit) as exited:
        _hydra_dirs(monkeypatch, tmp_path, [])
    assert exited.value.code == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: cannot create the run directory outputs/" in err
    assert "Read-only file system" in err and "hydra.run.dir=" in err


@pytest.mark.slow
def test_two_runs_started_at_once_keep_their_own_results(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "evalframe", "scorer=exact_match", "tracking=none", f"dataset.limit={n}"],
            cwd=tmp_path,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (20, 28)
    ]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read() if run.stderr else ""
    dirs = sorted(tmp_path.glob("outputs/*/*"))
    assert len(dirs) == 2
    counts = sorted(len((d / "results.jsonl").read_text().splitlines()) for d in dirs)
    assert counts == [20, 28]  # nothing interleaved
    limits = sorted(json.loads((d / "run.json").read_text())["config"]["dataset"]["limit"] for d in dirs)
    assert limits == [20, 28]


# --- a full run directory, a torn last line --------------------------------------------------------------


class _FillsUp:
    """results.jsonl on a disk that fills up after `room` lines: the next write gets half its line
    onto the disk (as a short write does), then ENOSPC."""

    def __init__(self, file: Any, room: int):
        self.file, self.room = file, room

    def write(self, text: str) -> int:
        if self.room == 0:
            self.file.write(text[: len(text) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= 1
        return int(self.file.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def test_a_full_run_directory_stops_with_exit_code_5_and_resume_loses_nothing(
    scripted: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from evalframe.errors import StorageError
    from evalframe.results.journal import RESULTS, TORN

    opened = Path.open

    def full_disk(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file = opened(self, mode, *args, **kwargs)
        return _FillsUp(file, room=4) if self.name == RESULTS and mode in ("a", "w") else file

    config = compose(judged(scripted, "dataset.limit=10", "concurrency=1"))
    run_dir = tmp_path / "run"
    with monkeypatch.context() as disk:
        disk.setattr(Path, "open", full_disk)
        with pytest.raises(StorageError) as raised:
            pipeline.evaluate(config, run_dir)
    assert raised.value.exit_code == 5
    message = str(raised.value)
    assert "No space left on device" in message and f"resume={run_dir}" in message
    saved = (run_dir / RESULTS).read_bytes()
    assert saved.count(b"\n") == 4 and not saved.endswith(b"\n")  # 4 items, then a cut line

    result, code = pipeline.evaluate(config, tmp_path / "unused", resume_from=run_dir)  # space freed
    assert code == 0
    lines = (run_dir / RESULTS).read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]  # every line readable: nothing glued on the cut one
    assert len(ids) == 10 and len(set(ids)) == 10
    assert result.summaries["answer_similarity"].scored == 10
    assert (run_dir / TORN).read_bytes() == saved[saved.rindex(b"\n") + 1 :] + b"\n"  # set aside, not lost


def test_resume_after_a_torn_last_line_scores_that_item_again(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    import json

    from evalframe.results.journal import RESULTS

    config = compose(judged(scripted, "dataset.limit=5"))
    run_dir = tmp_path / "run"
    pipeline.evaluate(config, run_dir)
    lines = (run_dir / RESULTS).read_text().splitlines(keepends=True)
    # killed while writing the 4th item (a power loss mid-write): 3 items, then half a line
    (run_dir / RESULTS).write_text("".join(lines[:3]) + lines[3][:40])
    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, "status": "running"}))

    result, _ = pipeline.evaluate(config, tmp_path / "unused", resume_from=run_dir)
    ids = [json.loads(line)["id"] for line in (run_dir / RESULTS).read_text().splitlines()]
    assert sorted(ids) == sorted(json.loads(line)["id"] for line in lines)  # all 5, each once, all readable
    assert result.summaries["answer_similarity"].scored == 5


# --- resume when the inputs changed ---------------------------------------------------------------------


def _killed_after(run_dir: Path, items: int) -> None:
    """Leave a finished run as a run killed after `items` items."""
    import json

    from evalframe.results.journal import MANIFEST, RESULTS

    lines = (run_dir / RESULTS).read_text().splitlines(keepends=True)
    (run_dir / RESULTS).write_text("".join(lines[:items]))
    manifest = json.loads((run_dir / MANIFEST).read_text())
    (run_dir / MANIFEST).write_text(json.dumps({**manifest, "status": "running"}))


def _dataset(path: Path, answers: list[str]) -> None:
    import json

    rows = [
        {"id": str(i), "input": f"q{i}", "ground_truth": "Paris", "output": a} for i, a in enumerate(answers)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_resume_refuses_when_a_row_changed_after_the_kill(scripted: ScriptedModel, tmp_path: Path) -> None:
    from evalframe.errors import EvalframeError

    data = tmp_path / "d.jsonl"
    _dataset(data, ["Paris"] * 6)
    config = compose(["scorer=exact_match", "tracking=none", "dataset=jsonl", f"dataset.path={data}"])
    run_dir = tmp_path / "run"
    pipeline.evaluate(config, run_dir)
    _killed_after(run_dir, 3)
    _dataset(data, ["Lyon"] * 6)  # edited in place: the config, and so its fingerprint, is the same

    with pytest.raises(EvalframeError) as raised:
        pipeline.evaluate(config, tmp_path / "unused", resume_from=run_dir)
    assert raised.value.exit_code == 2
    assert "the dataset's rows or the target's prompt or code changed" in str(raised.value)
    assert "without resume" in str(raised.value)
    fresh, _ = pipeline.evaluate(config, tmp_path / "fresh")  # what resume would have hidden
    assert fresh.means["exact_match"] == 0.0

    _dataset(data, ["Paris"] * 6)  # the same rows again: resume goes on
    resumed, _ = pipeline.evaluate(config, tmp_path / "unused", resume_from=run_dir)
    assert resumed.means["exact_match"] == 1.0 and resumed.count == 6


def test_resume_refuses_when_the_targets_prompt_changed(scripted: ScriptedModel, tmp_path: Path) -> None:
    from evalframe.errors import EvalframeError
    from tests.scripted import overrides as scripted_overrides

    prompt = tmp_path / "answer.j2"
    prompt.write_text("Answer briefly: {{ input }}")
    config = compose(
        [
            "scorer=token_f1",
            "tracking=none",
            "dataset.limit=4",
            "target=llm",
            f"target.prompt={prompt}",
            *[f"target.{o}" for o in scripted_overrides()],
        ]
    )
    run_dir = tmp_path / "run"
    pipeline.evaluate(config, run_dir)
    _killed_after(run_dir, 2)
    prompt.write_text("Answer at length: {{ input }}")
    with pytest.raises(EvalframeError, match="the target's prompt or code changed"):
        pipeline.evaluate(config, tmp_path / "unused", resume_from=run_dir)


# --- a sweep killed with SIGKILL ------------------------------------------------------------------------


def test_runs_of_a_dead_process_are_marked_killed_and_live_ones_left_alone(tmp_path: Path) -> None:
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from evalframe.tracking import store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("evalframe")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = client.create_run(experiment, tags={**store.holder(), store.PID_TAG: gone.stdout.strip()})
    live = client.create_run(experiment, tags=store.holder())
    elsewhere = client.create_run(
        experiment, tags={store.HOST_TAG: "another-machine", store.PID_TAG: gone.stdout.strip()}
    )
    notes: list[str] = []
    store.reap(client, experiment, notes)
    assert notes == []
    assert client.get_run(dead.info.run_id).info.status == "KILLED"
    assert client.get_run(live.info.run_id).info.status == "RUNNING"
    assert client.get_run(elsewhere.info.run_id).info.status == "RUNNING"  # cannot be checked from here


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_is_resumed_and_its_stale_run_marked_killed(
    judge_server: Any, tmp_path: Path
) -> None:
    import json
    import signal
    import time

    from mlflow.tracking import MlflowClient

    from tests.conftest import run_cli
    from tests.fake_judge import judge
    from tests.run.test_reliability import KEY, Stall, _start, _wait_until

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    stall = Stall(limit=12)  # job 0 asks 9 requests, job 1 gets 3 answers and then waits
    judge_server.responder = stall
    args = [
        "-m",
        "scorer=answer_similarity",
        *fake_model(judge_server),
        "model.timeout=120",
        "dataset.limit=3",
        "concurrency=2",
        "model.temperature=0.0,0.5,1.0",  # in the request: every job asks the judge
        f"tracking.uri={uri}",
    ]
    proc = _start(args, tmp_path)
    _wait_until(lambda: stall.answered > stall.limit)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stall.release.set()
    judge_server.responder = judge

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    [parent] = [
        r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("evalframe.sweep")
    ]
    assert parent.info.status == "RUNNING"  # left so by the kill
    other = run_cli(["scorer=exact_match", "dataset.limit=2", f"tracking.uri={uri}"], cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert client.get_run(parent.info.run_id).info.status == "KILLED"  # the next run saw its process gone

    asked = judge_server.count()
    resumed = run_cli([*args, "resume=true"], cwd=tmp_path, env=KEY)
    assert resumed.returncode == 0, resumed.stderr
    [sweep_dir] = tmp_path.glob("multirun/*/*")  # continued in its own directory, none new
    assert f"resuming the sweep in multirun/{sweep_dir.parent.name}/{sweep_dir.name}" in resumed.stderr
    assert "job 0: finished before the sweep was stopped; kept" in resumed.stderr
    assert judge_server.count() - asked <= 18  # job 0 is not asked again, job 1 only for what it lacked
    for job in ("0", "1", "2"):
        ids = [
            json.loads(line)["id"] for line in (sweep_dir / job / "results.jsonl").read_text().splitlines()
        ]
        assert len(ids) == 3 and len(set(ids)) == 3, job

    runs = client.search_runs([experiment.experiment_id])
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"  # the same parent, continued
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.params["model.temperature"] for r in children) == ["0.0", "0.5", "1.0"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert len(runs) == len(children) + 2  # the parent and the plain run: no empty new parent


@pytest.mark.slow
def test_resume_true_with_no_unfinished_sweep_is_a_usage_error(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    result = run_cli(
        ["-m", "scorer=exact_match", "tracking=none", "dataset.limit=2,3", "resume=true"], cwd=tmp_path
    )
    assert result.returncode == 2
    assert "resume=true: no unfinished sweep with these overrides" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.glob("multirun/*/*/0"))


def test_a_disk_that_fills_after_the_last_item_says_how_to_log_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's own task in process: the report cannot be written, every item is on disk."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from evalframe.cli import hydra_app as command
    from evalframe.paths import CONF_DIR
    from evalframe.report import html as html_report

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "report.html"))

    monkeypatch.setattr(html_report, "write_run_report", full)
    GlobalHydra.instance().clear()
    overrides = ["scorer=exact_match", "tracking=none", "dataset.limit=3", f"hydra.run.dir={tmp_path}"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    try:
        code, _ = command.run(OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"]))
    finally:
        HydraConfig.instance().cfg = None
    assert code == 5
    err = capsys.readouterr().err
    assert f"error: cannot write {tmp_path / 'report.html'} (No space left on device)" in err
    assert f"evalframe log-run {tmp_path}" in err and "Traceback" not in err
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3


GONE = 2**30  # a process id beyond any pid_max: no such process


def _killed(sweep_dir: Path, jobs: list[str]) -> None:
    """A finished sweep made to look killed with `jobs` half-way: its record says running by a process
    that is gone, and those jobs' journals say running."""
    import json

    marker = sweep_dir / "sweep.json"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "status": "running", "pid": GONE}))
    for job in jobs:
        manifest = sweep_dir / job / "run.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "status": "running"}))


@pytest.mark.slow
def test_resume_true_finds_the_sweep_whatever_the_order_of_its_overrides(tmp_path: Path) -> None:
    """Overrides compared in any order, `resume` left out and secrets blanked; and the resumed jobs
    run in the order the sweep was started with, so each continues its own directory."""
    import json

    from evalframe.sweep.callback import find_unfinished
    from tests.conftest import run_cli

    sweep = tmp_path / "multirun" / "2026-01-01" / "10-00-00"
    sweep.mkdir(parents=True)
    record = {"status": "running", "pid": GONE, "overrides": ["b=3", "model.api_key=***", "a=1,2"]}
    (sweep / "sweep.json").write_text(json.dumps(record))
    given = ["a=1,2", "b=3", "model.api_key=sk-rotated-key", "resume=true"]
    assert find_unfinished(tmp_path / "multirun", given) == sweep
    assert find_unfinished(tmp_path / "multirun", ["a=1,2", "model.api_key=sk-x"]) is None  # b=3 missing
    assert find_unfinished(tmp_path / "multirun", [*given, "b=3"]) is None  # b=3 twice is another sweep

    # Two swept keys: Hydra numbers the jobs by their keys' order (job 1 is limit 2 and threshold 0.6
    # here, limit 3 and threshold 0.5 the other way round).
    base = ["scorer=exact_match", "tracking=none"]
    started = run_cli(["-m", *base, "dataset.limit=2,3", "agreement_threshold=0.5,0.6"], cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    [sweep_dir] = [p.parent for p in tmp_path.glob("multirun/*/*/sweep.json") if p.parent != sweep]
    _killed(sweep_dir, ["1", "2", "3"])
    resumed = run_cli(
        ["-m", "agreement_threshold=0.5,0.6", *base, "dataset.limit=2,3", "resume=true"], cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming the sweep in multirun/{sweep_dir.parent.name}/{sweep_dir.name}" in resumed.stderr
    assert "job 0: finished before the sweep was stopped; kept" in resumed.stderr
    for job, (limit, threshold) in enumerate([(2, 0.5), (2, 0.6), (3, 0.5), (3, 0.6)]):
        manifest = json.loads((sweep_dir / str(job) / "run.json").read_text())
        assert manifest["status"] == "finished"
        assert (manifest["config"]["dataset"]["limit"], manifest["config"]["agreement_threshold"]) == (
            limit,
            threshold,
        )
    assert len(list(tmp_path.glob("multirun/*/*/sweep.json"))) == 2  # no new sweep


def test_a_large_results_file_is_read_back_one_item_at_a_time(tmp_path: Path) -> None:
    # What log-run reads (every item, each id's last line, in the order the ids came) without holding
    # every item: a 100,000-item run's file read whole took 914 MiB to log again.
    journal = Journal(tmp_path)
    journal.start({"scorers": {}}, 3000)
    for i in range(3000):
        journal.append(ItemResult(f"r{i}", "question", None, "x" * 5000, {"s": ScoreResult(i / 3000, "ok")}))
    journal.append(ItemResult("r5", "question", None, "redone", {"s": ScoreResult(1.0, "again")}))
    journal.close()
    with journal.path.open("a") as f:
        f.write('{"id": "torn", "inp')  # a kill mid-write: skipped, as ever
    tracemalloc.start()
    try:
        ids, outputs = [], {}
        for item in latest_items(journal.path):
            ids.append(item.id)
            outputs[item.id] = item.output[:6]
        streamed = tracemalloc.get_traced_memory()[1]
        whole = read_items(journal.path)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ids == [item.id for item in whole] == [f"r{i}" for i in range(3000)]
    assert outputs["r5"] == "redone" and outputs["r6"] == "xxxxxx"  # the redone item, where r5 first came
    assert streamed < 5 * 2**20 < 15 * 2**20 < held, (streamed, held)  # every output is 15 MB together
    # A resume holds where the finished items are, reading each when its row comes.
    done = Finished(journal.path, {"s"})
    assert len(done) == 3000 and "r5" in done and "torn" not in done
    assert done.pop("r5").output == "redone" and "r5" not in done and len(done) == 2999
    assert len(Finished(journal.path, {"s", "other"})) == 0  # finished by every scorer, or scored again
