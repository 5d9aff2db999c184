"""Team tracking: a sweep logged to a real `mlflow server` backed by a real PostgreSQL server, and read
back with MlflowClient and straight from PostgreSQL.

The test set-up installs PostgreSQL (Debian package) if needed, creates a throw-away cluster in a
temporary directory and runs it on 127.0.0.1 on a free port; everything is stopped even on failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import fake_model, run_cli, sweep_runs
from tests.mlflow_server import free_port, mlflow_server as mlflow_server_on
from tests.system_packages import require
from tests.testserver import FakeLLMServer

pytestmark = pytest.mark.slow

USER = "evalframe"
DATABASE = "mlflow"


def _bin_dir() -> Path | None:
    """Debian keeps the server binaries in /usr/lib/postgresql/<version>/bin: take the newest."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def _as_owner(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its server commands as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    bin: Path
    data: Path
    port: int

    @property
    def uri(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"


def _run(command: list[str], **kwargs: object) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    installed = _bin_dir()
    # No version directory: name a path that cannot exist, so require() says how to install it.
    require(["postgresql"], [str(installed / "initdb") if installed else "/usr/lib/postgresql/none"])
    bin_dir = _bin_dir()
    assert bin_dir is not None, "postgresql is installed but /usr/lib/postgresql/*/bin/initdb is not there"
    # Not under pytest's base temp: that is private to the current user, and the server may run as postgres.
    root = Path(tempfile.mkdtemp(prefix="evalframe-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
    pg = Postgres(bin_dir, data, free_port())
    try:
        # Trust authentication on a throw-away cluster that listens on 127.0.0.1 only.
        _run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8"]))
        options = f"-h 127.0.0.1 -p {pg.port} -k {sockets}"
        _run(
            _as_owner(
                [
                    str(bin_dir / "pg_ctl"),
                    "start",
                    "-w",
                    "-D",
                    str(data),
                    "-l",
                    str(root / "log"),
                    "-o",
                    options,
                ]
            )
        )
        _run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", USER, DATABASE])
        yield pg
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                _as_owner([str(bin_dir / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(data)]),
                capture_output=True,
                timeout=120,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server` on the PostgreSQL database, as a team would run it; yields its URL."""
    with mlflow_server_on(postgres.uri, tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url


def test_a_sweep_logged_to_a_postgres_backed_mlflow_server(
    judge_server: FakeLLMServer, postgres: Postgres, mlflow_server: str, tmp_path: Path
) -> None:
    result = run_cli(
        [
            "-m",
            "scorer=answer_similarity",
            *fake_model(judge_server),
            "dataset.limit=4",
            f"tracking.uri={mlflow_server}",
            "tracking.experiment=team",
            "penalties.missing=0.05,0.3",
            "penalties.contradiction=1.0",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{mlflow_server}/#/experiments/" in result.stdout
    assert not (tmp_path / "mlflow.db").exists()  # nothing went to a local store

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    parent, children = sweep_runs(mlflow_server, "team")
    assert len(children) == 2 and parent.info.status == "FINISHED"
    assert {c.data.params["penalties.missing"] for c in children} == {"0.05", "0.3"}
    for child in children:
        assert child.data.metrics["answer_similarity/scored"] == 4
        assert 0 <= child.data.metrics["answer_similarity/mean"] <= 1
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"items.json", "results.jsonl", "config.yaml"} <= artifacts

    # The rows really are in PostgreSQL.
    import psycopg

    with psycopg.connect(postgres.uri) as db, db.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = %s",
            ("team",),
        )
        assert cursor.fetchone() == (3,)
        cursor.execute(
            "SELECT COUNT(*) FROM metrics WHERE key = 'answer_similarity/mean' AND run_uuid = ANY(%s)",
            ([c.info.run_id for c in children],),
        )
        assert cursor.fetchone() == (2,)


def test_a_postgresql_store_is_checked_in_seconds_by_logging_in(postgres: Postgres) -> None:
    """A database that answers passes the check; one whose login is refused (no such database here) is
    one line with the driver's reason, within seconds, instead of MLflow's 100 s of retries."""
    import time

    from evalframe.tracking.store import unavailable

    assert unavailable(postgres.uri) is None
    start = time.perf_counter()
    missing = unavailable(f"postgresql://{USER}:pw-s3cret@127.0.0.1:{postgres.port}/nodb")
    assert time.perf_counter() - start < 10
    assert missing is not None and "pw-s3cret" not in missing and "\n" not in missing
    assert missing.startswith(
        f"the database of the MLflow store at postgresql://***@127.0.0.1:{postgres.port}/nodb"
    )
    assert 'database "nodb" does not exist' in missing
