"""A simulated user (the scripted model, through the judges' door) against a target=python bot: each
conversation stops when the user says its scenario is done or at max_turns, is stored in full, and is
judged again later (`evalframe rescore`, `dataset=run` with another judge) with no bot and no user-model
call. Bad settings and rows are named before any call."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests import scripted as scripted_model
from tests.conftest import fake_model, run_cli
from tests.fake_judge import judge
from tests.scripted import ScriptedModel
from tests.testserver import FakeRequest

ROWS = [
    {"id": "two", "scenario": "You want to order 2 pizzas.", "chatbot_role": "a pizza shop's order bot"},
    {"id": "nine", "scenario": "You want to order 9 pizzas."},
]
USER = "UserTurn"  # the simulated user's reply schema, as requests name it
bot_calls: list[list[dict[str, Any]]] = []


def pizza_bot(question: str, messages: list[dict[str, Any]]) -> str:
    bot_calls.append(messages)
    return f"Noted: {sum(m['role'] == 'user' for m in messages)} pizza(s). Anything else?"


def wants(prompt: str) -> int:
    return int(re.search(r"order (\d+) pizzas", prompt).group(1))  # type: ignore[union-attr]


def play(request: FakeRequest) -> str | dict[str, Any]:
    """The user model: one pizza per message until its scenario's count is ordered, then done. The
    judge's requests go to the default judge."""
    if request.schema_name != USER:
        return judge(request)
    prompt = request.messages[0]["content"]  # (a correction comes after it)
    sent = prompt.count("] user: ")  # the transcript's user turns: [N] user: ...
    if sent >= wants(prompt):
        return {"message": "That is all, thanks.", "done": True}
    return {"message": f"Pizza number {sent + 1}, please.", "done": False}


def simulate(tmp_path: Path, scripted: ScriptedModel, *extra: str, rows: list[dict[str, Any]] = ROWS) -> Any:
    data = tmp_path / "scenarios.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    user = f"{{name: {scripted_model.NAME}, api_key_env: null, api_base: null, timeout: 10}}"
    args = ["dataset=jsonl", f"dataset.path={data}", "scorer=answer_relevancy", *fake_model(scripted)]
    target = ["target=python", f"target.fn={__name__}:pizza_bot", f"target.simulate.user_model={user}"]
    return run_cli([*args, *target, "target.simulate.max_turns=3", *extra], tmp_path)


def items_of(journal: Path) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in map(json.loads, journal.read_text().splitlines())}


def said(item: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in item["target_step"]["reply"]["messages"]]


@pytest.mark.slow
def test_a_simulated_user_stops_at_its_scenarios_end_or_max_turns_and_is_stored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    bot_calls.clear()
    scripted.responder = play
    store = f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"
    done = simulate(tmp_path, scripted, store)
    assert done.returncode == 0, done.stderr
    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = items_of(journal)
    assert said(items["two"]) == [
        ("user", "Pizza number 1, please."),
        ("assistant", "Noted: 1 pizza(s). Anything else?"),
        ("user", "Pizza number 2, please."),
        ("assistant", "Noted: 2 pizza(s). Anything else?"),
    ]
    assert len(said(items["nine"])) == 6  # 3 user turns of the 9 it wanted: cut at max_turns
    assert items["two"]["record"]["stopped"] == "done" and items["nine"]["record"]["stopped"] == "max_turns"
    assert items["two"]["target_step"]["reply"]["stopped"] == "done"
    assert items["nine"]["output"] == "Noted: 3 pizza(s). Anything else?"  # the last assistant turn
    # The user model was asked 3 + 3 times (two's third reply said done), the bot 2 + 3 times, each
    # with the conversation so far; the user model saw its scenario and the bot's role.
    user_requests = [r for r in scripted.requests if r.schema_name == USER]
    assert len(user_requests) == 6 and len(bot_calls) == 5
    assert any(
        "The assistant's role: a pizza shop's order bot" in r.messages[-1]["content"] for r in user_requests
    )
    # Its calls are in the item's cost and the run's (priced like gpt-4o-mini), besides the judge's.
    assert all(items[i]["target_step"]["usage"]["cost"] > 0 for i in items)
    assert all(items[i]["scores"]["answer_relevancy"]["score"] is not None for i in items)

    # Judged again with other weights: every judge reply, bot answer and user turn is the stored one.
    scripted.reset()
    bot_calls.clear()
    fresh = {"EVALFRAME_CACHE_DIR": str(tmp_path / "empty-cache")}
    run_id = re.search(r"runs/([0-9a-f]{32})", done.stdout).group(1)  # type: ignore[union-attr]
    again = run_cli(
        ["rescore", f"run_id={run_id}", "scorers.answer_relevancy.uncertainty_weight=0.9", store],
        tmp_path,
        env=fresh,
    )
    assert again.returncode == 0, again.stderr
    assert scripted.count() == 0 and bot_calls == [] and "0 model calls" in again.stdout
    rescored = items_of(sorted(tmp_path.glob("outputs/*/*/results.jsonl"))[-1])
    assert (
        said(rescored["two"]) == said(items["two"]) and rescored["nine"]["record"]["stopped"] == "max_turns"
    )

    # A changed judge reading the stored conversations (dataset=run): only the judge is asked.
    turns = tmp_path / "turns.j2"
    turns.write_text(
        "{% for m in row.messages %}[{{ loop.index }}] {{ m.role }}: {{ m.content }}\n{% endfor %}"
    )
    judge_yaml = tmp_path / "conf" / "scorer" / "turns.yaml"
    judge_yaml.parent.mkdir(parents=True)
    judge_yaml.write_text(
        "# @package scorers.turns\n_target_: evalframe.scorers.judge.Judge\nrequire_ground_truth: false\n"
        f"prompt: {turns}\noutput: {{type: number, min: 0, max: 10}}\nmodel: ${{model}}\n"
    )
    scripted.responder = lambda r: {
        "reason": "counted",
        "rating": r.messages[-1]["content"].count("assistant:"),
    }
    other = run_cli(
        [
            "--config-dir",
            str(tmp_path / "conf"),
            "dataset=run",
            f"dataset.path={journal}",
            "target=dataset",
            "scorer=turns",
            *fake_model(scripted),
            "tracking=none",
        ],
        tmp_path,
        env=fresh,
    )
    assert other.returncode == 0, other.stderr
    assert bot_calls == [] and scripted.count(USER) == 0 and scripted.count() == 2  # one judge request each
    judged = items_of(sorted(tmp_path.glob("outputs/*/*/results.jsonl"))[-1])
    assert (
        judged["two"]["scores"]["turns"]["score"] == 0.2 and judged["nine"]["scores"]["turns"]["score"] == 0.3
    )


def test_bad_settings_and_rows_are_named_before_any_call(scripted: ScriptedModel, tmp_path: Path) -> None:
    bot_calls.clear()
    scripted.responder = play
    zero = simulate(tmp_path, scripted, "target.simulate.max_turns=0")
    assert zero.returncode == 2 and "target.simulate.max_turns=0: the most user turns" in zero.stderr
    rows = [*ROWS, {"id": "lost", "input": "no scenario here"}]
    lost = simulate(tmp_path, scripted, "tracking=none", rows=rows)
    assert (
        lost.returncode == 2 and "line 3 (id lost): no scenario, which target.simulate needs" in lost.stderr
    )
    typo = simulate(tmp_path, scripted, "+target.simulate.max_turn=2")
    assert typo.returncode == 2 and "target.simulate.max_turn is not a setting" in typo.stderr
    # a preset with no key: the way out it names is one that parses (a preset's name, not a group)
    keyless = simulate(tmp_path, scripted, "target.simulate.user_model=gpt")
    assert keyless.returncode == 2 and "OPENAI_API_KEY is not set" in keyless.stderr
    assert "target.simulate.user_model=claude (ANTHROPIC_API_KEY)" in keyless.stderr
    assert scripted.count() == 0 and bot_calls == []
    assert all("Traceback" not in r.stderr for r in (zero, lost, typo, keyless))


def test_a_user_model_or_bot_failing_mid_conversation_leaves_the_item_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    def unreadable_on_turn_2(request: FakeRequest) -> str | dict[str, Any]:
        prompt = request.messages[0]["content"]  # (a correction comes after it)
        if request.schema_name == USER and "9 pizzas" in prompt and "[3] user:" in prompt:
            return "not JSON at all"  # after reply_retries, the step fails
        return play(request)

    scripted.responder = unreadable_on_turn_2
    done = simulate(tmp_path, scripted, "tracking=none", "max_unscored_rate=1")
    assert done.returncode == 0, done.stderr
    items = items_of(next(tmp_path.glob("outputs/*/*/results.jsonl")))
    assert items["two"]["target_error"] is None  # done before its third user turn was asked for
    error = items["nine"]["target_error"]
    assert error.startswith("the simulated user (scripted/judge) failed before user turn 3: invalid reply")
    assert items["nine"]["scores"]["answer_relevancy"]["score"] is None and items["nine"]["output"] == ""


def test_a_simulation_provides_the_conversation_its_rows_lack() -> None:
    from evalframe.data.rows import Row
    from evalframe.targets import PythonTarget

    user = {"name": scripted_model.NAME, "api_key_env": None}
    target = PythonTarget(pizza_bot, simulate={"user_model": user, "max_turns": 2})
    assert "messages" in target.provides and target.simulation is not None
    assert target.simulation.max_turns == 2 and target.simulation.user_model.name == scripted_model.NAME
    # Scorers check their prompts against a stand-in conversation before any call.
    row = Row("two", "You want to order 2 pizzas.", None, None, 1, scenario="You want to order 2 pizzas.")
    sample = target.sample(row).messages
    assert sample is not None and [t.role for t in sample] == ["user", "assistant"]
    assert "messages" not in PythonTarget(pizza_bot).provides  # a replay's rows have theirs


def test_a_user_model_or_llm_target_answering_a_cut_emoji_leaves_that_item_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """A model's reply holding a lone surrogate (half an emoji) cannot be stored: it is asked again as it
    was, then that item's error, naming the problem; the other items are scored and stored."""

    def cut_emoji(request: FakeRequest) -> str | dict[str, Any]:
        prompt = request.messages[0]["content"]
        if request.schema_name == USER and "9 pizzas" in prompt:
            return '{"message": "Pizza \ud83d", "done": false}'
        return play(request)

    scripted.responder = cut_emoji
    (tmp_path / "sim").mkdir()
    done = simulate(tmp_path / "sim", scripted, "tracking=none", "max_unscored_rate=1")
    assert done.returncode == 0, done.stderr
    items = items_of(next(tmp_path.glob("sim/outputs/*/*/results.jsonl")))
    assert items["two"]["target_error"] is None
    assert items["nine"]["target_error"] == (
        "the simulated user (scripted/judge) failed before user turn 1: the reply is not valid Unicode text "
        "(a lone surrogate, '\\ud83d', at character 19) after 3 attempt(s)"
    )

    scripted.responder = lambda request: (
        "Paris \ud83d" if "France" in request.messages[-1]["content"] else "Rome"
    )
    rows = tmp_path / "qa.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": c, "input": f"{c}?", "ground_truth": "Rome"}) + "\n"
            for c in ("France", "Italy")
        )
    )
    (tmp_path / "llm").mkdir()
    llm = ["target=llm", *scripted_model.overrides("target.model"), "scorer=exact_match", "tracking=none"]
    done = run_cli(["dataset=jsonl", f"dataset.path={rows}", *llm, "max_unscored_rate=1"], tmp_path / "llm")
    assert done.returncode == 0, done.stderr
    items = items_of(next(tmp_path.glob("llm/outputs/*/*/results.jsonl")))
    assert items["Italy"]["scores"]["exact_match"]["score"] == 1.0
    assert items["France"]["target_error"].startswith("the reply is not valid Unicode text (a lone surrogate")
