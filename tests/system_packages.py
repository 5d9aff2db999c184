"""Debian packages some tests need (Chromium for the UI test, PostgreSQL for team tracking).

The build installs them (`make system-packages`, which `make test` runs first); tests never install
anything. A test whose package is missing fails with a message naming that target: it is never
silently skipped.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def require(packages: list[str], present: list[str]) -> None:
    """Fail the calling test unless every path (or command) in `present` exists."""
    missing = [p for p in present if not (Path(p).exists() or shutil.which(p))]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not found: this test needs the Debian packages {' '.join(packages)}; "
            "install them with `make system-packages` (make test does it first)"
        )
