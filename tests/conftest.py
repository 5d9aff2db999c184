"""Shared fixtures: the scripted judge (in process, through LiteLLM: the unit tests' judge), the fake
judge server (a real HTTP server on 127.0.0.1: the wire protocols and the command line as a
subprocess) and config composition."""

from __future__ import annotations

import atexit
import copy
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")

# The tests' files (tmp_path, their MLflow stores and caches, and their subprocesses' temporary files)
# in memory where the machine has it, unless TMPDIR says otherwise: on disk each SQLite commit is an
# fsync (11 ms measured here, far more while other jobs write), and MLflow commits some 150 times per
# logged run, which no test is about. Set here, before pytest picks its base directory and starts
# the pytest-xdist workers, which inherit it.
if "TMPDIR" not in os.environ and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    os.environ["TMPDIR"] = "/dev/shm"
    tempfile.tempdir = None  # gettempdir() chooses again, from TMPDIR

from evalframe.paths import CONF_DIR
from tests import scripted as scripted_model
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer

if TYPE_CHECKING:  # imports mlflow: only the tests that use traced_store pay for it
    from tests.traced_app import Seeded

Judge = FakeLLMServer | ScriptedModel  # what a test's judge is: over HTTP, or in process
T = TypeVar("T")

# Variables that would let a test reach a real provider or a real tracking server.
_LEAKY = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "MLFLOW_TRACKING_URI", "OPENAI_BASE_URL")


# The longest tests (a browser, Ray, PostgreSQL, launchers' worker processes, an Optuna search), started
# first: pytest-xdist hands tests out in order (two at a time: `make test`'s --maxschedchunk 2 spreads
# these over the workers), so the suite ends on short ones instead of waiting for one long test that
# started last.
FIRST = (
    "test_ui.py::",
    "test_parallel.py::test_a_joblib_sweep",
    "test_constrained_judges.py::test_the_readme_commands",
    "test_trace_view.py::",
    "test_review_tab.py::",
    "test_shards.py::test_shards_on_a_ray_cluster",
    "test_shards.py::test_shards_on_joblib",
    "test_parallel.py::test_a_ray_sweep",
    "test_watch.py::test_traces_added_while_it_runs",
    "test_watch.py::test_a_watcher_killed_while_writing",
    "test_one_run_four_ways.py::",
    "test_shards.py::test_a_shard_whose_worker",
    "test_postgres.py::",
    "test_ui_command.py::",
    "test_parallel.py::",
    "test_storage.py::test_a_sweep_killed_with_sigkill",
    "test_reference.py::test_sas_squad_agreement",
    "test_rate_limits.py::test_a_parallel_sweeps",
    "test_batch.py::test_a_run_killed_while_its_batch_is_pending",
    "test_rag_judges.py::test_a_sweep_and_rescore",
    "test_readme.py::test_the_python_blocks",
    "test_sweep.py::test_optuna_tunes",
    "test_cache.py::test_a_nine_point_penalty_sweep",
    "test_targets.py::test_cli_python_target",
    "test_pytest_plugin.py::",
    "test_compare.py::test_the_readme_github_actions_step",
    "test_storage.py::test_two_runs_started_at_once",
)


def _hydra_parses_each_config_file_once() -> None:
    """Hydra parses every YAML file of conf/ (and its own) anew at each composition: ~40% of the
    ~0.1 s a composition takes, and the suite composes thousands of times (every run in process, every
    job of a sweep). In the tests' processes a file is parsed once per version (path, size and mtime)
    and each composition gets a deep copy, as from a fresh parse: what Hydra then composes is the same.
    The command as a user runs it (a subprocess) parses them as Hydra does."""
    import copy
    import dataclasses

    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

    parsed: dict[tuple[Any, ...], Any] = {}

    def cached(original: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
        def load_config(source: Any, config_path: str) -> Any:
            version: tuple[Any, ...] = ()
            if isinstance(source, FileConfigSource):
                file = Path(source.path) / source._normalize_file_name(config_path)
                if not file.is_file():
                    return original(source, config_path)  # Hydra's own "not found"
                stat = file.stat()
                version = (stat.st_size, stat.st_mtime_ns)
            key = (type(source), source.path, config_path, version)
            if key not in parsed:
                parsed[key] = original(source, config_path)
            found = parsed[key]
            return dataclasses.replace(found, config=copy.deepcopy(found.config), header=dict(found.header))

        return load_config

    for source in (FileConfigSource, ImportlibResourcesConfigSource):
        source.load_config = cached(source.load_config)  # type: ignore[method-assign,assignment]


_hydra_parses_each_config_file_once()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, name in enumerate(FIRST) if name in item.nodeid), len(FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


_running: list[pytest.Item] = []  # the test being run, for run_cli's check of its marker


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """No real providers or tracking servers, and a judge cache of the test's own."""
    for name in _LEAKY:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVALFRAME_CACHE_DIR", str(tmp_path / "cache"))
    _running[:] = [request.node]


@functools.cache
def _mlflow_template(initialize_tables: Callable[[Any], None]) -> Path:
    """The tables of an empty SQLite MLflow store, made once per test process by MLflow's own
    `initialize_tables` (its migrations are most of what a fresh store costs: 1.5 s, in some 40 tests)."""
    import sqlalchemy

    folder = Path(tempfile.mkdtemp(prefix="evalframe-mlflow-template-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "mlflow.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    try:
        initialize_tables(engine)
    finally:
        engine.dispose()
    return path


@pytest.fixture(autouse=True)
def _fresh_stores_from_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new SQLite store in a test (in process) starts as a copy of the template, through SQLite's
    backup API, instead of running MLflow's migrations again; any other database migrates as usual."""
    if "mlflow" not in sys.modules:  # a test that never touches MLflow pays nothing
        return
    import sqlite3

    import mlflow.store.db.utils as db

    original = db._initialize_tables

    def initialize(engine: Any) -> None:
        if engine.url.get_backend_name() != "sqlite" or not engine.url.database:
            return original(engine)
        template = sqlite3.connect(_mlflow_template(original))
        raw = engine.raw_connection()
        try:
            template.backup(raw.driver_connection)
        finally:
            raw.close()
            template.close()

    monkeypatch.setattr(db, "_initialize_tables", initialize)


@pytest.fixture(scope="session")
def _traced(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    from tests import traced_app

    folder = tmp_path_factory.mktemp("traced")
    return traced_app.seed(f"sqlite:///{folder / 'mlflow.db'}", artifacts=str(folder / "artifacts"))


@pytest.fixture
def traced_store(_traced: Seeded, tmp_path: Path) -> Seeded:
    """An MLflow store holding the traces of a traced RAG app (tests/traced_app.py says what they are):
    seeded once per test process, copied for each test to tmp_path/traces.db."""
    return copied_store(_traced, tmp_path / "traces.db")


def copied_store(seeded: Seeded, path: Path) -> Seeded:
    """A copy of the seeded store at `path` (SQLite's backup API), for a test that changes it."""
    import sqlite3

    source, copy = sqlite3.connect(seeded.uri.removeprefix("sqlite:///")), sqlite3.connect(path)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return dataclasses.replace(seeded, uri=f"sqlite:///{path}")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A tracking server's URL whose socket accepts connections (the kernel completes them) and never
    answers a byte."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


NOBODY = 65534


@dataclass
class Unprivileged:
    """A directory of the user `run` runs `python -m evalframe` as, from that directory."""

    work: Path
    prefix: list[str]

    def run(self, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
        full_env.update(HOME=str(self.work), EVALFRAME_CACHE_DIR=str(self.work / "cache"), **env)
        return subprocess.run(
            [*self.prefix, sys.executable, "-m", "evalframe", *args],
            cwd=self.work,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


@pytest.fixture
def unprivileged() -> Iterator[Unprivileged]:
    """As root, nobody through setpriv (root writes through any chmod, so a read-only file is tested as
    nobody); otherwise the user itself. Its directory is not under root's private pytest directory and
    is removed after."""
    prefix: list[str] = []
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv is None:
        pytest.skip("running as root without setpriv: a chmod cannot stop root's writes")
    work = Path(tempfile.mkdtemp(prefix="evalframe-readonly-"))
    try:
        if os.geteuid() == 0:
            os.chown(work, NOBODY, NOBODY)
            prefix = [str(setpriv), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        yield Unprivileged(work, prefix)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(responder=judge) as s:
        yield s


@pytest.fixture
def judge_server(server: FakeLLMServer) -> Iterator[FakeLLMServer]:
    """The session's server, reset to the default judge and empty counters for this test."""
    server.responder = judge
    server.reset()
    yield server
    server.responder = judge


@pytest.fixture(scope="session")
def _scripted() -> ScriptedModel:
    model = ScriptedModel(responder=judge)
    scripted_model.install(model)
    return model


@pytest.fixture
def scripted(_scripted: ScriptedModel) -> Iterator[ScriptedModel]:
    """The in-process scripted judge, reset to the default judge and empty counters for this test."""
    _scripted.responder = judge
    _scripted.reset()
    yield _scripted
    _scripted.responder = judge


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transport retries after a tenth of the real backoff (full jitter up to 0.05 × 2^n s instead of
    0.5 × 2^n; a Retry-After is still waited out): for tests that count retries or faults rather than
    time them, which otherwise sleep 1 + 2 + 4 s at worst for three retries."""
    from evalframe.models import retry

    real = retry.backoff
    monkeypatch.setattr(retry, "backoff", lambda attempt, error=None: real(attempt, error, base=0.05))


def compose(overrides: list[str]) -> dict[str, Any]:
    """Compose the config exactly as `python -m evalframe OVERRIDES` would, resolved to plain data (a
    copy of its own: tests edit what they get)."""
    # conf/ reads one variable (tracking.uri's default): a test that sets it gets its own config
    return copy.deepcopy(_composed(tuple(overrides), os.environ.get("MLFLOW_TRACKING_URI")))


@functools.lru_cache(maxsize=512)
def _composed(overrides: tuple[str, ...], tracking_uri: str | None) -> dict[str, Any]:
    # Hydra composes conf/ anew each time (~0.1 s of YAML, override parsing and merging); tests ask for
    # the same few configs hundreds of times, and conf/ does not change while they run.
    from hydra import compose as hydra_compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    config = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    assert isinstance(config, dict)
    return {str(k): v for k, v in config.items()}


PRICE = ["model.input_cost_per_token=1.5e-7", "model.output_cost_per_token=6e-7"]


def fake_model(server: FakeLLMServer | ScriptedModel, option: str = "gpt") -> list[str]:
    """Overrides that point a model option at the scripted judge, or at the fake server speaking that
    provider's protocol."""
    if isinstance(server, ScriptedModel):
        return [f"model={option}", *scripted_model.overrides()]
    base = server.openai_base if option in ("gpt", "local") else server.base_url
    # A model behind an api_base has no known price (its cost shows "—"): priced like gpt-4o-mini here,
    # so the tests of cost accounting keep their meaning.
    return [f"model={option}", f"model.api_base={base}", "model.timeout=10", *PRICE]


def default_sigint() -> None:
    """Popen's preexec_fn for a child that a test interrupts: a shell's background job (make test &)
    ignores SIGINT, and a child inherits that, so Ctrl-C would test nothing. A terminal's Ctrl-C
    reaches a foreground run with the default handler; give the child that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`evalframe ARGS` as a user runs it, from `cwd` with `env` added: in process through
    `evalframe.cli.main(ARGS)` (its output captured), or with `process=True` as `python -m evalframe`
    in a subprocess, for what needs a process boundary (signals, concurrent processes, launchers).
    A subprocess only from a test marked slow: `make check` promises to skip every test that starts one."""
    if not process:
        return _in_process(args, cwd, env or {})
    for test in _running:
        assert test.get_closest_marker("slow"), f"{test.nodeid} runs `python -m evalframe`: mark it slow"
    full_env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "evalframe", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_process(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m evalframe ARGS` in a subprocess: for launchers' worker processes, PYTHONPATH, signals."""
    return run_cli(args, cwd, env, timeout, process=True)


def _in_process(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import contextlib
    import io

    from evalframe.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["evalframe", *args], code, out.getvalue(), err.getvalue())


def sweep_runs(uri: str, experiment: str = "evalframe") -> tuple[Any, list[Any]]:
    """A sweep's MLflow parent run and its child runs, read back from the store at `uri`; every run
    of the experiment is one or the other."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("evalframe.sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == len(children) + 1
    return parent, children


def within(seconds: float, run: Callable[[], T]) -> T:
    """`run()` in a thread of its own, failing the test when it has not returned after `seconds`: a run
    that hangs is a failed test, not a stuck suite (the thread is left behind, a daemon)."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(("value", run()))
        except BaseException as e:
            outcome.append(("error", e))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds} s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value
