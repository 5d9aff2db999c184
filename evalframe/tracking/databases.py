"""The kinds of store MLflow takes, told apart by their URI's scheme, and the ones beyond HTTP and SQLite
checked within seconds before MLflow is given them (store.unavailable says which check a URI gets).

Without these checks MLflow retries a database server it cannot reach for some 100 s and then prints
SQLAlchemy's traceback; a missing driver, a file store (which MLflow 3 refuses) or an unknown scheme
(said by its model registry) is a traceback at once. Each is one line here, naming the store with its
password blanked (`shown`: store.display_uri's)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from evalframe.redaction import REDACTED

# How long a database server's port gets to take a connection, and then its driver to log in.
CONNECT_TIMEOUT = 3.0
# The database servers MLflow keeps runs and traces in (through SQLAlchemy), and their usual ports.
SERVERS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
# Each driver's own name for a connection's timeout: SQLAlchemy passes connect_args through as they are.
_TIMEOUT_ARGUMENT = {
    **dict.fromkeys(("psycopg", "psycopg2", "mysqldb", "pymysql"), "connect_timeout"),
    **{"pg8000": "timeout", "mysqlconnector": "connection_timeout", "pyodbc": "timeout"},
    **{"pymssql": "login_timeout"},
}
ALLOW_FILE_STORE = (
    "MLFLOW_ALLOW_FILE_STORE"  # MLflow 3's opt-in to its file store, which it otherwise refuses
)


def scheme(uri: str) -> str:
    """The kind of store `uri` names: `sqlite`, `postgresql` (its `+driver` left out), `http`, `file`;
    "" for a plain path (a file store, to MLflow)."""
    found = urlparse(uri).scheme.lower().split("+", 1)[0]
    return "" if len(found) == 1 else found  # C:\\... is a path


def _known() -> list[str]:
    """Every scheme MLflow's tracking takes, its plugins' too (mlflow is pinned exactly: its registry's
    table is read as it is)."""
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    return sorted(str(s) for s in _tracking_store_registry._registry)


def unsupported(uri: str, shown: str) -> str | None:
    """Why MLflow cannot take `uri` at all, without asking anything over the network: an unknown
    scheme, a file store MLflow 3 refuses, a database whose driver is not installed. None otherwise."""
    kind = scheme(uri)
    if kind in ("http", "https", "sqlite"):
        return None
    if kind not in _known():
        listed = ", ".join(f"{s}:" for s in _known() if s)
        return f"{shown} is no MLflow store: its URI starts with one of {listed} (or is a directory)"
    if kind in ("", "file") and os.environ.get(ALLOW_FILE_STORE, "").lower() not in ("true", "1"):
        return (
            f"MLflow 3 keeps no runs or traces in a file store ({shown}): use sqlite:///PATH/mlflow.db "
            f"(`mlflow migrate-filestore` moves an existing one there), or set {ALLOW_FILE_STORE}=true"
        )
    if kind in SERVERS:
        return _driver(uri, shown)
    return None


def _driver(uri: str, shown: str) -> str | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        dialect = make_url(uri).get_dialect()
        dialect.import_dbapi()
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        return f"{shown} is not a database URL SQLAlchemy reads ({e})"
    except ImportError as e:
        extra = ' (pip install "evalframe[team]")' if getattr(e, "name", "") == "psycopg" else ""
        return (
            f"the database driver of {shown} is not installed ({e}){extra}: install it, or name an "
            "installed one in the URI (postgresql+psycopg://, mysql+pymysql://)"
        )
    return None


def unreachable(uri: str, shown: str) -> str | None:
    """Why the database server of `uri` cannot be used, found within seconds: its port takes no
    connection within CONNECT_TIMEOUT, or its driver's login is refused (a password, a database that
    is not there) or takes longer. None when a connection opens."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if url.host:  # else a Unix socket (`?host=/var/run/postgresql`): the driver's connect says it
        port = url.port or SERVERS[scheme(uri)]
        try:
            socket.create_connection((url.host, port), timeout=CONNECT_TIMEOUT).close()
        except OSError as e:
            why = f"no answer within {CONNECT_TIMEOUT:g} s" if isinstance(e, TimeoutError) else str(e)
            return f"cannot reach the database of the MLflow store at {shown} ({url.host}:{port}: {why})"
    argument = _TIMEOUT_ARGUMENT.get(url.get_dialect().driver)
    engine = sqlalchemy.create_engine(
        url,
        connect_args={argument: int(CONNECT_TIMEOUT)} if argument else {},
        poolclass=sqlalchemy.pool.NullPool,
    )
    try:
        with engine.connect():
            return None
    except Exception as e:  # what the driver says, on one line and without the password
        said = " ".join(str(getattr(e, "orig", None) or e).split())
        said = said.replace(url.password, REDACTED) if url.password else said
        return f"the database of the MLflow store at {shown} refused the connection ({said[:300]})"
    finally:
        engine.dispose()


def file_store(uri: str, shown: str, write: bool) -> str | None:
    """Why the file store at `uri` (allowed by ALLOW_FILE_STORE) cannot be read, or written when
    `write`: its directory is not there (to read), or cannot be made or written (to write)."""
    parsed = urlparse(uri)
    path = Path(url2pathname(parsed.path) if parsed.scheme else uri).expanduser().absolute()
    there = path if path.exists() else path.parent
    if not write and not path.is_dir():
        return f"no MLflow file store at {path} ({shown}): check the URI"
    if not there.is_dir():
        return f"cannot make the MLflow file store {path}: {there} is not a directory"
    if write and not os.access(there, os.W_OK):
        return f"cannot write the MLflow file store {path}: {there} is read-only"
    return None
