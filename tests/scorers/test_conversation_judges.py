"""The conversation judges as data (knowledge_retention, role_adherence, conversation_completeness,
turn_relevancy, goal_accuracy, conversation_guidelines): YAML files of the generic Judge's turns,
intentions, rules and choice forms over a row's `messages`. Against a judge that knows nothing but the
schema every item is scored at the first attempt; a reply that misses a turn is asked again, then
unscored with both counts; window=0 stops before any request; unit=window sends one request per
assistant turn holding at most `window` messages before it; a scripted judge's verdicts give the
formulas by hand, re-scored from stored replies with no call."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from evalframe.errors import ConfigError, DataError
from evalframe.results.scores import ScoreResult
from evalframe.results.table import items_table
from evalframe.run import pipeline
from evalframe.scorers.conversational import NOTHING, Scope, miscount, verdicts_score
from evalframe.scorers.grounded import Rules
from tests.conftest import compose, fake_model, run_cli
from tests.conversation_oracle import JUDGES
from tests.fake_judge import fenced
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest, constrained_decoder, echo_schema_responder

ROLE = "A friendly receptionist of a dental clinic in Lisbon who only books appointments."


def msg(role: str, content: str, **more: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **more}


# 8 messages, 4 assistant turns; turn 6 asks again for the city the user gave in turn 1.
FORGOTTEN = [
    msg("user", "Hi, I live in Lisbon and I need a dentist."),
    msg("assistant", "Hello! I can look for dentists in Lisbon."),
    msg("user", "Yes, please, one open on Saturday."),
    msg("assistant", "Clinica Sorriso in Lisbon is open on Saturday."),
    msg("user", "How much is a check-up there?"),
    msg("assistant", "A check-up costs 40 euros. Which city do you live in?"),
    msg("user", "Book it for 10 am."),
    msg("assistant", "Done: Saturday at 10 am at Clinica Sorriso."),
]
# 6 messages, 3 assistant turns, a "yes please" follow-up.
SIX = [
    msg("user", "Can you book me a cleaning?"),
    msg("assistant", "Sure. Shall I take the first free slot, Monday at 9?"),
    msg("user", "Yes please."),
    msg("assistant", "Booked: Monday at 9."),
    msg("user", "Thanks!"),
    msg("assistant", "You are welcome, see you Monday."),
]
# A system message, DeepEval's turn shape with a tool call, and RAGAS' message shape mixed in.
TOOLS = [
    msg("system", "You book dental appointments."),
    {"type": "human", "content": "Cancel my Friday appointment."},
    {
        "role": "assistant",
        "content": "",
        "tools_called": [{"name": "cancel", "input_parameters": {"day": "Fri"}}],
    },
    msg("tool", "cancelled"),
    {"type": "ai", "content": "Your Friday appointment is cancelled."},
]
CHATS = {"forgotten": FORGOTTEN, "six": SIX, "tools": TOOLS}


def chat_data(tmp_path: Path, chats: dict[str, list[dict[str, Any]]] = CHATS) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "chats.jsonl"
    records = [
        {"id": i, "messages": m, "chatbot_role": ROLE, "expected_outcome": "The user has an appointment."}
        for i, m in chats.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


Judge = ScriptedModel | FakeLLMServer


def config(
    judge: Judge, tmp_path: Path, scorers: list[str], *extra: str, option: str = "gpt", **chats: Any
) -> dict[str, Any]:
    return compose(
        [
            f"scorer=[{','.join(scorers)}]",
            *fake_model(judge, option),
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={chat_data(tmp_path, chats or CHATS)}",
            *extra,
        ]
    )


LINE = re.compile(r"^\[(\d+)\] (\w+): (.*)$")


def transcript_of(request: FakeRequest) -> list[tuple[int, str, str]]:
    """The numbered lines of the conversation the judge was shown (its fenced CONVERSATION)."""
    text = fenced(request)["CONVERSATION"]
    return [(int(m[1]), m[2], m[3]) for line in text.splitlines() if (m := LINE.match(line))]


# What a literal-minded judge knows of forgetting: asking about one of these after the user said it.
FACTS = {"city": "i live in", "name": "my name is"}


def forgets(number: int, lines: list[tuple[int, str, str]]) -> bool:
    said = " ".join(c.lower() for n, r, c in lines if r == "user" and n < number)
    content = next(c for n, _, c in lines if n == number).lower()
    return "?" in content and any(word in content and fact in said for word, fact in FACTS.items())


def memory_judge(request: FakeRequest) -> Any:
    """knowledge_retention, read off the prompt: a turn forgets when it asks for a fact the user gave."""
    properties = set((request.schema or {}).get("properties", {}))
    lines = transcript_of(request)

    def verdict(n: int) -> dict[str, str]:
        lost = forgets(n, lines)
        return {
            "reason": f"turn {n} {'asks again' if lost else 'keeps'}",
            "verdict": "forgot" if lost else "retained",
        }

    if properties == {"reason", "verdict"}:  # one turn (unit=turn / window): the last line
        return verdict(lines[-1][0])
    return {key: verdict(int(key.removeprefix("turn_"))) for key in properties}


# --- against a judge that knows nothing but the schema ------------------------------------------


def assistant_numbers(chat: list[dict[str, Any]]) -> list[int]:
    return [n for n, m in enumerate(chat, 1) if m.get("role", m.get("type")) in ("assistant", "ai")]


def constrained_run(judge: Judge, tmp_path: Path, option: str = "gpt") -> dict[str, dict[str, int]]:
    """Every conversation judge at once, cache off, the judge answering anything its schema allows
    (the constrained decoder): nothing is unscored, no step is asked twice, and each judged turn is
    there. Returns the requests per conversation of each judge."""
    judge.responder = constrained_decoder(seed=7)
    judge.reset()
    cfg = config(judge, tmp_path, list(JUDGES), "cache.mode=off", "max_unscored_rate=0", option=option)
    result, code = pipeline.evaluate(cfg, tmp_path / "out")
    assert code == 0 and all(result.summaries[j].unscored == 0 for j in JUDGES)
    assert not any(any(m["role"] == "assistant" for m in r.messages) for r in judge.requests)  # no retry
    assert judge.faults == 0
    per_item: dict[str, dict[str, int]] = {j: {} for j in JUDGES}
    for item in result.items:
        for name, r in item.scores.items():
            assert all(s.attempts == 1 for s in r.steps), (name, item.id)
            per_item[name][item.id] = len(r.steps)
            if not r.scored:  # only the empty rule may leave one unscored: no intention extracted
                assert name == "conversation_completeness" and r.not_applicable, r.reason
            elif "turns" in r.details:
                assert [t["turn"] for t in r.details["turns"]] == assistant_numbers(CHATS[item.id])
    assert judge.count() == sum(n for counts in per_item.values() for n in counts.values())
    return per_item


def test_every_judge_scores_every_conversation_at_the_first_attempt(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    per_item = constrained_run(scripted, tmp_path)
    # Requests per conversation: one for the per-turn forms with unit=conversation, one per assistant
    # turn for turn_relevancy (unit=window), two for completeness (intentions, then their verdicts).
    for judge in ("knowledge_retention", "role_adherence", "goal_accuracy", "conversation_guidelines"):
        assert per_item[judge] == {"forgotten": 1, "six": 1, "tools": 1}, judge
    assert per_item["turn_relevancy"] == {"forgotten": 4, "six": 3, "tools": 2}
    assert set(per_item["conversation_completeness"].values()) <= {1, 2}  # 1: no intention extracted


@pytest.mark.parametrize("option", ["claude", "gemini"])
def test_the_same_on_the_other_wires(judge_server: FakeLLMServer, option: str, tmp_path: Path) -> None:
    """turn_N keys and per-position verdicts survive each provider's structured output (over HTTP)."""
    constrained_run(judge_server, tmp_path, option)


def test_a_reply_missing_a_turn_is_asked_again_then_unscored_naming_both_counts(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def three_of_four(request: FakeRequest) -> Any:
        reply = json.loads(str(echo_schema_responder(request)))
        reply.pop("turn_8", None)  # 3 verdicts for the 4 assistant turns 2, 4, 6, 8
        return reply

    scripted.responder = three_of_four
    cfg = config(scripted, tmp_path, ["knowledge_retention"], "max_unscored_rate=1", forgotten=FORGOTTEN)
    result, _ = pipeline.evaluate(cfg, tmp_path / "out")
    [item] = result.items
    r = item.scores["knowledge_retention"]
    assert not r.scored and not r.not_applicable
    assert r.error is not None and r.error.startswith(
        "judge: 3 verdicts for 4 assistant turns; invalid reply"
    )
    assert "turn_8" in r.error
    # asked again with what is wrong (reply_retries=2): three requests, the later two corrections
    assert scripted.count() == 3
    corrections = [q for q in scripted.requests if any(m["role"] == "assistant" for m in q.messages)]
    assert len(corrections) == 2 and "turn_8" in corrections[0].messages[-1]["content"]
    assert result.summaries["knowledge_retention"].unscored == 1


def test_window_zero_stops_before_any_request_with_exit_2(scripted: ScriptedModel, tmp_path: Path) -> None:
    args = [
        "scorer=turn_relevancy",
        *fake_model(scripted),
        "tracking=none",
        "dataset=jsonl",
        f"dataset.path={chat_data(tmp_path)}",
        "scorers.turn_relevancy.window=0",
    ]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 2 and scripted.count() == 0
    [line] = done.stderr.strip().splitlines()
    assert "scorers.turn_relevancy.window=0: set it to a whole number of at least 1" in line
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (2, [(1, 2), (2, 3, 4), (4, 5, 6)]),
        # a window wider than what came before shows all of it (turn 4: 3 messages, not 1)
        (4, [(1, 2), (1, 2, 3, 4), (2, 3, 4, 5, 6)]),
    ],
)
def test_turn_relevancy_window_sends_one_request_per_assistant_turn(
    scripted: ScriptedModel, tmp_path: Path, window: int, expected: list[tuple[int, ...]]
) -> None:
    scripted.responder = constrained_decoder(seed=3)
    cfg = config(scripted, tmp_path, ["turn_relevancy"], f"scorers.turn_relevancy.window={window}", six=SIX)
    result, code = pipeline.evaluate(cfg, tmp_path / "out")
    assert code == 0 and scripted.count() == 3  # assistant turns 2, 4 and 6
    shown = sorted(tuple(n for n, _, _ in transcript_of(r)) for r in scripted.requests)
    assert shown == expected  # each turn and at most `window` messages before it
    for request in scripted.requests:
        last = transcript_of(request)[-1][0]
        assert f"Judge only assistant turn [{last}]" in request.messages[-1]["content"]
    [item] = result.items
    assert [t["turn"] for t in item.scores["turn_relevancy"].details["turns"]] == [2, 4, 6]


# --- the formulas with a scripted judge, and re-scoring without a call --------------------------


def test_one_forgotten_fact_of_four_turns_is_075_with_mean_and_0_with_all(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = memory_judge
    result, _ = pipeline.evaluate(
        config(scripted, tmp_path, ["knowledge_retention"], forgotten=FORGOTTEN), tmp_path / "a"
    )
    r = result.items[0].scores["knowledge_retention"]
    assert r.score == 0.75 and scripted.count() == 1  # 3 of 4 turns retain: (1 + 1 + 0 + 1) / 4
    assert [(t["turn"], t["verdict"], t["score"]) for t in r.details["turns"]] == [
        (2, "retained", 1.0),
        (4, "retained", 1.0),
        (6, "forgot", 0.0),
        (8, "retained", 1.0),
    ]
    assert r.details["truncated_turns"] == []
    assert r.reason.startswith("Score 0.75 (mean): 4 assistant turns, 3 retained, 1 forgot. Forgot: turn 6.")
    assert r.verdicts()[2] == "turn 6 forgot (0.00): turn 6 asks again"
    scripted.reset()
    # all: 0 (one turn forgets), re-scored from the stored reply with no call
    cfg = config(
        scripted,
        tmp_path,
        ["knowledge_retention"],
        "scorers.knowledge_retention.output.aggregate=all",
        forgotten=FORGOTTEN,
    )
    again, _ = pipeline.evaluate(cfg, tmp_path / "b")
    assert again.items[0].scores["knowledge_retention"].score == 0.0 and scripted.count() == 0
    # the peers' formulas and a half weight, on the same verdicts (the pure function the score is)
    names, weights = ["retained", "retained", "forgot", "retained"], {"retained": 1.0, "forgot": 0.0}
    for compat, aggregate, table, expected in (
        ("deepeval", "mean", weights, 0.75),  # retained / assistant turns
        ("mlflow", "mean", weights, 0.0),  # yes only if every turn retains
        (None, "mean", {**weights, "forgot": 0.5}, 0.875),  # (1 + 1 + 0.5 + 1) / 4
        (None, "all", {**weights, "forgot": 0.5}, 0.0),  # a half weight does not pass
        ("deepeval", "all", {**weights, "forgot": 0.5}, 0.75),  # compat decides: passed / turns
    ):
        rules = Rules.of("unscored", compat, 1.0, "higher", "k", ("deepeval", "mlflow"))
        assert verdicts_score(names, table, aggregate, rules) == expected, (compat, aggregate)
    # one request per turn (unit=turn) gives the same verdicts: 4 requests, 0.75
    extra = "scorers.knowledge_retention.unit=turn"
    per_turn, _ = pipeline.evaluate(
        config(scripted, tmp_path, ["knowledge_retention"], extra, forgotten=FORGOTTEN), tmp_path / "c"
    )
    assert per_turn.items[0].scores["knowledge_retention"].score == 0.75 and scripted.count() == 4
    assert [s.step for s in per_turn.items[0].scores["knowledge_retention"].steps] == [
        "turn_2",
        "turn_4",
        "turn_6",
        "turn_8",
    ]


def test_truncation_cuts_the_oldest_turns_and_records_them(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = memory_judge
    cfg = config(
        scripted,
        tmp_path,
        ["knowledge_retention"],
        "scorers.knowledge_retention.max_turns=4",
        forgotten=FORGOTTEN,
    )
    result, _ = pipeline.evaluate(cfg, tmp_path / "out")
    r = result.items[0].scores["knowledge_retention"]
    assert [n for n, _, _ in transcript_of(scripted.requests[0])] == [5, 6, 7, 8]
    assert r.details["truncated_turns"] == [1, 2, 3, 4]
    # the city was cut with turn 1: the judge sees no lapse in the turns it was shown
    assert [t["turn"] for t in r.details["turns"]] == [6, 8] and r.score == 1.0
    assert "Turns 1, 2, 3, 4 were cut from the prompt" in r.reason


def test_checklists_keep_their_verdicts_per_intention_and_rule(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def lists(request: FakeRequest) -> Any:
        properties = (request.schema or {}).get("properties", {})
        if "intentions" in properties:
            return {"intentions": ["The user wants a dentist", "The user wants a booking", " "]}
        reply = json.loads(str(echo_schema_responder(request)))
        names = (
            ("satisfied", "unsatisfied") if "satisfied" in json.dumps(request.schema) else ("pass", "fail")
        )
        for key, entry in reply["verdicts"].items():
            entry.update(verdict=names[int(key) % 2], reason=f"reason {key}")
        return reply

    scripted.responder = lists
    rules = "scorers.conversation_guidelines.rules=[Be polite,Never quote prices,Confirm the time]"
    cfg = config(
        scripted,
        tmp_path,
        ["conversation_completeness", "conversation_guidelines"],
        rules,
        forgotten=FORGOTTEN,
    )
    result, _ = pipeline.evaluate(cfg, tmp_path / "out")
    scores = result.items[0].scores
    done = scores["conversation_completeness"]
    assert done.score == 0.5 and done.details["statements"] == [
        "The user wants a dentist",
        "The user wants a booking",
    ]
    assert done.verdicts() == [
        "0 satisfied “The user wants a dentist”: reason 0",
        "1 unsatisfied “The user wants a booking”: reason 1",
    ]
    rules_kept = scores["conversation_guidelines"]
    assert rules_kept.score == 0.0  # aggregate all (its default): rule 1 fails
    assert [v["verdict"] for v in rules_kept.details["verdicts"]] == ["pass", "fail", "pass"]
    assert "Fail: “Never quote prices”." in rules_kept.reason
    table = items_table(result)
    assert (
        table["conversation_guidelines/verdicts"][0].splitlines()[1]
        == "1 fail “Never quote prices”: reason 1"
    )
    scripted.reset()
    cfg = config(
        scripted,
        tmp_path,
        ["conversation_guidelines"],
        rules,
        "scorers.conversation_guidelines.output.aggregate=mean",
        forgotten=FORGOTTEN,
    )
    again, _ = pipeline.evaluate(cfg, tmp_path / "again")
    assert (
        again.items[0].scores["conversation_guidelines"].score == pytest.approx(2 / 3)
        and scripted.count() == 0
    )


def test_per_turn_verdicts_are_in_results_jsonl_the_table_and_the_report(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = memory_judge
    result, _ = pipeline.evaluate(
        config(scripted, tmp_path, ["knowledge_retention"], forgotten=FORGOTTEN), tmp_path / "out"
    )
    stored = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    details = stored["scores"]["knowledge_retention"]["details"]
    assert details["turns"][2] == {
        "turn": 6,
        "verdict": "forgot",
        "score": 0.0,
        "reason": "turn 6 asks again",
    }
    assert (
        items_table(result)["knowledge_retention/verdicts"][0].splitlines()[2]
        == "turn 6 forgot (0.00): turn 6 asks again"
    )
    html = (tmp_path / "out" / "report.html").read_text()
    assert (
        "<summary>4 verdicts</summary>" in html
        and "<div>turn 6 forgot (0.00): turn 6 asks again</div>" in html
    )


def test_empty_cases_follow_the_rule_or_the_peer(scripted: ScriptedModel, tmp_path: Path) -> None:
    no_rules = "scorers.conversation_guidelines.rules=[]"
    for extra, expected in (("empty=unscored", math.nan), ("compat=deepeval", 1.0)):
        cfg = config(
            scripted,
            tmp_path,
            ["conversation_guidelines"],
            no_rules,
            f"scorers.conversation_guidelines.{extra}",
            "max_unscored_rate=1",
        )
        result, _ = pipeline.evaluate(cfg, tmp_path / "out")
        got = [i.scores["conversation_guidelines"] for i in result.items]
        assert all(g.score == expected or (math.isnan(expected) and g.not_applicable) for g in got), extra
    assert got[0].reason == "no rules to check (set rules: [...]): score 1 (as deepeval scores it)."
    assert scripted.count() == 0  # no rules: nothing asked
    # the rule, then each peer: DeepEval 1 without verdicts, MLflow no yes/no (unscored)
    for empty, compat, expected in (
        (1, None, 1.0),
        (0, None, 0.0),
        (0, "deepeval", 1.0),
        (1, "mlflow", math.nan),
    ):
        rules = Rules.of(empty, compat, 1.0, "higher", "k", ("deepeval", "mlflow"))
        score = rules.decided("no assistant turn", NOTHING).score
        assert score == expected or (math.isnan(score) and math.isnan(expected))


# --- before any call ------------------------------------------------------------------------------


def test_a_row_lacking_what_a_judge_needs_is_named_before_any_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"id": "c1", "messages": SIX}) + "\n")
    for judge, missing in (("role_adherence", "chatbot_role"), ("goal_accuracy", "expected_outcome")):
        cfg = compose(
            [
                f"scorer={judge}",
                *fake_model(scripted),
                "tracking=none",
                "dataset=jsonl",
                f"dataset.path={data}",
            ]
        )
        with pytest.raises(DataError, match=f"id c1\\): no {missing}, which scorer {judge} needs"):
            pipeline.evaluate(cfg, tmp_path / "out")
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "q1", "input": "Q?", "output": "A"}) + "\n")
    cfg = compose(
        [
            "scorer=knowledge_retention",
            *fake_model(scripted),
            "tracking=none",
            "dataset=jsonl",
            f"dataset.path={qa}",
        ]
    )
    with pytest.raises(DataError, match="no messages, which scorer knowledge_retention needs"):
        pipeline.evaluate(cfg, tmp_path / "out")
    assert scripted.count() == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["scorers.knowledge_retention.unit=window"],
            r"unit=window needs scorers\.knowledge_retention\.window=K",
        ),
        (
            ["scorers.knowledge_retention.unit=session"],
            r"unit='session': choose one of conversation, turn, window",
        ),
        (
            ["scorers.knowledge_retention.max_tokens=-5"],
            r"max_tokens=-5: set it to a whole number of at least 1",
        ),
        (["scorers.knowledge_retention.output.aggregate=most"], r"output\.aggregate='most': use mean"),
        (
            ["scorers.knowledge_retention.compat=ragas"],
            r"compat='ragas' is not an option; use one of deepeval, mlflow",
        ),
        (
            ["scorers.knowledge_retention.aggregate=all"],
            r"aggregate=all: `aggregate` combines a panel's judges",
        ),
        (
            ["+scorers.goal_accuracy.unit=turn"],
            r"goal_accuracy\.unit=turn: one call per assistant turn needs output type turns",
        ),
        (["scorers.goal_accuracy.needs=[history]"], r"conversation columns messages, expected_outcome"),
    ],
)
def test_a_bad_conversation_setting_stops_the_run_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, overrides: list[str], message: str
) -> None:
    judge = overrides[0].split(".")[1]
    with pytest.raises(ConfigError, match=message):
        pipeline.evaluate(config(scripted, tmp_path, [judge], *overrides), tmp_path / "out")
    assert scripted.count() == 0


def test_scope_and_miscount_by_hand() -> None:
    with pytest.raises(ConfigError, match=r"^k\.window=0: set it to a whole number of at least 1"):
        Scope.of("window", 0, None, None, [], "k")
    assert Scope.of("turn", None, None, None, ["a", " "], "k").rules == ("a",)
    assert miscount('{"turn_2": {}, "turn_4": {}, "turn_6": {}}', 4) == "3 verdicts for 4 assistant turns; "
    assert miscount('```json\n{"turn_2": {}}\n```', 1) == "" and miscount("not json", 3) == ""
    two_of_three = '{"verdicts": {"0": {}, "1": {}}}'
    assert miscount(two_of_three, 3, "rules") == "2 verdicts for 3 rules; "
    lines = ScoreResult(0.5, "", details={"turns": [{"turn": 2, "verdict": "no", "reason": "r"}]}).verdicts()
    assert lines == ["turn 2 no: r"]
    assert Rules.of("unscored", "mlflow", 1.0, "higher", "k", ("deepeval", "mlflow")).compat == "mlflow"


def test_every_conversation_judge_is_data_on_the_generic_judge() -> None:
    scorers = compose([f"scorer=[{','.join(JUDGES)}]"])["scorers"]
    assert {spec["_target_"] for spec in scorers.values()} == {"evalframe.scorers.judge.Judge"}
    assert {tuple(spec["needs"]) for spec in scorers.values()} >= {
        ("messages",),
        ("messages", "chatbot_role"),
    }


@pytest.mark.slow  # a Hydra multirun of four jobs: ~18 s here
def test_a_sweep_of_aggregate_and_compat_re_scores_the_stored_replies_with_no_call(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = memory_judge
    args = [
        "scorer=knowledge_retention",
        *fake_model(scripted),
        "tracking=none",
        "dataset=jsonl",
        f"dataset.path={chat_data(tmp_path, {'forgotten': FORGOTTEN})}",
    ]
    assert run_cli(args, cwd=tmp_path).returncode == 0 and scripted.count() == 1
    scripted.reset()
    sweep = [
        "scorers.knowledge_retention.output.aggregate=mean,all",
        "scorers.knowledge_retention.compat=null,mlflow",
    ]
    swept = run_cli(["-m", *args, *sweep], cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    assert scripted.count() == 0
    jobs = re.findall(r"│ \d +│ +(mean|all) │ +(null|mlflow) │ +([\d.]+) │", swept.stdout)
    assert sorted(jobs) == [
        ("all", "mlflow", "0.000"),
        ("all", "null", "0.000"),
        ("mean", "mlflow", "0.000"),
        ("mean", "null", "0.750"),
    ]
