"""Where the bundled config, prompts and sample data live, and the one way evalframe rewrites a file.

In an installed wheel conf/ and prompts/ are copied into the package (see pyproject's force-include);
in a source checkout they sit at the top of the repository, one level above this package.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    inside = PACKAGE_DIR / name
    return inside if inside.is_dir() else PACKAGE_DIR.parent / name


CONF_DIR = _bundled("conf")
PROMPTS_DIR = _bundled("prompts")
RESOURCES_DIR = PACKAGE_DIR / "resources"
SAMPLE_DATASET = RESOURCES_DIR / "sample.jsonl"


def write_atomically(path: Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it (one per process: the jobs of a parallel
    sweep may write the same file) and a rename: a reader (a parallel job, a resume after a kill) sees
    the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
