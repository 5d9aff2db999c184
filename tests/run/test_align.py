"""`evalframe align` end to end, in process, through the scripted judge: a team rule that the judge
applies only once a prompt states it, learnable only from people's comments."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from evalframe.results import alignment
from evalframe.results.scores import ItemResult, ScoreResult
from evalframe.scorers import aligned
from tests.conftest import fake_model, run_cli, run_process
from tests.fake_judge import fenced
from tests.scripted import ScriptedModel
from tests.testserver import FakeLLMServer, FakeRequest

RULES_YAML = """\
# @package scorers.rules
_target_: evalframe.scorers.judge.Judge
prompt: {prompt}
require_ground_truth: false
output: {{type: choice, choices: {{pass: 1.0, fail: 0.0}}}}
model: ${{model}}
repeats: ${{repeats}}
"""

RULES_PROMPT = """\
Does this reply to a customer follow the team's rules?

Question:
{{ input | fence("QUESTION") }}

Reply:
{{ output | fence("REPLY") }}

Reply with JSON: {"reason": "...", "choice": "pass" or "fail"}
"""

COMPETITOR = re.compile(r"competitor \((\w+)\)")  # in people's comments, or a rule written from them
DAYS = "A reply that states a day fails."  # a rule the comments do not support: it fails every reply


def guideline_writer(request: FakeRequest) -> dict[str, Any]:
    """The judge's model writing rules from the disagreements it is shown: one from people's comments
    (twice, in other words), and one that no comment supports."""
    prompt = request.messages[-1]["content"]
    named = sorted(set(COMPETITOR.findall(prompt)))
    rules = [f"A reply that names the competitor ({n}) fails." for n in named]
    rules += [f"a reply that names the competitor ({n}) fails" for n in named]
    return {"reason": "from the comments", "rules": [DAYS, *rules]}


def team_judge(request: FakeRequest) -> dict[str, Any]:
    """A judge that knows no team rule until a prompt states one in people's comments ("mentions the
    competitor (Acme)"), and that copies people's verdict of an example it is shown again: a held-out
    item leaked into the examples would score as agreement it never learned."""
    if "rules" in (request.schema or {}).get("properties", {}):
        return guideline_writer(request)
    prompt = next(m["content"] for m in request.messages if m["role"] == "user")
    reply = fenced(request)["REPLY"]
    for section in prompt.split(alignment.EXAMPLE_HEADING)[1:]:
        shown = dict((label, body) for label, _, body in alignment._FENCED.findall(section))
        if shown.get("EXAMPLE_OUTPUT") == reply:
            verdict = "fail" if "People's verdict: fail" in section else "pass"
            return {"reason": "I was shown this one", "choice": verdict}
    banned = [name for name in COMPETITOR.findall(prompt) if name in reply]
    if banned:
        return {"reason": f"names the competitor {banned[0]}", "choice": "fail"}
    if DAYS in prompt and "day" in reply:
        return {"reason": "states a day", "choice": "fail"}
    return {"reason": "a helpful reply", "choice": "pass"}


def labelled_items(n: int = 40) -> list[dict[str, Any]]:
    """Half the replies name a competitor, which people fail (and say so); the rest pass."""
    rows = []
    for i in range(n):
        bad = i % 2 == 0
        output = f"Your order {i} ships on day {i % 7 + 1}." + (" Acme sells it cheaper." if bad else "")
        rows.append(
            {
                "id": f"q{i:02d}",
                "input": f"When does order {i} ship?",
                "output": output,
                "label": 0 if bad else 1,
                "comment": "mentions the competitor (Acme): never do that" if bad else "clear and correct",
            }
        )
    return rows


def setup(tmp_path: Path, rows: list[dict[str, Any]]) -> list[str]:
    conf, prompt = tmp_path / "my_conf", tmp_path / "my_prompts" / "rules.j2"
    (conf / "scorer").mkdir(parents=True)
    prompt.parent.mkdir()
    prompt.write_text(RULES_PROMPT)
    (conf / "scorer" / "rules.yaml").write_text(RULES_YAML.format(prompt=prompt))
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [
        "--config-dir",
        str(conf),
        "scorer=rules",
        "dataset=jsonl",
        f"dataset.path={data}",
        "dataset.human_score=label",
        "tracking=none",
    ]


@pytest.mark.slow
def test_align_lifts_held_out_agreement_and_no_held_out_item_is_an_example(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = team_judge
    args = setup(tmp_path, labelled_items())
    done = run_cli(
        ["align", *args, *fake_model(scripted), "output_dir=al", "align.max_calls=80"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr + done.stdout
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    held, train, examples = set(found["held_out"]), set(found["train"]), set(found["examples"])
    assert len(held) == len(train) == 20 and not held & train and not held & examples
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert kappa["before"] == pytest.approx(0.0) and kappa["after"] == pytest.approx(1.0)
    assert kappa["interval"][0] > 0 and "better" in done.stdout
    assert found["leaks"] == [] and found["prompts_checked"] == 20
    assert "leak check: none of the 20 held-out items" in done.stdout
    assert found["calls"] == 60  # 20 training items, then 20 held-out ones twice
    # Every held-out item was judged with the examples, and by the aligned judge's own files.
    judged = [r for r in scripted.requests if "### Example " in r.messages[-1]["content"]]
    assert len(judged) == 20
    written = (tmp_path / "aligned" / "prompts" / "rules_aligned" / "examples.j2").read_text()
    assert "mentions the competitor (Acme)" in written


@pytest.mark.slow
def test_the_aligned_judge_runs_as_any_judge(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = team_judge
    args = setup(tmp_path, labelled_items())
    done = run_cli(["align", *args, *fake_model(scripted), "output_dir=al"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("run it: evalframe "))
    command = shlex.split(line.removeprefix("run it: evalframe "))
    assert "scorer=rules_aligned" in command
    ran = run_cli([*command, "dataset=jsonl", f"dataset.path={tmp_path / 'labelled.jsonl'}"], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [results] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = [json.loads(x) for x in results.read_text().splitlines()]
    people = {r["id"]: r["label"] for r in labelled_items()}
    # From the written files alone: it agrees with people on every item.
    assert {i["id"]: i["scores"]["rules_aligned"]["score"] for i in items} == people


def test_a_held_out_item_shown_as_an_example_is_caught(tmp_path: Path) -> None:
    """The leak check reads the rendered prompts: a held-out item written into the examples is found."""
    from evalframe.data.rows import Row
    from evalframe.scorers.judge import Judge

    prompt = tmp_path / "p" / "rules.j2"
    prompt.parent.mkdir()
    prompt.write_text(RULES_PROMPT)
    rows = labelled_items(4)
    items = [
        ItemResult(
            r["id"], r["input"], None, r["output"], {"rules": ScoreResult(1.0, "pass")}, human=r["label"]
        )
        for r in rows
    ]
    leaked = alignment.labelled(items[:2], "rules", (0, 1))
    spec: dict[str, Any] = {
        "_target_": "evalframe.scorers.judge.Judge",
        "prompt": str(prompt),
        "output": {"type": "choice", "choices": {"pass": 1.0, "fail": 0.0}},
    }
    yaml = aligned.write(tmp_path / "out", "rules", spec, leaked, "a test")
    judge = Judge(
        str(yaml.parent.parent / "prompts" / "rules_aligned" / "aligned.j2"), spec["output"], {"name": "x"}
    )
    judge.name = "rules_aligned"
    row = Row(rows[3]["id"], rows[3]["input"], None, rows[3]["output"], 1)
    text = "\n".join(m["content"] for m in judge.render(row, rows[3]["output"]))
    assert alignment.leaks([(row.id, text)], items[:2]) == [(items[0].id, row.id), (items[1].id, row.id)]
    assert alignment.leaks([(row.id, text)], items[2:]) == []


def test_an_examples_text_stays_text(tmp_path: Path) -> None:
    """An answer holding template syntax, even `{% endraw %}`, is shown as it is, never run."""
    from evalframe.data.rows import Row
    from evalframe.scorers.judge import Judge

    prompt = tmp_path / "p" / "rules.j2"
    prompt.parent.mkdir()
    prompt.write_text(RULES_PROMPT)
    tricky = "{{ 7*7 }} {% endraw %}{{ row }} {%raw%} {# x #}"
    item = ItemResult("t", "q?", None, tricky, {"rules": ScoreResult(0.0, "fail")}, human=1)
    examples = alignment.labelled([item], "rules", (0, 1))
    spec: dict[str, Any] = {
        "_target_": "evalframe.scorers.judge.Judge",
        "prompt": str(prompt),
        "output": {"type": "number", "min": 1, "max": 5},
    }
    aligned.write(tmp_path / "out", "rules", spec, examples, "a test")
    judge = Judge(
        str(tmp_path / "out" / "prompts" / "rules_aligned" / "aligned.j2"), spec["output"], {"name": "x"}
    )
    judge.name = "rules_aligned"
    text = judge.render(Row("u", "other", None, "fine", 0), "fine")[0]["content"]
    assert tricky in text and "People's verdict: rating 5 (on 1 to 5)" in text
    assert alignment.shown_examples(text) == [("q?", "", tricky)]


def test_a_scorer_that_is_no_judge_written_as_data_is_refused(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    args = [a if a != "scorer=rules" else "scorer=token_f1" for a in setup(tmp_path, labelled_items())]
    done = run_cli(["align", *args, *fake_model(scripted)], cwd=tmp_path)
    assert done.returncode == 2 and "scorer token_f1 is not a judge written as data" in done.stderr
    assert scripted.requests == []


@pytest.mark.parametrize(
    ("rows", "extra", "said"),
    [
        (labelled_items(8), [], "at least 10 items people labelled"),
        ([{**r, "label": 1} for r in labelled_items()], [], "every labelled item has the label 1"),
        ([{**r, "label": 3 if r["id"] == "q03" else r["label"]} for r in labelled_items()], [], "item q03"),
        (labelled_items(), ["align.holdout=0.1"], "too few for an interval"),
        (labelled_items(), ["align.max_calls=59"], "align.max_calls=59: aligning asks for 60 judge calls"),
        (labelled_items(), ["align.method=guess"], "align.method=guess"),
        (labelled_items(), ["dataset=mlflow_traces"], "for traces, align the run that judged them"),
    ],
)
def test_what_align_refuses_before_any_call(
    scripted: ScriptedModel, tmp_path: Path, rows: list[dict[str, Any]], extra: list[str], said: str
) -> None:
    args = setup(tmp_path, rows)
    done = run_cli(["align", *args, *fake_model(scripted), *extra], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert scripted.requests == []


@pytest.mark.slow
def test_align_run_id_reads_a_logged_runs_labelled_items(scripted: ScriptedModel, tmp_path: Path) -> None:
    """`align run_id=ID`: the items, people's labels and comments of a run logged to MLflow (about 4 s:
    MLflow's first store in the process)."""
    from tests.cli.test_rescore import mlflow_runs

    scripted.responder = team_judge
    args = [a for a in setup(tmp_path, labelled_items()) if a != "tracking=none"]
    first = run_cli([*args, *fake_model(scripted), "tracking.traces=false"], tmp_path)
    assert first.returncode == 0, first.stderr
    [logged] = mlflow_runs(tmp_path)
    config_dir = args[: args.index("scorer=rules") + 1]  # --config-dir DIR scorer=rules
    done = run_cli(
        ["align", f"run_id={logged.info.run_id}", *config_dir, *fake_model(scripted), "output_dir=al"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    assert len(found["held_out"]) == 20 and found["leaks"] == []
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert (kappa["before"], kappa["after"]) == (pytest.approx(0.0), pytest.approx(1.0))
    assert (
        "mentions the competitor (Acme)"
        in (tmp_path / "aligned/prompts/rules_aligned/examples.j2").read_text()
    )


@pytest.mark.slow
def test_the_split_follows_the_items_not_their_order(scripted: ScriptedModel, tmp_path: Path) -> None:
    """The same items in another order (a logged run's come as they finished) split alike, by id."""
    scripted.responder = team_judge
    parts = []
    for name, rows in (("a", labelled_items()), ("b", labelled_items()[::-1])):
        args = setup(tmp_path / name, rows)
        done = run_cli(["align", *args, *fake_model(scripted), f"output_dir={name}/al"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        found = json.loads((tmp_path / name / "al" / "alignment.json").read_text())
        parts.append((sorted(found["train"]), sorted(found["held_out"])))
    assert parts[0] == parts[1]


def judged_run(scripted: ScriptedModel, tmp_path: Path, fails: str = "") -> tuple[list[str], str]:
    """The labelled items judged by `rules` as a user does first (`evalframe scorer=rules`, logged to
    MLflow, the disk cache off: whatever align does not ask for comes from the run), the judge's model
    failing on the item `fails`; the align arguments (--config-dir DIR scorer=rules) and the run's id."""
    from tests.cli.test_rescore import mlflow_runs
    from tests.testserver import Fault

    def judge(request: FakeRequest) -> Any:
        return Fault(400) if fails and f"order {fails} " in fenced(request)["REPLY"] else team_judge(request)

    scripted.responder = judge
    args = [a for a in setup(tmp_path, labelled_items()) if a != "tracking=none"]
    first = run_cli([*args, *fake_model(scripted), "tracking.traces=false", "cache.mode=off"], tmp_path)
    assert first.returncode == 0 and scripted.faults == (1 if fails else 0), first.stderr
    [logged] = mlflow_runs(tmp_path)
    scripted.responder, scripted.requests[:] = team_judge, []
    return args[: args.index("scorer=rules") + 1], logged.info.run_id


@pytest.mark.slow
@pytest.mark.parametrize("method", ["examples", "both"])
def test_aligning_a_logged_run_reads_its_judge_s_verdicts(
    scripted: ScriptedModel, tmp_path: Path, method: str
) -> None:
    """`align run_id=`: the judge as it was scores the training and held-out parts from the run's own
    replies (0 calls for it); only the guideline writer and the aligned judge ask the model, the budget
    counts only those, and the figures are those of aligning the same items from their file."""
    config_dir, run_id = judged_run(scripted, tmp_path)
    writer = 1 + 2 * 20 if method == "both" else 0  # the rules written, then each tried on 20 items
    asked = writer + 20  # and the aligned judge on the 20 held-out items
    extra = [f"align.method={method}", f"align.max_calls={asked}", "output_dir=al"]
    done = run_cli(["align", f"run_id={run_id}", *config_dir, *fake_model(scripted), *extra], tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    assert len(scripted.requests) == found["calls"] == found["planned"] == asked
    assert found["from_run"] == 40 and found["run"] == f"run {run_id}"
    assert f"40 of the judge's verdicts read from run {run_id}, 0 calls" in done.stdout
    # Each request is the writer's or the aligned judge's (examples or rules in its prompt).
    taught = ("### Example ", "The team's rules, learnt")
    judged = [r for r in scripted.requests if "rules" not in (r.schema or {}).get("properties", {})]
    assert len(judged) == asked - (method == "both")
    assert all(any(t in r.messages[-1]["content"] for t in taught) for r in judged)
    # The same alignment from the items' file (the judge as it was asked anew): the same figures.
    file_args = setup(tmp_path / "file", labelled_items())
    again = run_cli(
        ["align", *file_args, *fake_model(scripted), extra[0], "output_dir=al2", "cache.mode=off"], tmp_path
    )
    assert again.returncode == 0, again.stderr
    other = json.loads((tmp_path / "al2" / "alignment.json").read_text())
    assert other["calls"] == asked + 40 and other["from_run"] == 0
    assert found["figures"] == other["figures"] and sorted(found["held_out"]) == sorted(other["held_out"])
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert (kappa["before"], kappa["after"]) == (pytest.approx(0.0), pytest.approx(1.0))


@pytest.mark.slow
def test_an_edited_judge_prompt_or_an_item_the_run_could_not_score_is_asked_again(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """The run's replies answer only the requests it made: an item it could not score is asked, and a
    judge prompt edited since is asked on every item (never served the run's stale verdicts); the
    budget counts them before the first call."""
    config_dir, run_id = judged_run(scripted, tmp_path, fails="3")
    command = ["align", f"run_id={run_id}", *config_dir, *fake_model(scripted), "align.max_calls=21"]
    done = run_cli([*command, "output_dir=al"], tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    [unscored] = [r for r in scripted.requests if "### Example " not in r.messages[-1]["content"]]
    assert "order 3 " in fenced(unscored)["REPLY"] and found["from_run"] == 39
    assert found["calls"] == found["planned"] == 21  # q03 asked again, then the aligned judge's 20
    prompt = tmp_path / "my_prompts" / "rules.j2"
    prompt.write_text(prompt.read_text().replace("team's rules", "team's written rules"))
    scripted.requests[:] = []
    refused = run_cli([*command, "output_dir=al2"], tmp_path)
    assert refused.returncode == 2 and "aligning asks for 60 judge calls" in refused.stderr
    assert scripted.requests == []  # refused before any call
    done = run_cli([*command[:-1], "output_dir=al3"], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al3" / "alignment.json").read_text())
    assert found["calls"] == found["planned"] == len(scripted.requests) == 60 and found["from_run"] == 0
    assert all("team's written rules" in r.messages[-1]["content"] for r in scripted.requests)
    assert f"0 of the judge's verdicts read from run {run_id}, 0 calls" in done.stdout


@pytest.mark.slow
def test_the_aligned_judge_runs_from_its_files_in_a_new_process(
    judge_server: FakeLLMServer, tmp_path: Path
) -> None:
    """The written files are all it takes: `python -m evalframe` with the line align printed."""
    judge_server.responder = team_judge
    args = setup(tmp_path, labelled_items())
    done = run_cli(["align", *args, *fake_model(judge_server), "output_dir=al"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("run it: evalframe "))
    command = shlex.split(line.removeprefix("run it: evalframe "))
    data = ["dataset=jsonl", f"dataset.path={tmp_path / 'labelled.jsonl'}"]
    ran = run_process([*command, *data], tmp_path, env={"OPENAI_API_KEY": "sk-x"})
    assert ran.returncode == 0, ran.stderr
    [results] = tmp_path.glob("outputs/*/*/results.jsonl")
    scores = {i["id"]: i["scores"]["rules_aligned"]["score"] for i in map(json.loads, results.open())}
    assert scores == {r["id"]: r["label"] for r in labelled_items()}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["guidelines", "both"])
def test_guidelines_are_kept_only_when_they_help_on_the_training_part(
    scripted: ScriptedModel, tmp_path: Path, method: str
) -> None:
    scripted.responder = team_judge
    args = setup(tmp_path, labelled_items())
    extra = [f"align.method={method}", "align.rules=3", "align.max_calls=121"]  # 20 + 3 x 20 + 1 + 2 x 20
    done = run_cli(["align", *args, *fake_model(scripted), "output_dir=al", *extra], cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    # The writer's duplicate is one rule; the unsupported one fails every reply and is dropped.
    assert [(r["rule"], r["kept"]) for r in found["rules"]] == [
        (DAYS, False),
        ("A reply that names the competitor (Acme) fails.", True),
    ]
    assert found["calls"] == 20 + 1 + 2 * 20 + 2 * 20  # two rules tried, not the three budgeted
    assert found["planned"] == 121 and "judge calls: 101 made, 121 counted up front" in done.stdout
    folder = tmp_path / "aligned" / "prompts" / "rules_aligned"
    written = (folder / "guidelines.j2").read_text()
    assert "names the competitor (Acme) fails" in written and DAYS not in written
    assert (folder / "examples.j2").exists() == (method == "both")
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert (kappa["before"], kappa["after"]) == (pytest.approx(0.0), pytest.approx(1.0))
    assert found["leaks"] == [] and "rule dropped" in done.stdout and "rule kept" in done.stdout
    # The writer read training items only: no held-out reply is in its prompt.
    [writer] = [r for r in scripted.requests if "rules" in (r.schema or {}).get("properties", {})]
    outputs = {r["id"]: r["output"] for r in labelled_items()}
    assert "Acme" in writer.messages[-1]["content"]
    assert [i for i in found["held_out"] if outputs[i] in writer.messages[-1]["content"]] == []


@pytest.mark.slow
def test_fifty_items_align_within_150_judge_calls(scripted: ScriptedModel, tmp_path: Path) -> None:
    """Guidelines and examples at their defaults, 50 labelled items: at most 150 judge calls."""
    scripted.responder = team_judge
    args = setup(tmp_path, labelled_items(50))
    extra = ["align.method=both", "align.max_calls=150", "output_dir=al"]
    done = run_cli(["align", *args, *fake_model(scripted), *extra], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    assert found["calls"] == len(scripted.requests) == 25 + 1 + 2 * 25 + 2 * 25
    assert next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")["after"] == pytest.approx(
        1.0
    )


def two_rules(n: int = 60) -> list[dict[str, Any]]:
    """A third of the replies name Acme, a third Globex (both failed by people, who say which), a third
    name neither: a fixed pair of examples teaches one competitor, the nearest examples each item's."""
    rows = []
    for i in range(n):
        kind = ("Acme", "Globex", None)[i % 3]
        said = f" {kind} sells it cheaper, ask {kind}." if kind else " Thanks for your patience."
        rows.append(
            {
                "id": f"q{i:02d}",
                "input": f"When does order {i} ship?",
                "output": f"Your order ships soon.{said}",
                "label": 0 if kind else 1,
                "comment": f"mentions the competitor ({kind})" if kind else "fine",
            }
        )
    return rows


@pytest.mark.slow
def test_retrieved_examples_are_each_items_nearest(scripted: ScriptedModel, tmp_path: Path) -> None:
    scripted.responder = team_judge
    args = setup(tmp_path, two_rules())
    model = [*fake_model(scripted), "align.embedding=scripted/embed"]
    fixed = run_cli(["align", *args, *model, "output_dir=fixed", "align.k=2"], cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    retrieved = run_cli(["align", *args, *model, "output_dir=near", "align.retrieve=2"], cwd=tmp_path)
    assert retrieved.returncode == 0, retrieved.stderr

    def kappa(folder: str) -> float:
        found = json.loads((tmp_path / folder / "alignment.json").read_text())
        assert found["leaks"] == [] and found["prompts_checked"] == 30
        return float(next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")["after"])

    assert kappa("fixed") < 0.8 <= kappa("near")
    folder = tmp_path / "aligned" / "prompts" / "rules_aligned"
    pool = [json.loads(line) for line in (folder / "examples.jsonl").read_text().splitlines()]
    held = set(json.loads((tmp_path / "near" / "alignment.json").read_text())["held_out"])
    assert len(pool) == 30 and not {e["id"] for e in pool} & held
    # Each judged item got the examples nearest it: the prompts of the aligned judge differ.
    judged = [r for r in scripted.requests if r.messages][-30:]
    shown = {r.messages[-1]["content"].split("Now the item to judge.")[0] for r in judged}
    assert len(shown) > 2


def test_a_prompt_in_the_working_directory_brings_only_prompt_files(tmp_path: Path) -> None:
    """The judge's prompt beside everything else (outputs/, the data, `out` itself): its prompt files are
    copied, nothing else."""
    (tmp_path / "rules.j2").write_text(RULES_PROMPT)
    (tmp_path / "data.jsonl").write_text("{}\n")
    (tmp_path / "outputs" / "run").mkdir(parents=True)
    spec: dict[str, Any] = {
        "_target_": "evalframe.scorers.judge.Judge",
        "prompt": str(tmp_path / "rules.j2"),
        "output": {"type": "choice", "choices": {"pass": 1.0, "fail": 0.0}},
    }
    aligned.write(tmp_path / "aligned", "rules", spec, [], "a test")
    aligned.write(tmp_path / "aligned", "rules", spec, [], "again: the folder is made anew")
    folder = tmp_path / "aligned" / "prompts" / "rules_aligned"
    assert sorted(p.name for p in folder.iterdir()) == ["aligned.j2", "examples.j2", "rules.j2"]


@pytest.mark.slow
def test_people_s_labels_from_review_pull(scripted: ScriptedModel, tmp_path: Path) -> None:
    """`dataset.labels=labels.jsonl` (evalframe review pull's): the rows people labelled are aligned on,
    the others left out."""
    scripted.responder = team_judge
    rows = labelled_items() + [
        {"id": f"u{i}", "input": "?", "output": "Ships soon.", "label": 1, "comment": ""} for i in range(6)
    ]
    args = [a for a in setup(tmp_path, rows) if a != "dataset.human_score=label"]
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"item_id": r["id"], "scorer": "rules", "value": r["label"]}) + "\n" for r in rows[:40]
        )
    )
    done = run_cli(
        ["align", *args, *fake_model(scripted), f"dataset.labels={labels}", "output_dir=al"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    assert len(found["train"]) + len(found["held_out"]) == 40 and found["calls"] == 60
    assert not any(i.startswith("u") for i in found["train"] + found["held_out"])


@pytest.mark.slow
def test_people_s_comments_come_from_review_pull_s_labels(scripted: ScriptedModel, tmp_path: Path) -> None:
    """The rule is in the comments of labels.jsonl only (the data has no comment column): its examples
    show them, and the judge learns it. Before: only a dataset column was read, held-out kappa stayed 0."""
    from evalframe.results.review_labels import Label, write

    scripted.responder = team_judge
    rows = [{k: v for k, v in r.items() if k != "comment"} for r in labelled_items()]
    args = [a for a in setup(tmp_path, rows) if a != "dataset.human_score=label"]
    said = {r["id"]: r["comment"] for r in labelled_items()}
    labels = tmp_path / "labels.jsonl"
    reviewers = [(r, who) for r in rows for who in ("ana", "bo")]  # two people, one saying why
    write(
        labels,
        (
            Label(
                r["id"],
                "",
                "rules",
                "fail" if r["label"] == 0 else "pass",
                r["label"],
                who,
                said[r["id"]] if who == "ana" else None,
                "2026-01-01T00:00:00Z",
            )
            for r, who in reviewers
        ),
    )
    extra = [f"dataset.labels={labels}", "output_dir=al", "align.method=both"]
    done = run_cli(["align", *args, *fake_model(scripted), *extra], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert (kappa["before"], kappa["after"]) == (pytest.approx(0.0), pytest.approx(1.0))
    folder = tmp_path / "aligned" / "prompts" / "rules_aligned"
    assert (
        "People's comment: mentions the competitor (Acme): never do that"
        in (folder / "examples.j2").read_text()
    )
    assert "names the competitor (Acme) fails" in (folder / "guidelines.j2").read_text()


def test_other_examples_make_another_verdict_digest(tmp_path: Path) -> None:
    """The aligned judge's digest (what trace verdicts are reused by) follows its examples and rules."""
    from evalframe.scorers.judge import Judge

    prompt = tmp_path / "p" / "rules.j2"
    prompt.parent.mkdir()
    prompt.write_text(RULES_PROMPT)
    spec: dict[str, Any] = {
        "_target_": "evalframe.scorers.judge.Judge",
        "prompt": str(prompt),
        "output": {"type": "choice", "choices": {"pass": 1.0, "fail": 0.0}},
    }
    items = [
        ItemResult(
            r["id"], r["input"], None, r["output"], {"rules": ScoreResult(1.0, "pass")}, human=r["label"]
        )
        for r in labelled_items(4)
    ]

    def identity(examples: list[alignment.Example], rules: list[str]) -> str:
        yaml = aligned.write(tmp_path / "out", "rules", spec, examples, "a test", rules)
        entry = yaml.parent.parent / "prompts" / "rules_aligned" / "aligned.j2"
        return Judge(str(entry), spec["output"], {"name": "x"}).identity()

    two = alignment.labelled(items, "rules", (0, 1))
    found = {
        identity(two[:1], []),
        identity(two[:2], []),
        identity(two[:2], ["A rule."]),
        identity([], ["A rule."]),
    }
    assert len(found) == 4 and identity(two[:1], []) in found


@pytest.mark.slow
def test_the_aligned_judge_is_logged_to_mlflow_with_its_files_digest_and_figures(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """With tracking on, the aligned judge's held-out run is an MLflow run (about 4 s: MLflow's first
    store in the process): its YAML and prompt files, its verdict digest, the held-out figures."""
    from mlflow.tracking import MlflowClient

    from evalframe.results.journal import Journal
    from tests.cli.test_rescore import mlflow_runs

    scripted.responder = team_judge
    args = [a for a in setup(tmp_path, labelled_items()) if a != "tracking=none"]
    extra = ["output_dir=al", "tracking.traces=false"]
    done = run_cli(["align", *args, *fake_model(scripted), *extra], tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    [logged] = mlflow_runs(tmp_path)  # the aligned judge's only: the other runs of align are its own
    tags, metrics = logged.data.tags, logged.data.metrics
    digest = Journal(tmp_path / "al" / "after").manifest.digests["rules_aligned"]
    assert tags["evalframe.aligned.from"] == "rules" and tags["evalframe.aligned.digest"] == digest
    assert tags["evalframe.scorers"] == "rules_aligned" and tags["evalframe.aligned.kappa"] == "better"
    assert (metrics["align/kappa_before"], metrics["align/kappa_after"]) == (0.0, 1.0)
    assert metrics["align/kappa_change_ci_low"] > 0 and metrics["align/held_out"] == 20
    assert metrics["align/calls"] == 60 and metrics["rules_aligned/mean"] == 0.5
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")

    def files(path: str) -> list[str]:
        return sorted(a.path for a in client.list_artifacts(logged.info.run_id, path))

    assert files("aligned_judge/scorer") == ["aligned_judge/scorer/rules_aligned.yaml"]
    folder = "aligned_judge/prompts/rules_aligned"
    assert files(folder) == [f"{folder}/{f}" for f in ("aligned.j2", "examples.j2", "rules.j2")]
    assert "alignment.json" in files("")
    yaml = client.download_artifacts(
        logged.info.run_id, "aligned_judge/scorer/rules_aligned.yaml", str(tmp_path)
    )
    assert Path(yaml).read_text() == (tmp_path / "aligned" / "scorer" / "rules_aligned.yaml").read_text()
    # Its run directory knows it is logged: `evalframe log-run al/after` would not log it twice.
    assert Journal(tmp_path / "al" / "after").manifest.mlflow_run_id == logged.info.run_id


@pytest.mark.slow
def test_aligning_the_run_of_a_trace_dataset_learns_from_the_traces_feedback(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    """People's labels and comments on an app's traces (HUMAN feedback: its value and its rationale, as
    the Review tab or log_feedback leaves them), read by a run of dataset=mlflow_traces and aligned with
    `align run_id=`, the way align's refusal of a trace dataset points to. Before: the comments were not
    read from the traces, so the rule they hold was never learned (kappa after 0)."""
    import mlflow
    from mlflow.entities import AssessmentSource
    from mlflow.tracking import MlflowClient

    from evalframe.tracking.store import fluent_store

    uri, rows = f"sqlite:///{tmp_path / 'mlflow.db'}", labelled_items()
    people = AssessmentSource(source_type="HUMAN", source_id="ann")
    with fluent_store(uri):
        mlflow.set_experiment("app")
        traces = []
        for row in rows:
            with mlflow.start_span(name="answer", span_type="CHAIN") as span:
                span.set_inputs({"question": row["input"]})
                span.set_outputs(row["output"])
                traces.append(span.trace_id)
        mlflow.flush_trace_async_logging()
        for trace_id, row in zip(traces, rows, strict=True):
            mlflow.log_feedback(
                trace_id=trace_id, name="label", value=row["label"], rationale=row["comment"], source=people
            )
    scripted.responder = team_judge
    args = setup(tmp_path, rows)
    on_traces = [*args[: args.index("scorer=rules") + 1], *fake_model(scripted), f"tracking.uri={uri}"]
    traced = ["dataset=mlflow_traces", "dataset.experiment=app", "dataset.human_score=label"]
    assert run_cli([*on_traces, *traced], tmp_path).returncode == 0
    experiment = MlflowClient(uri).get_experiment_by_name("app")
    assert experiment is not None
    [logged] = MlflowClient(uri).search_runs([experiment.experiment_id])
    done = run_cli(["align", f"run_id={logged.info.run_id}", *on_traces, "output_dir=al"], tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "al" / "alignment.json").read_text())
    assert len(found["held_out"]) == 20 and set(found["held_out"]) <= set(traces) and found["leaks"] == []
    kappa = next(c for c in found["figures"]["changes"] if c["metric"] == "kappa")
    assert (kappa["before"], kappa["after"]) == (pytest.approx(0.0), pytest.approx(1.0))
