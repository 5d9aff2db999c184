"""Debian packages some tests need (Chromium for the UI test, PostgreSQL for team tracking).

The test set-up installs them itself, so `make test` works on a fresh machine, as CI runs it. A test
that needs a package fails when it cannot be installed: it is never silently skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

_lock = threading.Lock()
_updated = False


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )


def ensure(packages: list[str], present: list[str]) -> None:
    """Install `packages` with apt-get unless every path in `present` exists already."""
    global _updated
    with _lock:
        if all(Path(p).exists() or shutil.which(p) for p in present):
            return
        if shutil.which("apt-get") is None:
            raise RuntimeError(f"{' '.join(packages)} needed, and this machine has no apt-get to install it")
        if not _updated:  # package lists are empty on a fresh machine
            _apt("update")
            _updated = True
        done = _apt("install", "-y", "--no-install-recommends", *packages)
        if done.returncode != 0:
            raise RuntimeError(f"apt-get install {' '.join(packages)} failed:\n{done.stderr[-2000:]}")
