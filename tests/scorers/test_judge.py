"""Judges as data: the generic Judge scorer, the bundled factuality judge and a user's own judge."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalframe.errors import ConfigError, PromptError
from evalframe.run import pipeline
from evalframe.scorers.judge import Choice, Number, Verdicts, parse_output, score
from tests.conftest import Judge, compose, fake_model, run_cli
from tests.fake_judge import fenced, words
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest

FACTUALITY = {"subset": 0.4, "superset": 0.6, "same": 1.0, "disagree": 0.0, "immaterial": 1.0}
ROWS = [  # id -> (expert answer, submitted answer); the id is the relation the responder finds
    ("same", "Paris is the capital of France.", "Paris is the capital of France."),
    ("disagree", "World War II ended in 1945.", "World War II ended in 1918."),
    ("subset", "Asia is the largest continent. Australia is the smallest.", "Asia is the largest continent."),
    ("superset", "Leonardo painted the Mona Lisa.", "Leonardo painted the Mona Lisa around 1503."),
]


# --- the pure score mapping -----------------------------------------------------------------------


def test_choice_scores_from_the_table() -> None:
    form = parse_output({"type": "choice", "choices": FACTUALITY}, "k")
    assert form == Choice(FACTUALITY)
    assert [score(form, {"choice": c, "reason": ""}) for c in FACTUALITY] == [0.4, 0.6, 1.0, 0.0, 1.0]
    assert score(form, {"choice": "superset", "reason": ""}, scale=10) == 6.0


def test_number_rescales_from_min_max_to_0_1_bounds_included() -> None:
    form = parse_output({"type": "number", "min": 1, "max": 5}, "k")
    assert form == Number(1.0, 5.0)
    assert [score(form, {"rating": n, "reason": ""}) for n in (1, 2, 3, 4.5, 5)] == [
        0.0,
        0.25,
        0.5,
        0.88,
        1.0,
    ]


def test_number_range_is_in_the_schema_and_enforced() -> None:
    model = Number(1.0, 5.0).reply_model()
    rating = model.model_json_schema()["properties"]["rating"]
    assert (rating["minimum"], rating["maximum"]) == (1, 5)
    for out_of_range in (0, 6):
        with pytest.raises(ValidationError):
            model.model_validate({"reason": "r", "rating": out_of_range})


def test_verdicts_score_the_mean_weight_and_no_statements_score_0() -> None:
    # Bare yes/no keys arrive from YAML as booleans: the judge reads them back as the words.
    form = parse_output({"type": "verdicts", "verdicts": {True: 1.0, False: 0.0, "unsure": 0.5}}, "k")
    assert form == Verdicts({"yes": 1.0, "no": 0.0, "unsure": 0.5})
    said = [
        {"statement": s, "verdict": v, "reason": ""} for s, v in [("a", "yes"), ("b", "no"), ("c", "unsure")]
    ]
    assert score(form, {"statements": said, "reason": ""}) == 0.5
    assert form.score({"statements": said, "reason": ""})[1] == "1 yes, 1 no, 1 unsure"
    assert score(form, {"statements": said[:1] * 3, "reason": ""}) == 1.0
    assert score(form, {"statements": [], "reason": ""}) == 0.0
    schema = form.reply_model().model_json_schema()
    assert schema["$defs"]["Statement"]["properties"]["verdict"]["enum"] == ["yes", "no", "unsure"]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"type": "scale"}, r"k\.type='scale' is not an output form"),
        ({"type": "choice", "choices": {}}, r"k\.choices must be a non-empty mapping"),
        (
            {"type": "choice", "choices": {"a": 2}},
            r"k\.choices\.a=2: a score must be a number between 0 and 1",
        ),
        ({"type": "number", "min": 5, "max": 5}, r"k\.min=5 must be less than k\.max=5"),
        ({"type": "number", "min": 1}, r"k\.max=None: set it to a number"),
        ({"type": "choice", "choice": {"a": 1}}, r"k: unknown key\(s\) \['choice'\] for type choice"),
    ],
)
def test_output_form_mistakes_name_the_key(output: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_output(output, "k")


# --- factuality, end to end through the fake server -----------------------------------------------


def factuality_responder(request: FakeRequest) -> dict[str, Any]:
    """Relates the fenced answers by their words, as a literal-minded fact checker would."""
    blocks = fenced(request)
    expert, submitted = words(blocks["EXPERT"]), words(blocks["SUBMISSION"])
    if expert == submitted:
        choice = "same"
    elif submitted < expert:
        choice = "subset"
    elif expert < submitted:
        choice = "superset"
    else:
        choice = "disagree"
    return {"reason": f"the answers are {choice}", "choice": choice}


def factuality(server: Judge, tmp_path: Path, *extra: str) -> dict[str, Any]:
    data = tmp_path / "qa.jsonl"
    rows = [{"id": i, "input": "Question?", "ground_truth": gt, "output": out} for i, gt, out in ROWS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return compose(
        [
            "scorer=factuality",
            *fake_model(server),
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={data}",
            *extra,
        ]
    )


def test_factuality_scores_the_judges_choice(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = factuality_responder
    result, code = pipeline.evaluate(factuality(scripted, tmp_path), tmp_path / "out")
    assert code == 0
    scores = {i.id: i.scores["factuality"] for i in result.items}
    assert {i: s.score for i, s in scores.items()} == {
        "same": 1.0,
        "disagree": 0.0,
        "subset": 0.4,
        "superset": 0.6,
    }
    assert scores["subset"].reason == "subset: the answers are subset"
    assert scores["same"].details == {"reason": "the answers are same", "choice": "same"}
    request = scripted.requests[0]
    assert request.schema_name == "ChoiceJudgement"
    assert request.schema is not None and request.schema["properties"]["choice"]["enum"] == list(FACTUALITY)
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert set(fenced(request)) == {"QUESTION", "EXPERT", "SUBMISSION"}


def test_invalid_choice_is_retried_with_the_error_then_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = lambda req: {"reason": "hard to say", "choice": "maybe"}
    result, code = pipeline.evaluate(
        factuality(scripted, tmp_path, "model.reply_retries=1"), tmp_path / "out"
    )
    assert code == 4  # every item unscored
    assert len(scripted.requests) == 2 * len(ROWS)  # first try + one retry per item
    retries = [r for r in scripted.requests if len(r.messages) > 2]
    assert len(retries) == len(ROWS)
    for retry in retries:
        correction = retry.messages[-1]["content"]
        assert correction.startswith("That reply is invalid: choice:") and "'same'" in correction
    for item in result.items:
        r = item.scores["factuality"]
        assert (
            math.isnan(r.score) and r.error and r.error.startswith("judge: invalid reply after 2 attempt(s)")
        )
        assert r.steps[-1].raw and "maybe" in r.steps[-1].raw


def test_a_bad_output_form_stops_the_run_before_any_call(scripted: ScriptedModel, tmp_path: Path) -> None:
    config = factuality(scripted, tmp_path)
    config["scorers"]["factuality"]["output"] = {"type": "scale"}
    with pytest.raises(ConfigError, match=r"scorers\.factuality\.output\.type='scale'"):
        pipeline.evaluate(config, tmp_path / "out")
    config["scorers"]["factuality"]["output"] = {"type": "number", "min": 5, "max": 1}
    with pytest.raises(ConfigError, match=r"scorers\.factuality\.output\.min=5 must be less than"):
        pipeline.evaluate(config, tmp_path / "out")
    assert scripted.count() == 0


def test_an_undefined_template_variable_stops_the_run_before_any_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    prompt = tmp_path / "typo.j2"
    prompt.write_text("Is {{ answer }} right?")
    config = factuality(scripted, tmp_path, f"scorers.factuality.prompt={prompt}")
    with pytest.raises(
        PromptError,
        match=r"'answer' is undefined; the variables available are: "
        r"contexts, ground_truth, input, output, row",
    ):
        pipeline.evaluate(config, tmp_path / "out")
    assert scripted.count() == 0


# --- a user's own judge, from their own config directory -------------------------------------------

POLITE_YAML = """\
# @package scorers.polite
_target_: evalframe.scorers.judge.Judge
prompt: ???             # set on the command line: scorers.polite.prompt=$PWD/my_prompts/polite.j2
require_ground_truth: false
output: {type: number, min: 1, max: 5}
model: ${model}
repeats: ${repeats}
"""

POLITE_PROMPT = """\
How polite is this reply to a customer's question? 1 = rude, 3 = neutral, 5 = very polite.

Question:
{{ input | fence("QUESTION") }}

Reply:
{{ output | fence("REPLY") }}

Reply with JSON: {"reason": "...", "rating": 1-5}
"""


def polite_responder(request: FakeRequest) -> dict[str, Any]:
    """Longer replies read as more polite, so the three sample outputs get three different ratings."""
    reply = fenced(request)["REPLY"]
    return {"reason": f"{len(reply.split())} words", "rating": min(5, 1 + len(reply.split()) // 2)}


@pytest.mark.slow
def test_a_users_own_judge_from_their_config_dir(judge_server: FakeLLMServer, tmp_path: Path) -> None:
    conf, prompt = tmp_path / "my_conf", tmp_path / "my_prompts" / "polite.j2"
    (conf / "scorer").mkdir(parents=True)
    (conf / "scorer" / "polite.yaml").write_text(POLITE_YAML)
    prompt.parent.mkdir()
    prompt.write_text(POLITE_PROMPT)
    judge_server.responder = polite_responder
    done = run_cli(
        [
            "--config-dir",
            str(conf),
            "scorer=polite",
            *fake_model(judge_server),
            "tracking=none",
            "dataset.limit=3",
            f"scorers.polite.prompt={prompt}",
        ],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert done.returncode == 0, done.stderr
    [results] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = [json.loads(line) for line in results.read_text().splitlines()]
    polite = {i["id"]: i["scores"]["polite"] for i in items}
    # "The capital of France is Paris." 6 words -> 4; "H2O" -> 1; the 11-word boiling answer -> 5
    assert {i: p["score"] for i, p in polite.items()} == {
        "exact-capital": 0.75,
        "exact-water": 0.0,
        "paraphrase-boiling": 1.0,
    }
    assert polite["exact-water"]["reason"] == "1: 1 words"
    schemas = [r.schema for r in judge_server.requests]
    assert all(s and s["properties"]["rating"]["maximum"] == 5 for s in schemas)
