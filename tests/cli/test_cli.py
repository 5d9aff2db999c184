"""`python -m evalframe` as a user runs it: subprocesses, real HTTP to the fake judge, real MLflow."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from evalframe.data.rows import load_rows
from evalframe.report.console import ui_command
from tests.conftest import fake_model, run_cli
from tests.testserver import FakeLLMServer

pytestmark = pytest.mark.slow
FAKE_KEY = "sk-evalframe-test-4f9c2a7e1b"


def _mlflow_run(db: Path) -> tuple[object, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    return client, runs[0]


def test_answer_similarity_end_to_end_logs_everything_to_mlflow(
    tmp_path: Path, judge_server: FakeLLMServer
) -> None:
    result = run_cli(
        ["scorer=answer_similarity", *fake_model(judge_server)],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": FAKE_KEY},
    )
    assert result.returncode == 0, result.stderr
    assert "answer_similarity" in result.stdout and "unscored" in result.stdout  # the summary table
    view = rf"^View: {re.escape(ui_command(tmp_path))}  ->  http://127.0.0.1:5000/#/experiments/\d+/runs/\w+$"
    assert re.search(view, result.stdout, re.M)
    # One extraction per distinct text (outputs and ground truths; a text shared by rows is extracted
    # once), one analysis per non-empty output; an empty output costs no call at all.
    rows = [r for r in load_rows({"path": None}) if r.output and r.output.strip()]
    texts = {r.ground_truth for r in rows} | {r.output for r in rows}
    assert judge_server.count("SemanticUnits") == len(texts) < 2 * 28
    assert judge_server.count("Analysis") == 26

    client, run = _mlflow_run(tmp_path / "mlflow.db")
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags  # type: ignore[attr-defined]
    assert params["model.name"] == "openai/gpt-4o-mini"
    assert params["penalties.missing"] == "0.15"
    assert params["penalties.contradiction"] == "1.0"
    # Each value once: the scorer takes penalties, model and reason from the root keys.
    assert not [
        k
        for k in params
        if k.startswith(("scorers.answer_similarity.penalties", "scorers.answer_similarity.model"))
    ]
    assert "None" not in params.values()
    assert metrics["answer_similarity/scored"] == 28 and metrics["answer_similarity/unscored"] == 0
    assert 0 < metrics["answer_similarity/mean"] < 1
    assert {"answer_similarity/std", "answer_similarity/min", "answer_similarity/max"} <= set(metrics)
    assert metrics["usage/prompt_tokens"] > 0
    assert tags["evalframe.scorers"] == "answer_similarity" and tags["evalframe.dataset"] == "sample"
    assert tags["evalframe.model"] == "openai/gpt-4o-mini"

    run_id = run.info.run_id  # type: ignore[attr-defined]
    artifacts = {a.path for a in client.list_artifacts(run_id)}  # type: ignore[attr-defined]
    assert {"items.json", "config.yaml", "prompts.jsonl", "reasons.md", "results.jsonl"} <= artifacts
    # prompts.jsonl is written a line at a time (never one string): one JSON object per model call.
    prompts = Path(client.download_artifacts(run_id, "prompts.jsonl", str(tmp_path))).read_text()  # type: ignore[attr-defined]
    calls = [json.loads(line) for line in prompts.splitlines()]
    assert prompts.endswith("}\n") and len(calls) >= 28 and all(c["messages"] and c["item"] for c in calls)
    table = json.loads(Path(client.download_artifacts(run_id, "items.json", str(tmp_path))).read_text())  # type: ignore[attr-defined]
    table_rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    by_id = {r["id"]: r for r in table_rows}
    assert by_id["exact-capital"]["answer_similarity/score"] == 1.0
    assert by_id["empty-output"]["answer_similarity/score"] == 0.0
    assert by_id["contradiction-date"]["answer_similarity/score"] == 0.0
    assert "Contradicts" in by_id["contradiction-date"]["answer_similarity/reason"]
    assert by_id["extra-python"]["answer_similarity/score"] == 0.9

    # The full item record carries both step results, the prompts, usage, latency and an error field.
    logged = Path(client.download_artifacts(run_id, "results.jsonl", str(tmp_path / "dl")))  # type: ignore[attr-defined]
    full = [json.loads(line) for line in logged.read_text().splitlines()]
    item = next(i for i in full if i["id"] == "partial-continents")["scores"]["answer_similarity"]
    assert [s["step"] for s in item["steps"]] == ["extract", "extract", "analyze"]
    assert item["details"]["ground_truth_units"] == [
        "Asia is the largest continent",
        "Australia is the smallest continent",
    ]
    assert item["details"]["analysis"]["matches"][1]["match_type"] in {"partial", "missing"}
    assert item["steps"][2]["messages"][1]["content"].count("GROUND_TRUTH_UNITS") == 2
    assert item["steps"][0]["usage"]["prompt_tokens"] > 0 and item["steps"][0]["latency"] > 0
    assert item["error"] is None

    # The results also stay on disk, in the Hydra run directory.
    saved = list(tmp_path.glob("outputs/*/*/results.jsonl"))
    assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == 28

    # The fake key never reaches anything the run wrote or printed.
    written = "".join(
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db"
    )
    assert FAKE_KEY not in written + result.stdout + result.stderr
    assert FAKE_KEY.encode() not in (tmp_path / "mlflow.db").read_bytes()


def test_missing_key_exits_2_before_any_work(tmp_path: Path, judge_server: FakeLLMServer) -> None:
    result = run_cli(["scorer=answer_similarity", "model=gpt"], cwd=tmp_path)
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message.count("\n") == 0, message  # one clear line, no traceback
    assert "OPENAI_API_KEY is not set" in message
    assert "model=claude" in message and "model=ollama" in message and "model.api_base=" in message
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "outputs").exists()  # Hydra made a run directory; nothing ran, so it is gone
    assert judge_server.count() == 0


@pytest.mark.parametrize(
    ("option", "variable"), [("claude", "ANTHROPIC_API_KEY"), ("gemini", "GEMINI_API_KEY")]
)
def test_missing_key_names_each_providers_variable(tmp_path: Path, option: str, variable: str) -> None:
    result = run_cli(["scorer=answer_similarity", f"model={option}"], cwd=tmp_path)
    assert result.returncode == 2
    assert f"{variable} is not set" in result.stderr


def test_default_job_runs_offline_with_local_embeddings(tmp_path: Path) -> None:
    result = run_cli([], cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    [run_dir] = (tmp_path / "outputs").glob("*/*")
    assert not [p for p in run_dir.rglob("*.log")]  # no empty evalframe.log: Hydra logs to the console only
    assert "semantic_similarity" in result.stdout
    _, run = _mlflow_run(tmp_path / "mlflow.db")
    metrics = run.data.metrics  # type: ignore[attr-defined]
    assert metrics["semantic_similarity/scored"] == 28
    assert 0.3 < metrics["semantic_similarity/mean"] < 0.95
    assert run.data.params["scorers.semantic_similarity.models"] == '["local/all-MiniLM-L6-v2"]'  # type: ignore[attr-defined]


def test_mlflow_tracking_uri_from_the_environment(tmp_path: Path, judge_server: FakeLLMServer) -> None:
    db = tmp_path / "elsewhere.db"
    result = run_cli(
        ["scorer=answer_similarity", *fake_model(judge_server), "dataset.limit=2"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": FAKE_KEY, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"},
    )
    assert result.returncode == 0, result.stderr
    assert db.exists() and not (tmp_path / "mlflow.db").exists()
    _, run = _mlflow_run(db)
    assert run.data.metrics["answer_similarity/scored"] == 2  # type: ignore[attr-defined]


def test_help_and_cfg_job_do_not_import_the_heavy_libraries(tmp_path: Path) -> None:
    result = run_cli(["--help"], cwd=tmp_path)
    assert result.returncode == 0
    assert (
        "scorer: answer_relevancy, answer_similarity, context_precision, context_precision_ids, "
        "context_recall, context_recall_ids, conversation_completeness, conversation_guidelines, "
        "exact_match, factuality, faithfulness, goal_accuracy, ground_truth_similarity, "
        "hallucination, knowledge_retention, role_adherence, "
        "semantic_similarity, token_f1, tool_call_accuracy, turn_relevancy" in result.stdout
    )
    assert "model: claude, gemini, gpt, local, ollama" in result.stdout
    assert "base" not in result.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]

    import subprocess
    import sys

    for asks in (["scorer=answer_similarity", "--cfg", "job"], ["scorer=answer_similarity", "--help"]):
        job = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "evalframe", *asks],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        if "--cfg" in asks:
            assert "name: openai/gpt-4o-mini" in job.stdout and "missing: 0.15" in job.stdout
        # litellm is preloaded on a thread for a run: not for what only prints
        lines = [line for line in job.stderr.splitlines() if "|" in line]
        imported = {line.split("|")[-1].strip().split(".")[0] for line in lines}
        assert not imported & {"litellm", "mlflow", "torch", "sentence_transformers"}, asks
    assert not (tmp_path / "outputs").exists()  # --cfg runs nothing


def test_bad_override_is_a_clear_error(tmp_path: Path) -> None:
    result = run_cli(["scorer=no_such_scorer"], cwd=tmp_path)
    assert result.returncode != 0
    assert "no_such_scorer" in result.stderr and "answer_similarity" in result.stderr


def test_unscored_items_are_nan_not_zero(tmp_path: Path, judge_server: FakeLLMServer) -> None:
    judge_server.responder = lambda request: "this is not JSON"
    result = run_cli(
        ["scorer=answer_similarity", *fake_model(judge_server), "dataset.limit=3", "model.reply_retries=1"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": FAKE_KEY},
    )
    assert result.returncode == 4, result.stderr  # every item unscored: far above max_unscored_rate
    assert "unscored rate" in result.stdout and "FAIL" in result.stdout
    _, run = _mlflow_run(tmp_path / "mlflow.db")
    metrics = run.data.metrics  # type: ignore[attr-defined]
    assert metrics["answer_similarity/unscored"] == 3 and metrics["answer_similarity/scored"] == 0
    assert "answer_similarity/mean" not in metrics  # no mean of nothing, and never a 0
    saved = next(tmp_path.glob("outputs/*/*/results.jsonl")).read_text().splitlines()
    first = json.loads(saved[0])["scores"]["answer_similarity"]
    assert first["score"] is None or math.isnan(first["score"])
    assert "invalid reply after 2 attempt(s)" in first["error"]
    assert first["steps"][0]["raw"] == "this is not JSON"
