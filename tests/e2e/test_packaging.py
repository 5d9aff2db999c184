"""Configs, prompts and the sample dataset ship in the wheel and work from it, not only from a checkout."""

from __future__ import annotations

import os
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
