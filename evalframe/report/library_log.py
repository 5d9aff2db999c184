"""MLflow's own log kept off the console: the errors its loggers report (and SQLAlchemy's, alembic's
under it), tracebacks and all, go to a file of their own, named once on the console when the first
arrives. evalframe says in one line itself what went wrong and what to do; a store locked or removed
during a write-back otherwise put some 400 lines of SQLAlchemy tracebacks on stderr.

MLflow replaces its loggers' handlers when it is imported, unless MLFLOW_CONFIGURE_LOGGING is false
(evalframe.tracking sets it, before anything imports mlflow); `keep()` replaces them too, for a
process that imported mlflow first."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

from evalframe.redaction import scrub_text

# The loggers MLflow configures itself (sqlalchemy.engine under sqlalchemy: MLflow gives it a handler).
LOGGERS = ("mlflow", "sqlalchemy", "sqlalchemy.engine", "alembic", "huey")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LibraryLog(logging.Handler):
    """Appends each record (no secret in it) to a temporary file made at the first one, and says once
    on stderr where that file is. Records arrive on MLflow's writer threads too: Handler.handle holds
    the handler's lock around emit."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter(FORMAT))
        self.path: Path | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = scrub_text(self.format(record))
            if self.path is None:
                handle, name = tempfile.mkstemp(prefix="evalframe-mlflow-", suffix=".log")
                os.close(handle)
                self.path = Path(name)
                said = f"note: MLflow's own error messages (with their tracebacks) are in {self.path}"
                print(said, file=sys.stderr)
            with self.path.open("a", encoding="utf-8") as log:
                log.write(text + "\n")
        except Exception:
            self.handleError(record)


HANDLER = LibraryLog()


def keep(verbose: bool = False) -> None:
    """MLflow's loggers into a new file from now on (a command's own, made when the first error comes);
    `verbose` (hydra.verbose=true): onto the console, as Hydra's logging shows everything else."""
    HANDLER.path = None
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [] if verbose else [HANDLER]
        logger.propagate = verbose
