"""The RAG judges as data (faithfulness, hallucination, context_precision, context_recall): YAML files of
the generic Judge's claims and ranking forms. Formulas and the peers' (compat) numbers by hand, the calls
per item and the counts fixed by the reply schema against a judge that knows nothing but the schema,
the empty rule, verdicts kept everywhere, lower-is-better in the summary and the gate, and re-scoring
from stored verdicts without a call."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import ConfigError, DataError
from evalframe.paths import CONF_DIR
from evalframe.results.scores import ScoreResult
from evalframe.results.summary import Summary
from evalframe.results.table import items_table
from evalframe.run import pipeline
from evalframe.scorers.grounded import Rules, average_precision, claims_score, ranking_score
from tests.cli.test_rescore import KEY, mlflow_runs, stored_items
from tests.conftest import compose, fake_model, run_cli
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest, constrained_decoder, random_instance

JUDGES = ["faithfulness", "hallucination", "context_precision", "context_recall"]
FAITH = {"supported": 1.0, "contradicted": 0.0, "not_found": 0.0}
RANK = {"relevant": 1.0, "irrelevant": 0.0}
CHUNKS = [
    "Paris is the capital and largest city of France.",
    "Bananas are rich in potassium.",
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "France borders Spain, Italy, Germany and Belgium.",
]
ROWS = [  # (id, output, contexts): varied chunk counts, an empty output, and a row with no contexts
    ("one-chunk", "Paris is the capital of France.", CHUNKS[:1]),
    ("two-chunks", "The Eiffel Tower opened in 1889 and is in Paris.", CHUNKS[:2]),
    ("three-chunks", "Paris is the capital. Bananas are blue.", CHUNKS[:3]),
    ("four-chunks", "France borders Spain and Italy; its capital is Paris.", CHUNKS),
    ("empty-output", "", CHUNKS[:2]),
    ("no-contexts", "Paris is the capital of France.", []),
]


def rag_data(tmp_path: Path, rows: list[tuple[str, str, list[str]]] = ROWS) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rag.jsonl"
    records = [
        {
            "id": i,
            "input": "Tell me about France.",
            "ground_truth": "Paris is the capital of France.",
            "output": o,
        }
        | {"contexts": c}
        for i, o, c in rows
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def config(judge: ScriptedModel, tmp_path: Path, scorers: list[str], *extra: str) -> dict[str, Any]:
    return compose(
        [
            f"scorer=[{','.join(scorers)}]",
            *fake_model(judge),
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={rag_data(tmp_path)}",
            "max_unscored_rate=1",  # the empty cases are unscored by default; this file checks them
            *extra,
        ]
    )


# --- the formulas, by hand ------------------------------------------------------------------------


def test_average_precision_by_hand() -> None:
    # [1,0,1]: precision@1 = 1/1, precision@3 = 2/3 at the relevant ranks -> (1 + 2/3) / 2 relevant = 0.833
    assert average_precision([1, 0, 1]) == pytest.approx(0.8333, abs=1e-4)
    # [0,1]: precision@2 = 1/2 at the one relevant rank -> 0.5 / 1 = 0.5
    assert average_precision([0, 1]) == 0.5
    # [0,0]: no relevant chunk -> 0 (not a division by zero)
    assert average_precision([0, 0]) == 0.0
    # [1,1,0,1]: (1/1 + 2/2 + 3/4) / 3 = 2.75 / 3 = 0.917; relevant chunks first score higher
    assert average_precision([1, 1, 0, 1]) == pytest.approx(0.9167, abs=1e-4)
    assert average_precision([0, 1, 1, 1]) < average_precision([1, 1, 1, 0]) == 1.0


S, C, N = "supported", "contradicted", "not_found"


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        # evalframe: Σ weight / claims; ragas: supported / claims; deepeval: (supported + idk) / claims,
        # its "idk" (our not_found) counting as faithful; mastra: supported / claims rounded to 2 places.
        # [S,S,C,N]: evalframe (1+1+0+0)/4 = 0.5; ragas 2/4 = 0.5; deepeval (2+1)/4 = 0.75; mastra 0.5
        ([S, S, C, N], {None: 0.5, "ragas": 0.5, "deepeval": 0.75, "mastra": 0.5}),
        # [S,S,N]: 2/3 = 0.6667; ragas 0.6667; deepeval 3/3 = 1.0; mastra round(0.6667) = 0.67
        ([S, S, N], {None: 2 / 3, "ragas": 2 / 3, "deepeval": 1.0, "mastra": 0.67}),
        # [C]: 0 everywhere (a contradiction is "no" for every peer)
        ([C], {None: 0.0, "ragas": 0.0, "deepeval": 0.0, "mastra": 0.0}),
    ],
)
def test_faithfulness_formula_and_each_compat_by_hand(
    verdicts: list[str], expected: dict[Any, float]
) -> None:
    for compat, value in expected.items():
        rules = Rules.of("unscored", compat, 1.0, "higher", "k")
        assert claims_score(verdicts, FAITH, N, rules) == pytest.approx(value, abs=1e-9), compat
    # The unsure weight: not_found at 0.5 -> [S,S,C,N] = (1+1+0+0.5)/4 = 0.625 (evalframe's formula only)
    unsure = {**FAITH, N: 0.5}
    assert claims_score([S, S, C, N], unsure, N, Rules()) == 0.625


@pytest.mark.parametrize(
    ("relevance", "expected"),
    [
        # evalframe, deepeval: average precision; ragas: Σ precision@k·rel_k / (relevant + 1e-10);
        # mastra: the same average precision rounded to 2 places.
        ([1, 0, 1], {None: 5 / 6, "ragas": (1 + 2 / 3) / (2 + 1e-10), "deepeval": 5 / 6, "mastra": 0.83}),
        ([0, 1], {None: 0.5, "ragas": 0.5 / (1 + 1e-10), "deepeval": 0.5, "mastra": 0.5}),
        ([0, 0], {None: 0.0, "ragas": 0.0, "deepeval": 0.0, "mastra": 0.0}),  # no relevant chunk: 0 for all
        ([1, 1, 0, 1], {None: 2.75 / 3, "ragas": 2.75 / (3 + 1e-10), "deepeval": 2.75 / 3, "mastra": 0.92}),
    ],
)
def test_context_precision_formula_and_each_compat_by_hand(
    relevance: list[int], expected: dict[Any, float]
) -> None:
    verdicts = ["relevant" if r else "irrelevant" for r in relevance]
    for compat, value in expected.items():
        rules = Rules.of("unscored", compat, 1.0, "higher", "k")
        assert ranking_score(verdicts, RANK, rules) == pytest.approx(value, abs=1e-12), compat


def test_the_empty_cases_follow_the_rule_or_the_peer() -> None:
    no_claims = {"ragas": math.nan, "deepeval": 1.0, "mastra": 0.0}  # an answer with no claims
    no_chunks = {"ragas": 0.0, "deepeval": 0.0, "mastra": math.nan}  # context precision, no contexts
    for rule, value in (("unscored", math.nan), (0, 0.0), (1, 1.0), ("1", 1.0)):
        decided = Rules.of(rule, None, 1.0, "higher", "k").decided("the output makes no claims", no_claims)
        assert decided.score == value or (math.isnan(value) and not decided.scored)
    unscored = Rules().decided("the output makes no claims", no_claims)
    assert unscored.reason == "not applicable: the output makes no claims (empty: unscored)"
    assert unscored.not_applicable and unscored.error is None  # nothing to measure is no failure
    assert Rules.of(0, None, 1.0, "higher", "k").decided("no contexts retrieved").reason == (
        "no contexts retrieved: score 0 (empty: 0)."
    )
    for compat in ("ragas", "deepeval", "mastra"):
        rules = Rules.of("1", compat, 1.0, "higher", "k")  # compat decides its own cases, not `empty`
        for table in (no_claims, no_chunks):
            got = rules.decided("empty", table).score
            assert got == table[compat] or (math.isnan(got) and math.isnan(table[compat]))
        assert rules.decided("no contexts retrieved").score == 1.0  # a case no peer documents: the rule
    for bad in ("zero", 0.5, True, [0]):
        with pytest.raises(ConfigError, match=r"k\.empty=.* is not a rule; use unscored, 0 or 1"):
            Rules.of(bad, None, 1.0, "higher", "k")
    with pytest.raises(ConfigError, match=r"k\.compat='trulens' is not an option"):
        Rules.of("unscored", "trulens", 1.0, "higher", "k")


# --- against a judge that knows nothing but the schema ----------------------------------------------


@pytest.mark.slow
def test_calls_per_item_and_verdict_counts_with_a_constrained_decoder(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """Each judge alone, cache off, the judge answering anything its schema allows: the calls per item
    are counted at the model, and every verdict list has exactly one verdict per statement or chunk."""
    calls: dict[str, Counter[str]] = {}
    for judge in JUDGES:
        scripted.responder = constrained_decoder(seed=7)
        scripted.reset()
        cfg = config(scripted, tmp_path / judge, [judge], "cache.mode=off")
        result, _ = pipeline.evaluate(cfg, tmp_path / judge / "out")
        calls[judge] = Counter(str(r.schema_name) for r in scripted.requests)
        assert scripted.faults == 0
        for item in result.items:
            r = item.scores[judge]
            asked = [s.step for s in r.steps]
            if not r.scored:  # only an empty case may leave an item unscored: never an invalid reply
                assert r.not_applicable and ("makes no" in r.reason or "no contexts" in r.reason), r.reason
            if item.id == "no-contexts":
                assert asked == [] and r.reason == "not applicable: no contexts retrieved (empty: unscored)"
            elif judge == "context_precision":
                assert asked == ["relevance"] and len(r.details["verdicts"]) == len(item.record["contexts"])
            elif item.id == "empty-output" and judge in ("faithfulness", "hallucination"):
                assert (
                    asked == [] and r.reason == "not applicable: the output makes no claims (empty: unscored)"
                )
            else:
                assert asked in (["claims"], ["claims", "verdicts"])  # no statements: no verdict call
                if r.details:
                    assert len(r.details["verdicts"]) == len(r.details["statements"]) > 0
        # What the model saw: one request per step the items list, and no retry.
        assert sum(not s.cached for i in result.items for s in i.scores[judge].steps) == scripted.count()
    # Calls over the 6 items: context_precision 1 per item with contexts (5 items; two of them ask the
    # same: same question, ground truth and chunks, so 4 calls), the claim judges at most 2.
    assert calls["context_precision"] == Counter({"Verdicts": 4})
    for judge in ("faithfulness", "hallucination"):
        assert calls[judge]["Statements"] == 4  # 6 items - no contexts - empty output
        assert calls[judge]["Verdicts"] <= 4
    assert calls["context_recall"]["Statements"] == 1  # one ground truth for every row: asked once
    assert calls["context_recall"]["Verdicts"] <= 5
    # Faithfulness and hallucination send the same requests: together they cost what one does.
    scripted.responder = constrained_decoder(seed=7)
    scripted.reset()
    pipeline.evaluate(config(scripted, tmp_path / "both", ["faithfulness", "hallucination"]), tmp_path / "b")
    assert Counter(str(r.schema_name) for r in scripted.requests) == calls["faithfulness"]


def chosen(request: FakeRequest) -> Any:
    """A schema-valid reply with chosen values: four statements, and verdicts by position (supported,
    supported, contradicted, not_found; a chunk or statement is relevant / attributed at even positions)."""
    assert request.schema is not None
    reply = random_instance(request.schema, request.schema, random.Random(0))
    if "statements" in reply:
        return {
            "statements": ["Paris is the capital.", "It is in France.", "It is blue.", "It has 3 towers."]
        }
    picks = {
        "supported": [S, S, C, N],
        "contradicted": [S, S, C, N],
        "not_found": [S, S, C, N],
        "relevant": ["relevant", "irrelevant"],
        "irrelevant": ["relevant", "irrelevant"],
        "attributed": ["attributed", "not_attributed"],
        **{key: ["yes", "no"] for key in ("yes", "no", "unsure")},
        "not_attributed": ["attributed", "not_attributed"],
    }
    for key, entry in reply["verdicts"].items():
        cycle = picks[entry["verdict"]]
        entry["verdict"], entry["reason"] = cycle[int(key) % len(cycle)], f"reason {key}"
    return reply


def scores(result: Any, judge: str) -> dict[str, float | None]:
    return {i.id: (i.scores[judge].score if i.scores[judge].scored else None) for i in result.items}


@pytest.mark.slow
def test_compat_empty_and_weights_rescore_from_stored_verdicts_with_no_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = chosen
    judges = ["faithfulness", "context_precision", "hallucination", "context_recall"]
    first, _ = pipeline.evaluate(config(scripted, tmp_path, judges), tmp_path / "first")
    assert scripted.count() > 0
    # Every claim item: 4 claims, [S,S,C,N] -> 0.5; hallucination (0+1+1+1... weights 0/1/1) -> 2/4 = 0.5
    faith = scores(first, "faithfulness")
    assert faith == {
        "one-chunk": 0.5,
        "two-chunks": 0.5,
        "three-chunks": 0.5,
        "four-chunks": 0.5,
        "empty-output": None,
        "no-contexts": None,
    }
    assert scores(first, "hallucination")["four-chunks"] == 0.5
    assert scores(first, "context_recall")["four-chunks"] == 0.5  # attributed at 0 and 2 of 4
    # Relevance [1], [1,0], [1,0,1], [1,0,1,0]: 1, 1, (1 + 2/3)/2, (1 + 2/3)/2
    precision = scores(first, "context_precision")
    assert precision["one-chunk"] == precision["two-chunks"] == 1.0
    assert precision["three-chunks"] == precision["four-chunks"] == pytest.approx(5 / 6)
    assert precision["no-contexts"] is None
    item = next(i for i in first.items if i.id == "three-chunks")
    reason = item.scores["faithfulness"].reason
    assert "Contradicted: “It is blue.”" in reason and "Not found: “It has 3 towers.”" in reason
    assert "Irrelevant: #1 “Bananas are rich in potassium.”" in item.scores["context_precision"].reason
    assert "Not found: “It is blue.”" not in reason and "Supported" not in reason
    # Lower is better: the reason names the claims that count against it, as faithfulness's does.
    assert "Contradicted: “It is blue.”" in item.scores["hallucination"].reason
    assert "Supported" not in item.scores["hallucination"].reason

    scripted.reset()
    cases: list[tuple[list[str], float, dict[str, float | None]]] = [
        # deepeval: (2 + 1 idk)/4 = 0.75, no claims -> 1; context precision: no contexts -> 0
        (["compat=deepeval"], 0.75, {"empty-output": 1.0, "no-contexts": 0.0}),
        # ragas: 2/4, no claims -> NaN; context precision ragas: (1 + 2/3)/(2 + 1e-10); no contexts -> 0
        (["compat=ragas"], 0.5, {"empty-output": None, "no-contexts": 0.0}),
        # mastra: 0.5, no claims -> 0; context precision rounded: 0.83; no contexts -> unscored
        (["compat=mastra"], 0.5, {"empty-output": 0.0, "no-contexts": None}),
        # the unsure weight, and the empty rule
        (["output.verdicts.not_found=0.5", "empty=0"], 0.625, {"empty-output": 0.0, "no-contexts": 0.0}),
    ]
    for overrides, expected_faith, expected_precision in cases:
        rescored = [
            *(f"scorers.faithfulness.{o}" for o in overrides),
            *(f"scorers.context_precision.{o}" for o in overrides if not o.startswith("output")),
        ]
        result, _ = pipeline.evaluate(config(scripted, tmp_path, judges, *rescored), tmp_path / "again")
        faith = scores(result, "faithfulness")
        assert faith["four-chunks"] == expected_faith, overrides
        assert faith["empty-output"] == expected_precision["empty-output"], overrides
        assert scores(result, "context_precision")["no-contexts"] == expected_precision["no-contexts"]
        if "compat=mastra" in overrides:
            assert scores(result, "context_precision")["three-chunks"] == 0.83
    assert scripted.count() == 0  # every re-score came from the stored replies


def test_verdicts_are_kept_in_details_the_table_and_the_report(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = chosen
    cfg = config(scripted, tmp_path, ["faithfulness", "context_precision", "answer_relevancy"])
    result, _ = pipeline.evaluate(cfg, tmp_path / "out")
    stored = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    three = next(i for i in stored if i.get("id") == "three-chunks")["scores"]
    assert three["faithfulness"]["details"]["verdicts"][2] == {
        "reason": "reason 2",
        "verdict": "contradicted",
    }
    assert [v["verdict"] for v in three["context_precision"]["details"]["verdicts"]] == [
        "relevant",
        "irrelevant",
        "relevant",
    ]
    table = items_table(result)
    row = [i.id for i in result.items].index("three-chunks")
    assert table["faithfulness/verdicts"][row].splitlines()[2] == "2 contradicted “It is blue.”: reason 2"
    assert table["context_precision/verdicts"][row].splitlines()[1] == "1 irrelevant: reason 1"
    assert table["answer_relevancy/verdicts"][row]  # any scorer whose details hold verdicts
    assert table["faithfulness/verdicts"][[i.id for i in result.items].index("no-contexts")] is None
    html = (tmp_path / "out" / "report.html").read_text()
    assert (
        "<details><summary>4 verdicts</summary><div>0 supported “Paris is the capital.”: reason 0</div>"
        in html
    )


def test_hallucination_is_lower_is_better_in_the_summary_and_the_gate(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = chosen
    with pytest.raises(ConfigError, match=r"use \+gate\.max_score\.hallucination=\.\.\."):
        pipeline.evaluate(
            config(scripted, tmp_path, ["hallucination"], "+gate.min_score.hallucination=0.8"), tmp_path
        )
    assert scripted.count() == 0
    # The 4 claim items score 0.5 (2 of 4 claims unsupported); the 2 empty ones are unscored.
    passing = [
        "+gate.max_score.hallucination=0.5",
        "+gate.min_pass_rate.hallucination=1",
        "gate.pass_threshold=0.5",
    ]
    result, code = pipeline.evaluate(config(scripted, tmp_path, ["hallucination"], *passing), tmp_path / "a")
    assert code == 0 and result.lower_better == {"hallucination"}
    assert Summary.of(result).rows()[0][0] == "hallucination (lower is better)"
    failing = [
        "+gate.max_score.hallucination=0.4",
        "+gate.min_pass_rate.hallucination=1",
        "gate.pass_threshold=0.4",
    ]
    result, code = pipeline.evaluate(config(scripted, tmp_path, ["hallucination"], *failing), tmp_path / "b")
    assert code == 1 and result.verdict is not None
    assert result.verdict.failed == (
        "hallucination mean score 0.5 (required <= 0.4)",
        "hallucination pass rate (score <= 0.4) 0 (required >= 1)",
    )


def test_a_judge_needing_contexts_is_refused_before_any_call(scripted: ScriptedModel, tmp_path: Path) -> None:
    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"id": "q1", "input": "Q?", "ground_truth": "A", "output": "A"}) + "\n")
    for judge in JUDGES:
        cfg = compose(
            [
                f"scorer={judge}",
                *fake_model(scripted),
                "tracking=none",
                "dataset=jsonl",
                f"dataset.path={data}",
            ]
        )
        with pytest.raises(DataError, match=f"no contexts, which scorer {judge} needs"):
            pipeline.evaluate(cfg, tmp_path / "out")
    assert scripted.count() == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("scorers.hallucination.compat=ragas", r"compat reproduces the peers' faithfulness"),
        ("scorers.hallucination.output.of=input", r"output\.of='input': whose statements to judge"),
        ("scorers.hallucination.output.unsure=idk", r"output\.unsure='idk' is not one of the verdicts"),
        ("scorers.hallucination.better=down", r"better='down': use higher or lower"),
        (
            "scorers.hallucination.needs=[passages]",
            r"needs=\['passages'\]: a judge can need the list columns",
        ),
        (
            "~scorers.hallucination.prompt.verdicts",
            r"prompt: output type claims takes prompt: \{claims: FILE, verdicts: FILE\}",
        ),
    ],
)
def test_a_bad_judge_setting_stops_the_run_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, override: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        pipeline.evaluate(config(scripted, tmp_path, ["hallucination"], override), tmp_path / "out")
    assert scripted.count() == 0


@pytest.mark.slow
def test_a_sweep_and_rescore_of_the_rules_make_no_call_and_a_copied_judge_runs(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    """As a user runs them, over HTTP: a sweep of compat and empty, then `rescore` of the logged run
    with another compat, re-score the stored verdicts without a call; a copied, edited judge YAML runs."""
    judge_server.responder = chosen
    data = rag_data(tmp_path)
    args = [
        "scorer=[faithfulness,context_precision]",
        *fake_model(judge_server),
        "dataset=jsonl",
        f"dataset.path={data}",
        "max_unscored_rate=1",
    ]
    first = run_cli(args, cwd=tmp_path, env=KEY)
    assert first.returncode == 0, first.stderr
    assert judge_server.count() == 4 * 2 + 4  # claim items x (claims, verdicts) + distinct relevance asks
    judge_server.reset()
    sweep = ["scorers.faithfulness.compat=ragas,deepeval,mastra", "scorers.context_precision.empty=0,1"]
    swept = run_cli(["-m", *args, *sweep], cwd=tmp_path, env=KEY)
    assert swept.returncode == 0, swept.stderr
    assert judge_server.count() == 0
    [old, *jobs] = [r for r in mlflow_runs(tmp_path) if "faithfulness/mean" in r.data.metrics]
    # [S,S,C,N] on the 4 claim items: ragas and mastra 0.5, deepeval 0.75 (its idk counts as faithful)
    # mean over the scored items: ragas 4 x 0.5 (no claims: NaN); mastra (4 x 0.5 + 0) / 5; deepeval
    # (4 x 0.75 + 1) / 5 = 0.8; each for empty=0 and empty=1 of context precision (2 jobs each)
    means = sorted(round(r.data.metrics["faithfulness/mean"], 4) for r in jobs)
    assert means == [0.4, 0.4, 0.5, 0.5, 0.8, 0.8], means

    fresh = {"EVALFRAME_CACHE_DIR": str(tmp_path / "empty-cache")}  # every reply from the logged run
    again = run_cli(
        ["rescore", f"run_id={old.info.run_id}", "scorers.faithfulness.compat=deepeval"],
        cwd=tmp_path,
        env=fresh,
    )
    assert again.returncode == 0, again.stderr
    assert judge_server.count() == 0
    new = mlflow_runs(tmp_path)[-1]
    after = {i["id"]: i["scores"]["faithfulness"]["score"] for i in stored_items(tmp_path, new.info.run_id)}
    # deepeval: (2 + 1)/4 = 0.75 per claim item; the empty output, no claims -> 1; no contexts stays unscored
    assert after == {
        "one-chunk": 0.75,
        "two-chunks": 0.75,
        "three-chunks": 0.75,
        "four-chunks": 0.75,
        "empty-output": 1.0,
        "no-contexts": None,
    }

    # A copy of faithfulness.yaml under another name, edited: half credit for not_found, empty scores 0.
    copy = (CONF_DIR / "scorer" / "faithfulness.yaml").read_text()
    copy = copy.replace("# @package scorers.faithfulness", "# @package scorers.lenient")
    copy = copy.replace("not_found: 0.0 ", "not_found: 0.5 ").replace("empty: unscored ", "empty: 0 ")
    (tmp_path / "my_conf" / "scorer").mkdir(parents=True)
    (tmp_path / "my_conf" / "scorer" / "lenient.yaml").write_text(copy)
    mine = [a.replace("scorer=[faithfulness,context_precision]", "scorer=lenient") for a in args]
    edited = run_cli(["--config-dir", "my_conf", *mine], cwd=tmp_path, env=KEY)
    assert edited.returncode == 0, edited.stderr
    assert judge_server.count() == 0  # the same requests: its prompts are faithfulness's
    last = mlflow_runs(tmp_path)[-1]
    # (1 + 1 + 0 + 0.5)/4 = 0.625 on the 4 claim items; the empty output and no contexts score 0
    assert last.data.metrics["lenient/mean"] == pytest.approx((0.625 * 4 + 0 + 0) / 6)


def test_a_sweep_ranks_a_lower_is_better_score_by_minimizing_it() -> None:
    from evalframe.results.objective import of_config

    # The default objective (the first scorer's mean) is minimized for hallucination, maximized otherwise.
    assert of_config(compose(["scorer=[hallucination,faithfulness]"])).direction == "minimize"
    assert of_config(compose(["scorer=[faithfulness,hallucination]"])).direction == "maximize"
    # Maximizing it by name is a mistake, said before any call; minimizing it is what it means.
    chosen = ["scorer=[faithfulness,hallucination]", "objective.metric=hallucination/mean"]
    with pytest.raises(
        ConfigError, match=r"lower hallucination scores are better; add objective\.direction=minimize"
    ):
        of_config(compose(chosen))
    assert of_config(compose([*chosen, "objective.direction=minimize"])).direction == "minimize"


def test_verdict_lines_are_read_from_any_scorer_that_keeps_verdicts() -> None:
    from evalframe.results.scores import ScoreResult

    claims = {
        "statements": ["a", "b"],
        "verdicts": [{"verdict": "yes", "reason": "r0"}, {"verdict": "no", "reason": "r1"}],
    }
    assert ScoreResult(0.5, "", details=claims).verdicts() == ["0 yes “a”: r0", "1 no “b”: r1"]
    chunks = {
        "verdicts": [{"reason": "r0", "verdict": "irrelevant"}]
    }  # context precision: chunks by position
    assert ScoreResult(0.0, "", details=chunks).verdicts() == ["0 irrelevant: r0"]
    form = {"statements": [{"statement": "a", "reason": "r0", "verdict": "unsure"}], "reason": "overall"}
    assert ScoreResult(0.5, "", details=form).verdicts() == ["0 unsure “a”: r0"]  # the Judge's verdicts form
    assert ScoreResult(1.0, "", details={"reason": "r", "choice": "same"}).verdicts() == []


def test_with_repeats_an_output_without_claims_is_not_applicable_not_failed(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """A panel (here two repeats) whose judgments all find nothing to measure leaves the item not
    applicable, like one judgment does: no judge failed, so nothing counts against max_unscored_rate."""
    scripted.responder = lambda request: {"statements": []}  # the judge finds no claim in any output
    cfg = config(scripted, tmp_path, ["faithfulness"], "repeats=2", "max_unscored_rate=0")
    result, code = pipeline.evaluate(cfg, tmp_path / "out")
    scores = [item.scores["faithfulness"] for item in result.items]
    asked = [r for r in scores if r.steps]
    assert asked and all(r.not_applicable and "makes no claims" in r.reason for r in asked)
    summary = result.summaries["faithfulness"]
    assert summary.unscored == 0 and summary.not_applicable == len(scores) and code == 0


def test_not_applicable_is_said_by_the_rule_and_survives_the_journal() -> None:
    """Only a scorer's empty rule makes an item not applicable (a NaN without it is a failure, as a
    custom scorer's NaN always was), and a resumed run reads it back as such."""
    from evalframe.results.results_file import item_from_json, to_jsonable
    from evalframe.results.run_result import RunResult
    from evalframe.results.scores import ItemResult

    empty, nan = ScoreResult.empty("the output makes no claims"), ScoreResult(math.nan, "no idea")
    item = ItemResult("a", "Q?", None, "", scores={"faithfulness": empty, "mine": nan})
    back = item_from_json(json.loads(json.dumps(to_jsonable(item))))
    assert back.scores["faithfulness"].not_applicable and not back.scores["mine"].not_applicable
    summaries = RunResult([back], ["faithfulness", "mine"]).summaries
    assert (summaries["faithfulness"].unscored, summaries["faithfulness"].not_applicable) == (0, 1)
    assert (summaries["mine"].unscored, summaries["mine"].not_applicable) == (1, 0)
