"""`python -m evalframe rescore run_id=ID ...`: a logged run re-scored with new weights from its stored
judge replies, without a model call, logged as a new run linked to the old one."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from evalframe.cli.rescore import command_line
from evalframe.errors import ConfigError
from evalframe.models.cache import Cache, Replay, ReplayMiss
from evalframe.models.llm import LLM, response_format
from evalframe.models.settings import ModelSettings
from evalframe.models.steps import Message, Stats, StepResult
from evalframe.results.intervals import paired
from evalframe.results.summary import fmt, fmt_interval
from evalframe.run.rescore import merge
from evalframe.scorers.answer_similarity import Analysis, Penalties, SemanticUnits, score
from evalframe.tracking.read import fetch_run
from tests.conftest import fake_model, run_cli
from tests.scorers.test_answer_relevancy import relevancy_judge
from tests.scorers.test_ground_truth_similarity import compare_judge
from tests.scorers.test_judge import ROWS as FACTUALITY_ROWS, factuality_responder
from tests.testserver import FakeLLMServer, FakeRequest

KEY = {"OPENAI_API_KEY": "sk-x"}


def test_new_overrides_replace_the_old_ones_of_the_same_key_and_below() -> None:
    old = ["scorer=answer_similarity", "penalties.missing=0.05", "tracking.uri=x", "resume=true", "model=gpt"]
    assert merge(old, ["penalties.missing=0.3"]) == [
        "scorer=answer_similarity",
        "model=gpt",
        "penalties.missing=0.3",
    ]
    assert merge(old, ["penalties=strict"]) == ["scorer=answer_similarity", "model=gpt", "penalties=strict"]
    assert merge(["model.name=a", "model.api_base=b"], ["model=claude"]) == ["model=claude"]
    assert merge(["rescore='x'", "penalties=strict"], ["-m", "penalties.missing=0.1,0.3"]) == [
        "penalties=strict",
        "-m",
        "penalties.missing=0.1,0.3",
    ]


def test_the_replay_serves_stored_replies_and_failures_and_refuses_anything_else() -> None:
    settings = ModelSettings(name="openai/judge", api_base="http://127.0.0.1:9/v1")  # nothing listens
    asked = [{"role": "user", "content": "Units of: Paris is the capital of France."}]
    failed = [{"role": "user", "content": "Units of: something the judge could not answer."}]
    recorder = LLM(settings, asyncio.Semaphore(1), Cache("off"), Stats()).replies
    stored = {
        recorder.key(asked, response_format(SemanticUnits)): {"raw": '{"units": ["Paris is the capital"]}'},
        recorder.key(failed, response_format(SemanticUnits)): {"raw": "{oops", "error": "invalid reply"},
    }
    stats = Stats()
    llm = LLM(settings, asyncio.Semaphore(1), Replay(stored), stats)

    async def ask(messages: list[Message]) -> StepResult:
        return await llm.structured("extract", messages, SemanticUnits)

    ok = asyncio.run(ask(asked))
    assert ok.reply == {"units": ["Paris is the capital"]} and ok.cached and ok.key in stored
    bad = asyncio.run(ask(failed))
    assert not bad.ok and bad.error == "invalid reply" and bad.raw == "{oops"  # unscored, as in the run
    with pytest.raises(ReplayMiss) as miss:
        asyncio.run(ask([{"role": "user", "content": "a prompt the run never sent"}]))
    assert miss.value.step == "extract" and miss.value.model == "openai/judge"
    assert stats.calls == 0 and stats.hits == 2


def cells_of(line: str) -> list[str]:
    """A console table row's cells (a line of box characters or a title: none)."""
    return [c.strip() for c in line.split("│")[1:-1]] or [c.strip() for c in line.split("┃")[1:-1]]


def mlflow_runs(tmp_path: Path) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("evalframe")
    assert experiment is not None
    return list(client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]))


def stored_items(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    local = client.download_artifacts(run_id, "results.jsonl", str(tmp_path / run_id))
    return [json.loads(line) for line in Path(local).read_text().splitlines()]


@pytest.mark.slow
def test_rescore_with_new_penalties_makes_no_call_and_links_the_old_run(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    judge_server.responder = compare_judge
    scorers = "scorer=[answer_similarity,ground_truth_similarity,token_f1]"
    first = run_cli([scorers, *fake_model(judge_server), "dataset.limit=10"], cwd=tmp_path, env=KEY)
    assert first.returncode == 0, first.stderr
    [old] = mlflow_runs(tmp_path)
    assert judge_server.count() > 0
    judge_server.reset()

    # A cache directory of its own, empty, and no API key: every reply comes from the logged run.
    fresh = {"EVALFRAME_CACHE_DIR": str(tmp_path / "empty-cache")}
    changed = ["penalties.missing=0.3", "penalties.contradiction=0.2"]
    again = run_cli(["rescore", f"run_id={old.info.run_id}", *changed], cwd=tmp_path, env=fresh)
    assert again.returncode == 0, again.stderr
    assert judge_server.count() == 0
    assert "mean before" in again.stdout and "0 model calls" in again.stdout

    [_, new] = mlflow_runs(tmp_path)
    assert new.data.tags["evalframe.rescored_from"] == old.info.run_id
    assert old.info.run_id in new.data.tags["mlflow.note.content"]
    assert "penalties.missing=0.3" in new.data.tags["mlflow.note.content"]
    assert new.data.params["penalties.missing"] == "0.3"
    assert "penalties.contradiction=0.2" in json.loads(new.data.tags["evalframe.overrides"])

    # The new scores are the pure formula on the stored analyses, computed here independently.
    weights = Penalties(missing=0.3, contradiction=0.2)
    before = stored_items(tmp_path, old.info.run_id)
    after = {i["id"]: i for i in stored_items(tmp_path, new.info.run_id)}
    expected = {}
    for item in before:
        result = item["scores"]["answer_similarity"]
        analysis = result["details"].get("analysis")
        expected[item["id"]] = (
            score(Analysis.model_validate(analysis), weights) if analysis else result["score"]
        )
        for unchanged in ("ground_truth_similarity", "token_f1"):
            assert after[item["id"]]["scores"][unchanged]["score"] == item["scores"][unchanged]["score"]
    assert {i: a["scores"]["answer_similarity"]["score"] for i, a in after.items()} == expected
    # A missing unit now costs 0.3 instead of 0.15: partly answered items score lower.
    old_by_id = {i["id"]: i["scores"]["answer_similarity"]["score"] for i in before}
    assert expected["missing-everest"] < old_by_id["missing-everest"]
    assert expected["exact-capital"] == old_by_id["exact-capital"] == 1.0
    mean = new.data.metrics["answer_similarity/mean"]
    assert math.isclose(mean, sum(expected.values()) / len(expected))
    assert mean < old.data.metrics["answer_similarity/mean"]
    assert new.data.metrics["token_f1/mean"] == old.data.metrics["token_f1/mean"]

    # The old-vs-new table: each mean with its 95% interval as its run logged them, and the change with
    # the paired interval of the items' differences (the same items, paired by id).
    def mean_cell(run: Any, name: str) -> str:
        m = run.data.metrics
        interval = (m[f"{name}/mean_ci_low"], m[f"{name}/mean_ci_high"])
        return f"{fmt(m[f'{name}/mean'])} {fmt_interval(interval)}"

    table = again.stdout.split(f"rescore of run {old.info.run_id}")[1]
    shown = {cells[0]: cells[1:] for line in table.splitlines() if len(cells := cells_of(line)) == 4}
    assert shown["scorer"] == ["mean before [95% CI]", "mean after [95% CI]", "change [95% CI]"]
    changes = {}
    for name in ("answer_similarity", "ground_truth_similarity", "token_f1"):
        changes[name] = change = paired(
            [i["scores"][name]["score"] for i in before],
            [after[i["id"]]["scores"][name]["score"] for i in before],
        )
        change_cell = f"{fmt(change.mean, signed=True)} {fmt_interval(change.interval, change.n)}"
        assert shown[name] == [mean_cell(old, name), mean_cell(new, name), change_cell]
    # A dearer missing unit lowers some items and raises none: no part of the interval above 0.
    lowered = changes["answer_similarity"]
    assert lowered.n == 10 and lowered.worsened and not lowered.improved and lowered.interval.high <= 0
    assert shown["token_f1"][2] == "+0.000 [0.000, 0.000]"  # nothing moved
    assert (
        f"| answer_similarity | {' | '.join(shown['answer_similarity'])} |"
        in new.data.tags["mlflow.note.content"]
    )

    # An override that changes a request needs a normal run: exit 2, no call, nothing logged.
    other = run_cli(["rescore", f"run_id={old.info.run_id}", "model.name=openai/other"], cwd=tmp_path)
    assert other.returncode == 2 and judge_server.count() == 0
    assert "model.name=openai/other changes a prompt, the judge model" in other.stderr
    assert "without rescore" in other.stderr
    assert len(mlflow_runs(tmp_path)) == 2

    # Usage errors, found before anything runs (in-process: the same code the sub-command runs first).
    store = f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=r"dataset\.limit=3 cannot change them"):
        command_line([f"run_id={old.info.run_id}", "dataset.limit=3", store], tmp_path / "dl")
    with pytest.raises(ConfigError, match="no such run in the MLflow store"):
        command_line(["run_id=0123456789abcdef0123456789abcdef", store], tmp_path / "dl")
    with pytest.raises(ConfigError, match=r"check tracking\.uri"):
        command_line(
            [f"run_id={old.info.run_id}", f"tracking.uri=sqlite:///{tmp_path}/no/such/dir/mlflow.db"],
            tmp_path / "dl",
        )
    assert not (tmp_path / "no").exists()  # no empty store made on the way
    from mlflow.tracking import MlflowClient

    bare = MlflowClient(tracking_uri=store.removeprefix("tracking.uri=")).create_run(old.info.experiment_id)
    with pytest.raises(ConfigError, match=r"no results\.jsonl artifact"):
        fetch_run(store.removeprefix("tracking.uri="), bare.info.run_id, tmp_path / "download")
    with pytest.raises(ConfigError, match="logged without its command line"):
        command_line([f"run_id={bare.info.run_id}", store], tmp_path / "dl")
    assert judge_server.count() == 0


def relevancy_and_facts(request: FakeRequest) -> Any:
    if "choice" in (request.schema or {}).get("properties", {}):
        return factuality_responder(request)
    return relevancy_judge(request)


@pytest.mark.slow
def test_rescore_reweighs_relevancy_and_a_judge_table_without_the_dataset(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    judge_server.responder = relevancy_and_facts
    data = tmp_path / "qa.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": i, "input": "Question?", "ground_truth": gt, "output": out}) + "\n"
            for i, gt, out in FACTUALITY_ROWS
        )
    )
    embeddings = f"scorers.semantic_similarity.api_base={judge_server.openai_base}"
    args = [
        "scorer=[answer_relevancy,factuality,semantic_similarity]",
        *fake_model(judge_server),
        "scorers.semantic_similarity.models=[openai/text-embedding-3-small]",
        embeddings,
        "dataset=jsonl",
    ]
    first = run_cli([*args, f"dataset.path={data}"], cwd=tmp_path, env=KEY)
    assert first.returncode == 0, first.stderr
    [old] = mlflow_runs(tmp_path)
    judge_server.reset()
    data.unlink()  # the rows and outputs come from the logged run, not from the dataset file

    changed = [
        "scorers.answer_relevancy.uncertainty_weight=0.3",
        "scorers.factuality.output.choices.subset=0.2",
        "scorers.semantic_similarity.threshold=0.9",
    ]
    again = run_cli(["rescore", f"run_id={old.info.run_id}", *changed], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert judge_server.count() == 0
    [_, new] = mlflow_runs(tmp_path)
    before = {i["id"]: i["scores"] for i in stored_items(tmp_path, old.info.run_id)}
    after = {i["id"]: i["scores"] for i in stored_items(tmp_path, new.info.run_id)}
    # "World War II ended in 1918" is on topic but wrong: unsure, weighted 0.5 before and 0.3 now.
    assert before["disagree"]["answer_relevancy"]["score"] == 0.5
    assert after["disagree"]["answer_relevancy"]["score"] == 0.3
    assert before["subset"]["factuality"]["score"] == 0.4 and after["subset"]["factuality"]["score"] == 0.2
    for same in ("same", "superset"):
        assert after[same]["factuality"]["score"] == before[same]["factuality"]["score"]
    # Embeddings are not replayed (too large to keep): their cosines are, and the threshold applies to them.
    for item, scores in before.items():
        cosine = scores["semantic_similarity"]["details"]["cosine"]["openai/text-embedding-3-small"]
        assert after[item]["semantic_similarity"]["score"] == (1.0 if cosine >= 0.9 else 0.0), cosine
    assert {s["semantic_similarity"]["score"] for s in after.values()} == {0.0, 1.0}
