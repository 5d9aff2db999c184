"""Every option of every config group composes, and runs against the fake judge (in-process)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalframe.config import compose as configs
from evalframe.errors import ConfigError
from evalframe.paths import CONF_DIR, PROMPTS_DIR, SAMPLE_DATASET
from evalframe.results.run_result import RunResult
from evalframe.run import pipeline
from evalframe.tracking import sweeps
from tests.conftest import Judge, compose, fake_model
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def evaluate(overrides: list[str], tmp_path: Path) -> RunResult:
    return pipeline.evaluate(compose(overrides), tmp_path / "out")[0]


def judge(server: Judge, *extra: str) -> list[str]:
    return ["scorer=answer_similarity", *fake_model(server), "tracking=none", "dataset.limit=4", *extra]


def test_every_group_has_the_options_the_docs_promise() -> None:
    assert options("dataset") == [
        "chat_sample",
        "csv",
        "json",
        "jsonl",
        "mlflow_traces",
        "rag_sample",
        "run",
        "sample",
        "sas_squad",
    ]
    assert options("target") == ["dataset", "http", "llm", "python"]
    assert options("scorer") == [
        "answer_relevancy",
        "answer_similarity",
        "context_precision",
        "context_precision_ids",
        "context_recall",
        "context_recall_ids",
        "conversation_completeness",
        "conversation_guidelines",
        "exact_match",
        "factuality",
        "faithfulness",
        "goal_accuracy",
        "ground_truth_similarity",
        "hallucination",
        "knowledge_retention",
        "role_adherence",
        "semantic_similarity",
        "token_f1",
        "tool_call_accuracy",
        "turn_relevancy",
    ]
    assert set(options("model")) >= {"gpt", "claude", "gemini", "ollama", "local"}
    assert options("penalties") == ["default", "lenient", "strict"]
    assert options("tracking") == ["mlflow", "none"]
    # Hydra's --help lists every folder as a group: the presets' and judges' shared keys (*_base.yaml)
    # sit beside config.yaml, so no base shows up as something to choose.
    groups = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())
    assert groups == ["dataset", "model", "penalties", "scorer", "sweep", "target", "tracking"]
    bases = sorted(p.stem for p in CONF_DIR.glob("*_base.yaml"))
    assert bases == ["dataset_base", "judge_base", "model_base", "simulate_base"]


@pytest.mark.parametrize("mode", ["readwrite", "read", "write", "off"])
def test_each_cache_mode_composes_and_opens(mode: str, tmp_path: Path) -> None:
    from evalframe.models.cache import Cache

    cache = compose([f"cache.mode={mode}", f"cache.dir={tmp_path}"])["cache"]
    assert cache == {"mode": mode, "dir": str(tmp_path)}
    assert Cache(cache["mode"], cache["dir"]).mode == mode


# The keys a dataset preset adds to the base's, each documented in its file: where its rows come from.
OWN_KEYS = {
    "run": {"run_id", "tracking_uri"},
    "mlflow_traces": {
        "experiment",
        "tracking_uri",
        "status",
        "tags",
        "filter",
        "since",
        "until",
        "page_size",
        "sample",
        "sessions",
    },
}


@pytest.mark.slow
def test_presets_share_their_common_keys_from_one_base() -> None:
    base = {"dataset": compose([])["dataset"], "model": compose([])["model"]}
    for group in ("dataset", "model"):
        for option in options(group):
            files = ("csv", "json", "jsonl")
            overrides = [f"{group}={option}"] + (["dataset.path=x"] if option in files else [])
            own = OWN_KEYS.get(option, set()) if group == "dataset" else set()
            assert set(compose(overrides)[group]) == set(base[group]) | own, option
    assert compose(["model=ollama"])["model"]["reply_retries"] == 2


def test_gate_thresholds_name_no_scorer_until_set() -> None:
    assert compose([])["gate"] == {
        "min_score": {},
        "max_score": {},
        "min_pass_rate": {},
        "pass_threshold": 0.5,
    }
    gate = compose(["+gate.min_score.answer_similarity=0.8"])["gate"]
    assert gate["min_score"] == {"answer_similarity": 0.8}


def test_mlflow_params_hold_each_resolved_value_once() -> None:
    from evalframe.tracking.log import params

    two = compose(["scorer=[answer_similarity,factuality]", "penalties.missing=0.3", "+extra_key=null"])
    logged = params(two)
    # The scorer files take penalties, model and reason from the root: logged once, under the root's name,
    # so a swept penalty is one column (one axis of the compare page's chart).
    assert logged["penalties.missing"] == "0.3" and logged["model.name"] == "openai/gpt-4o-mini"
    assert logged["reason"] == "analysis"
    assert not [k for k in logged if k.startswith("scorers.") and k.split(".")[2] in two]
    # A null or an empty mapping is a placeholder, not a setting.
    assert "None" not in logged.values() and "extra_key" not in logged and "gate.min_score" not in logged
    assert "model.extra" not in logged and logged["model.max_tokens"] == "4096"  # a setting, not a secret
    # 97 when every scorer copy, null and gate placeholder was a param; what is left are distinct settings
    # (panels, held-out tuning, reply storage and batch mode added a few; the six column mappings of
    # RAG and agent datasets, six more; tracking.feedback, one; watch.settle and watch.lookback, two).
    assert len(logged) <= 71
    # A scorer given its own judge logs it: it is no longer the root's value.
    two["scorers"]["factuality"]["model"] = {**two["model"], "name": "x/y"}
    own = params(two)
    assert own["scorers.factuality.model.name"] == "x/y" and own["model.name"] == "openai/gpt-4o-mini"
    assert "scorers.answer_similarity.model.name" not in own


@pytest.mark.parametrize("option", options("model"))
def test_each_judge_model_runs_over_its_own_protocol(
    option: str, judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    result = evaluate(
        ["scorer=answer_similarity", *fake_model(judge_server, option), "tracking=none", "dataset.limit=2"],
        tmp_path,
    )
    assert result.summaries["answer_similarity"].scored == 2
    assert result.items[0].scores["answer_similarity"].score == 1.0  # exact-capital
    protocol = {
        "gpt": "openai",
        "claude": "anthropic",
        "gemini": "gemini",
        "ollama": "ollama",
        "local": "openai",
    }[option]
    assert {r.protocol for r in judge_server.requests} == {protocol}
    assert all(r.schema is not None for r in judge_server.requests)  # structured output on the wire


def test_the_offline_judges_need_no_key_and_default_to_the_servers_users_run() -> None:
    """model=ollama: LiteLLM's ollama_chat/ at Ollama's port; model=local: the OpenAI wire at vLLM's and
    llama-server's address. Neither needs a key (the tests' environment has none); each reaches the test
    server over its wire in test_each_judge_model_runs_over_its_own_protocol."""
    from evalframe.models.settings import ModelSettings

    ollama = ModelSettings.from_config(compose(["model=ollama"])["model"])
    local = ModelSettings.from_config(compose(["model=local"])["model"])
    assert (ollama.name.split("/")[0], ollama.api_base) == ("ollama_chat", "http://localhost:11434")
    assert (local.name.split("/")[0], local.api_base) == ("openai", "http://localhost:8000/v1")
    assert ollama.api_key_env is None and local.api_key_env is None
    for settings in (ollama, local):
        settings.check_credentials()  # no ConfigError: no key needed
    assert local.api_key() == "no-key"  # what the OpenAI client is given, as a self-hosted server ignores it


@pytest.mark.parametrize("option", options("model"))
def test_each_judge_model_is_temperature_zero_with_timeout_and_retries(option: str) -> None:
    model = compose([f"model={option}"])["model"]
    assert model["temperature"] == 0 and model["timeout"] > 0 and model["max_retries"] >= 1


def test_penalty_presets_order_the_mean_score(scripted: ScriptedModel, tmp_path: Path) -> None:
    means = {
        option: evaluate(judge(scripted, f"penalties={option}", "dataset.limit=12"), tmp_path)
        .summaries["answer_similarity"]
        .mean
        for option in options("penalties")
    }
    assert means["strict"] < means["default"] < means["lenient"]


def test_penalties_sweep_key_reaches_the_scorer() -> None:
    config = compose(["scorer=answer_similarity", "penalties.missing=0.3", "penalties.contradiction=0.5"])
    assert config["scorers"]["answer_similarity"]["penalties"]["missing"] == 0.3
    assert config["scorers"]["answer_similarity"]["penalties"]["contradiction"] == 0.5


def _write_rows(path: Path, fmt: str) -> None:
    rows = [json.loads(line) for line in SAMPLE_DATASET.read_text().splitlines()[:3]]
    if fmt == "jsonl":
        path.write_text(
            "".join(
                json.dumps({"q": r["input"], "gt": r["ground_truth"], "answer": r["output"]}) + "\n"
                for r in rows
            )
        )
    else:
        import csv

        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["q", "gt", "answer"])
            writer.writerows([r["input"], r["ground_truth"], r["output"]] for r in rows)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_own_dataset_files_with_a_column_mapping(fmt: str, scripted: ScriptedModel, tmp_path: Path) -> None:
    path = tmp_path / f"qa.{fmt}"
    _write_rows(path, fmt)
    result = evaluate(
        judge(
            scripted,
            f"dataset={fmt}",
            f"dataset.path={path}",
            "dataset.columns.input=q",
            "dataset.columns.ground_truth=gt",
            "dataset.columns.output=answer",
        ),
        tmp_path,
    )
    assert [i.id for i in result.items] == (["1", "2", "3"] if fmt == "jsonl" else ["2", "3", "4"])
    assert result.items[0].scores["answer_similarity"].score == 1.0


def test_dataset_path_is_required_for_own_files() -> None:
    from omegaconf.errors import MissingMandatoryValue

    with pytest.raises(MissingMandatoryValue, match=r"dataset\.path"):
        compose(["dataset=jsonl"])


def test_llm_target_generates_outputs_with_the_users_prompt(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    prompt = tmp_path / "mine.j2"
    prompt.write_text("You are a geography bot. Category {{ row.category }}.\nQuestion: {{ input }}")
    result = evaluate(
        judge(
            judge_server,
            "target=llm",
            f"target.prompt={prompt}",
            "dataset.limit=2",
            f"target.model.api_base={judge_server.openai_base}",
        ),
        tmp_path,
    )
    generated = sorted(r.messages[-1]["content"] for r in judge_server.requests if r.schema is None)
    assert generated == [
        "You are a geography bot. Category exact.\nQuestion: What is the capital of France?",
        "You are a geography bot. Category exact.\nQuestion: What is the chemical formula of water?",
    ]
    assert result.items[0].output == "An answer to: Question: What is the capital of France?"
    assert result.items[0].target_step is not None and result.items[0].target_step.usage.prompt_tokens > 0
    assert result.summaries["answer_similarity"].scored == 2


def test_llm_target_model_can_differ_from_the_judge() -> None:
    config = compose(
        ["target=llm", "target.model.name=openai/gpt-4o", "model=claude", "model@target.model=gemini"]
    )
    assert config["target"]["model"]["name"] == "openai/gpt-4o"
    assert config["target"]["model"]["api_key_env"] == "GEMINI_API_KEY"
    assert config["scorers"] == {"semantic_similarity": config["scorers"]["semantic_similarity"]}
    assert config["model"]["name"].startswith("anthropic/")


def test_several_scorers_at_once(scripted: ScriptedModel, tmp_path: Path) -> None:
    result = evaluate(
        [
            "scorer=[answer_similarity,semantic_similarity]",
            *fake_model(scripted),
            "scorers.semantic_similarity.models=[scripted/embed]",  # not the local model: no weights to load
            "tracking=none",
            "dataset.limit=3",
        ],
        tmp_path,
    )
    assert result.scorers == ["answer_similarity", "semantic_similarity"]
    assert all(set(i.scores) == {"answer_similarity", "semantic_similarity"} for i in result.items)
    assert result.items[0].scores["semantic_similarity"].score == 1.0  # identical texts


def test_reason_llm_asks_the_judge_for_prose(scripted: ScriptedModel, tmp_path: Path) -> None:
    result = evaluate(judge(scripted, "reason=llm", "dataset.limit=2"), tmp_path)
    assert scripted.count("Reason") == 2
    assert result.items[0].scores["answer_similarity"].reason == "The judge explains the score in prose."


def test_users_own_prompt_directory(scripted: ScriptedModel, tmp_path: Path) -> None:
    mine = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR / "answer_similarity", mine)
    (mine / "extract.j2").write_text("MY OWN EXTRACTION PROMPT\n{{ text | fence('TEXT') }}")
    evaluate(judge(scripted, f"scorers.answer_similarity.prompt_dir={mine}", "dataset.limit=1"), tmp_path)
    extracts = [r for r in scripted.requests if r.schema_name == "SemanticUnits"]
    assert extracts and all("MY OWN EXTRACTION PROMPT" in r.messages[-1]["content"] for r in extracts)


def test_tracking_mlflow_logs_to_the_configured_uri(scripted: ScriptedModel, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    config: dict[str, Any] = compose(
        [
            *judge(scripted)[:-2],
            "tracking=mlflow",
            f"tracking.uri=sqlite:///{db}",
            "tracking.experiment=mine",
            "dataset.limit=2",
        ]
    )
    pipeline.evaluate(config, tmp_path / "out")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("mine")
    assert experiment is not None
    [logged] = client.search_runs([experiment.experiment_id])
    assert logged.data.metrics["answer_similarity/scored"] == 2
    # No command line here (a config handed to the pipeline): the dataset, the scorers, the start time.
    assert re.fullmatch(r"sample · answer_similarity · \d\d:\d\d", logged.info.run_name)


def test_verdicts_go_back_onto_traces_in_both_tracking_presets_and_the_run_beside_them() -> None:
    """tracking.feedback (tracking/feedback.py): on with MLflow and without it (a trace dataset lives in
    MLflow); a trace dataset's run goes into its traces' experiment, so the run's Traces tab lists them."""
    from evalframe.config.compose import resolve

    assert compose(["tracking=mlflow"])["tracking"]["feedback"] is True
    assert compose(["tracking=none"])["tracking"]["feedback"] is True
    assert compose(["tracking=mlflow"])["tracking"]["experiment"] == "evalframe"
    assert compose(["+dataset.experiment=my-rag-app"])["tracking"]["experiment"] == "my-rag-app"
    with pytest.raises(ConfigError, match=r"^tracking.feedback='no': it should be a valid boolean"):
        resolve(configs.compose(["tracking.feedback='no'"]))


def test_watch_mode_is_off_by_default_and_its_keys_are_checked() -> None:
    from evalframe.data import watching
    from evalframe.errors import ConfigError

    config = compose([])
    assert config["watch"] == {"every": None, "settle": "300s", "ticks": None, "lookback": "24h"}
    assert watching.of(config) is None
    traces = ["dataset=mlflow_traces", "dataset.experiment=app"]
    on = watching.of(compose([*traces, "watch.every=1m", "watch.ticks=3"]))
    assert on == watching.Watch(every=60, settle=300, ticks=3, lookback=86400)
    for bad, says in (
        ("watch.every=soon", "watch.every='soon' is not a duration"),
        ("watch.settle=5", "watch.settle=5 is not a duration"),
        ("watch.lookback=1y", "watch.lookback='1y' is not a duration"),
        ("watch.ticks=0", "watch.ticks=0: a whole number"),
    ):
        with pytest.raises(ConfigError, match=says):
            watching.of(compose([*traces, "watch.every=1m", bad]))
    with pytest.raises(ConfigError, match="choose tracking=mlflow"):
        watching.of(compose([*traces, "watch.every=1m", "tracking=none"]))
    with pytest.raises(ConfigError, match="a session is judged whole"):
        watching.of(compose([*traces, "watch.every=1m", "dataset.sessions=true"]))


def test_a_tick_looks_back_for_late_traces_only_behind_its_checkpoint_and_within_the_lookback() -> None:
    from evalframe.data import watching

    now, hour = 1_750_000_000.0, 3_600_000
    watch = watching.Watch(every=60, settle=0, lookback=3600)
    checkpoint = int(now * 1000) - 60_000
    assert watch.late(checkpoint, now) == (int(now * 1000) - hour, checkpoint)
    assert watch.late(0, now) is None  # no checkpoint yet: the first tick takes every trace anyway
    assert watch.late(int(now * 1000) - 2 * hour, now) is None  # a watcher back after long: its window has it
    assert watching.Watch(every=60, settle=0, lookback=0).late(checkpoint, now) is None


@pytest.mark.parametrize(
    ("settle", "now", "window"),
    [("5m", 1000.0, (0, 700_000)), ("0s", 1000.0, (0, 1_000_000)), ("1h", 10.0, (0, 0))],
)
def test_a_ticks_window_ends_where_traces_have_settled(
    settle: str, now: float, window: tuple[int, int]
) -> None:
    from evalframe.data import watching

    watch = watching.Watch(every=60, settle=watching.duration(settle, "watch.settle"))
    assert watch.window(0, now) == window
    assert watch.window(900_000, now)[0] == 900_000  # from the checkpoint, never back before it
    assert watch.window(900_000, now)[1] >= 900_000


@pytest.mark.parametrize(
    ("dataset", "name"),
    [
        ("/home/you/data/qa.jsonl", "qa"),
        ("data/qa.csv", "qa"),
        ("sample", "sample"),
        ("sas_squad", "sas_squad"),
    ],
)
def test_a_run_on_your_file_is_named_after_its_stem(dataset: str, name: str) -> None:
    config = {"dataset": {"name": dataset}, "scorers": {"exact_match": {}, "token_f1": {}}, "tracking": {}}
    assert sweeps.run_name(config, []) == f"{name} · exact_match+token_f1"


def test_model_overrides_leave_an_embedding_models_list_alone() -> None:
    """`models` of semantic_similarity names embedding models, not judge presets: a `model.*` override
    on the same command line (for the judges) must not read them as presets."""
    from evalframe.config.compose import compose as compose_conf, resolve

    line = [
        "scorer=[answer_relevancy,semantic_similarity]",
        "scorers.semantic_similarity.models=[openai/text-embedding-3-small]",
        "model.api_base=http://127.0.0.1:9/v1",
    ]
    config = resolve(compose_conf(line), line)
    assert config["scorers"]["semantic_similarity"]["models"] == ["openai/text-embedding-3-small"]


def test_the_typed_settings_mirror_conf_s_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """config.settings' defaults (for a config built in code) are conf/'s: the YAML is where they live."""
    from evalframe.config.check import check
    from evalframe.config.settings import RunSettings

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    composed = check(compose([])).model_dump()
    defaults = RunSettings().model_dump()
    groups = ("dataset", "target", "scorers", "model", "penalties")  # the groups' own: no defaults in code
    assert {k: v for k, v in composed.items() if k not in groups} == {
        k: v for k, v in defaults.items() if k not in groups
    }


def test_an_unknown_top_level_key_is_refused_with_the_nearest(tmp_path: Path) -> None:
    from evalframe.config.check import check

    with pytest.raises(ConfigError, match=r"^datset is not a config key: did you mean dataset\?"):
        check({**compose([]), "datset": "chat_sample"})
