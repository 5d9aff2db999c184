"""Where the bundled config, prompts and sample data live.

In an installed wheel conf/ and prompts/ are copied into the package (see pyproject's force-include);
in a source checkout they sit at the top of the repository, one level above this package.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    inside = PACKAGE_DIR / name
    return inside if inside.is_dir() else PACKAGE_DIR.parent / name


CONF_DIR = _bundled("conf")
PROMPTS_DIR = _bundled("prompts")
RESOURCES_DIR = PACKAGE_DIR / "resources"
SAMPLE_DATASET = RESOURCES_DIR / "sample.jsonl"
