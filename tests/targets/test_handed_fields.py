"""Live targets hand over what they retrieved and called: a Python function returning a mapping, a
service's reply read at configured paths. The RAG and tool-call scorers then judge a live application,
with no such column in the dataset, against the scripted judge and a real local HTTP service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalframe import evaluate
from evalframe.errors import ConfigError
from evalframe.targets import HTTPTarget, PythonTarget
from evalframe.targets.http import ReplyError, extract
from tests.conftest import compose, fake_model, run_cli
from tests.fake_judge import FENCE, judge, units, words
from tests.scripted import ScriptedModel
from tests.targets.conftest import Call, Reply, Service
from tests.targets.test_targets import LENIENT
from tests.testserver import FakeRequest

# A help desk's documents, and what its retriever returns for each country: in this rank order.
DOCS = {
    "d-paris": "Paris is the capital of France.",
    "d-berlin": "Berlin is the capital of Germany.",
    "d-rome": "Rome is the capital of Italy.",
    "d-trains": "Trains to Germany leave from Paris Est.",
}
RETRIEVED = {"France": ["d-paris"], "Germany": ["d-trains", "d-berlin"], "Italy": ["d-rome", "d-paris"]}
ANSWER = {"France": "d-paris", "Germany": "d-berlin", "Italy": "d-rome"}  # the document it answers from
# The dataset: questions, references and expected calls; nothing the app retrieves or calls.
ROWS = [
    {
        "id": country[:2].lower(),
        "input": f"What is the capital of {country}?",
        "ground_truth": DOCS[ANSWER[country]].split()[0],
        "reference_context_ids": [ANSWER[country]],
        "expected_tool_calls": [{"name": "search", "arguments": {"country": country}}],
    }
    for country in RETRIEVED
]
SCORERS = "scorer=[faithfulness,context_precision_ids,tool_call_accuracy]"
PROVIDES = "target.provides=[contexts,context_ids,tool_calls]"
calls: list[str] = []  # the questions the functions below were asked


def country_of(question: str) -> str:
    return next(c for c in RETRIEVED if c in question)


def rag(question: str) -> dict[str, Any]:
    """A RAG app: retrieves, calls a tool, answers from the first document."""
    calls.append(question)
    country = country_of(question)
    ids = RETRIEVED[country]
    return {
        "output": DOCS[ANSWER[country]],
        "contexts": [DOCS[i] for i in ids],
        "context_ids": ids,
        "tool_calls": [{"name": "search", "arguments": {"country": country}}],
    }


def grounded_judge(request: FakeRequest) -> str | dict[str, Any]:
    """A literal-minded judge of grounded answers: the answer's sentences are its claims, and a claim is
    supported when one document holds every word of it, else not found."""
    properties = set((request.schema or {}).get("properties", {}))
    user = next((m["content"] for m in request.messages if m["role"] == "user"), "")
    blocks = FENCE.findall(user)
    if "statements" in properties:
        return {"statements": units(next(b for label, _, b in blocks if label == "ANSWER"))}
    if "verdicts" in properties:
        documents = [words(b) for label, _, b in blocks if label == "DOCUMENT"]
        claims = json.loads(next(b for label, _, b in blocks if label == "CLAIMS"))
        return {
            "verdicts": {
                str(i): {
                    "reason": "read in the documents",
                    "verdict": "supported" if any(words(c) <= d for d in documents) else "not_found",
                }
                for i, c in enumerate(claims)
            }
        }
    return judge(request)


def documents_judged(scripted: ScriptedModel) -> dict[str, list[str]]:
    """The documents each verdict request showed the judge, in the order shown, by its first claim."""
    seen = {}
    for request in scripted.requests:
        blocks = FENCE.findall(next(m["content"] for m in request.messages if m["role"] == "user"))
        if any(label == "DOCUMENT" for label, _, _ in blocks):
            claims = json.loads(next(b for label, _, b in blocks if label == "CLAIMS"))
            seen[claims[0]] = [b for label, _, b in blocks if label == "DOCUMENT"]
    return seen


def run_rag(tmp_path: Path, scripted: ScriptedModel, *extra: str, rows: list[dict[str, Any]] = ROWS) -> Any:
    """`evalframe` on the rows with the three scorers and target=python, in process."""
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["dataset=jsonl", f"dataset.path={path}", SCORERS, *fake_model(scripted), "tracking=none"]
    return run_cli([*args, "target=python", *extra], tmp_path)


# --- python ----------------------------------------------------------------------------------------


def test_a_python_rag_function_is_judged_on_what_it_retrieved_and_called(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = grounded_judge
    rows = [{**ROWS[0], "contexts": ["A stale chunk the dataset kept."]}, *ROWS[1:]]
    done = run_rag(tmp_path, scripted, f"target.fn={__name__}:rag", PROVIDES, rows=rows)
    assert done.returncode == 0, done.stderr
    [journal] = tmp_path.glob("outputs/*/*/results.jsonl")
    items = {i["id"]: i for i in map(json.loads, journal.read_text().splitlines())}
    scores = {i: {n: s["score"] for n, s in item["scores"].items()} for i, item in items.items()}
    # Every claim is in a document the function retrieved; Germany's retrieval ranked a miss first
    # (precision 1/2) and Italy's brought an extra one; every tool call is the expected one.
    assert scores == {
        "fr": {"faithfulness": 1.0, "context_precision_ids": 1.0, "tool_call_accuracy": 1.0},
        "ge": {"faithfulness": 1.0, "context_precision_ids": 0.5, "tool_call_accuracy": 1.0},
        "it": {"faithfulness": 1.0, "context_precision_ids": 0.5, "tool_call_accuracy": 1.0},
    }
    # The judge read each question's documents as the function ranked them, not the dataset's.
    shown = documents_judged(scripted)
    assert shown == {
        "Paris is the capital of France": [DOCS["d-paris"]],
        "Berlin is the capital of Germany": [DOCS["d-trains"], DOCS["d-berlin"]],
        "Rome is the capital of Italy": [DOCS["d-rome"], DOCS["d-paris"]],
    }
    # What it handed over is on the item as a dataset's columns would be, and in its step's reply.
    assert items["fr"]["record"]["contexts"] == [DOCS["d-paris"]]
    assert items["ge"]["record"]["context_ids"] == ["d-trains", "d-berlin"]
    assert items["ge"]["target_step"]["reply"]["tool_calls"] == [
        {"name": "search", "arguments": {"country": "Germany"}}
    ]


def test_without_provides_the_missing_column_stops_the_run_saying_how(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    calls.clear()
    done = run_rag(tmp_path, scripted, f"target.fn={__name__}:rag")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "no contexts, which scorer faithfulness needs" in line
    assert "target.provides=[contexts] for target=python" in line
    assert calls == [] and scripted.count() == 0  # before the function or the judge was asked


def some_without_contexts(question: str) -> dict[str, Any]:
    """Hands over no contexts for Germany, and an empty list (nothing retrieved) for Italy."""
    reply = rag(question)
    if "Germany" in question:
        del reply["contexts"]
    if "Italy" in question:
        reply["contexts"] = []
    return reply


def test_a_reply_without_a_promised_field_leaves_that_item_unscored(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.responder = grounded_judge
    target = PythonTarget(some_without_contexts, provides=["contexts", "context_ids", "tool_calls"])
    result = evaluate(
        ROWS, "faithfulness", target=target, model=judge_model(), overrides=LENIENT, output_dir=tmp_path
    )
    items = result.items.set_index("id")
    assert items.loc["fr", "faithfulness/score"] == 1.0
    error = items.loc["ge", "faithfulness/error"]
    assert error.startswith(
        f"target: target.fn={__name__}:some_without_contexts handed over no contexts for "
    )
    assert "item ge, and scorer faithfulness needs them" in error
    # Nothing retrieved is an answer: the scorer's empty rule decides it (not applicable by default).
    assert "not applicable" in items.loc["it", "faithfulness/reason"]
    assert result.summaries["faithfulness"].unscored == 1


def judge_model() -> dict[str, Any]:
    return {"name": "scripted/judge", "api_key_env": None, "timeout": 10}


def answers(reply: Any) -> Any:
    return lambda question: reply


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            {"answer": "Paris"},
            r"with the unknown key 'answer' \(keys: answer\); return the answer, or a mapping",
        ),
        ({"contexts": ["x"]}, r"with no 'output' \(keys: contexts\)"),
        (
            {"output": "Paris", "contexts": "Paris is..."},
            r"for item fr: 'contexts' must be a list, got str 'Paris is...'",
        ),
        ({"output": "Paris", "context_ids": [None]}, r"'context_ids'\[0\] is null"),
        ({"output": "Paris", "tool_calls": [{"arguments": {}}]}, r"'tool_calls' holds .* not a tool call"),
        ({"output": "Paris", "contexts": [float("nan")]}, r"'contexts'\[0\] is nan, not a finite number"),
    ],
)
def test_a_mapping_that_breaks_the_contract_stops_the_run_naming_the_function_and_key(
    scripted: ScriptedModel, tmp_path: Path, reply: dict[str, Any], message: str
) -> None:
    fn = answers(reply)
    with pytest.raises(
        ConfigError, match=rf"^target\.fn={__name__}:answers.<locals>.<lambda> returned .*{message}"
    ):
        evaluate(
            ROWS[:1], "faithfulness", target=PythonTarget(fn, provides=["contexts"]), model=judge_model()
        )
    assert scripted.count() == 0  # the first item's reply: no judge was paid to find out


def test_a_broken_contract_from_the_command_line_is_one_line_and_exit_2(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    done = run_rag(tmp_path, scripted, f"target.fn={__name__}:unknown_key", PROVIDES)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: target.fn={__name__}:unknown_key returned a mapping for item ")
    assert "the unknown key 'docs'" in line and scripted.count() == 0
    bad = run_rag(
        tmp_path, scripted, f"target.fn={__name__}:rag", "target.provides=[contexts,expected_tool_calls]"
    )
    assert (
        bad.returncode == 2 and "target.provides=['contexts', 'expected_tool_calls']: a list of" in bad.stderr
    )


def unknown_key(question: str) -> dict[str, Any]:
    return {"output": "Paris", "docs": ["Paris is the capital of France."]}


# --- http ------------------------------------------------------------------------------------------


def rag_service(call: Call) -> Reply:
    """The same app as a service: the answer, its sources as objects, and OpenAI-style tool calls."""
    reply = rag(call.body["input"])
    sources = [{"id": i, "text": t} for i, t in zip(reply["context_ids"], reply["contexts"], strict=True)]
    tool_calls = [
        {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for c in reply["tool_calls"]
    ]
    return 200, {"answer": reply["output"], "sources": sources, "message": {"tool_calls": tool_calls}}, {}


HTTP_PATHS: dict[str, Any] = {"contexts_path": "sources.*.text", "context_ids_path": "sources.*.id"}


def test_an_http_service_hands_over_its_sources_and_tool_calls(
    scripted: ScriptedModel, tmp_path: Path, service: Service
) -> None:
    scripted.responder = grounded_judge
    service.reply = rag_service
    target = HTTPTarget(url=service.url, **HTTP_PATHS, tool_calls_path="message.tool_calls")
    scorers = ["faithfulness", "context_precision_ids", "tool_call_accuracy"]
    result = evaluate(ROWS, scorers, target=target, model=judge_model(), output_dir=tmp_path)
    assert result.mean("faithfulness") == 1.0 and result.mean("tool_call_accuracy") == 1.0
    assert result.mean("context_precision_ids") == pytest.approx(2 / 3)
    assert documents_judged(scripted)["Berlin is the capital of Germany"] == [
        DOCS["d-trains"],
        DOCS["d-berlin"],
    ]


def test_a_reply_without_a_path_leaves_that_item_unscored_saying_which(
    scripted: ScriptedModel, tmp_path: Path, service: Service
) -> None:
    def patchy(call: Call) -> Reply:
        status, body, headers = rag_service(call)
        if "Germany" in call.body["input"]:
            del body["sources"]
        if "Italy" in call.body["input"]:
            body["sources"] = [{"id": "d-rome", "text": DOCS["d-rome"]}, {"id": None}]
        return status, body, headers

    service.reply = patchy
    target = HTTPTarget(url=service.url, **HTTP_PATHS)
    result = evaluate(ROWS, "context_precision_ids", target=target, overrides=LENIENT, output_dir=tmp_path)
    errors = dict(zip(result.items["id"], result.items["context_precision_ids/error"], strict=True))
    assert pd.isna(errors["fr"])
    assert (
        "the reply has no 'sources' at the top level (keys there: answer, message); fix contexts_path"
        in errors["ge"]
    )
    assert "has no 'text' at sources.1 (keys there: id); fix contexts_path" in errors["it"]
    null = HTTPTarget(url=service.url, context_ids_path="sources.*.id")
    ids = evaluate(
        ROWS[2:], "context_precision_ids", target=null, overrides=LENIENT, output_dir=tmp_path / "n"
    )
    assert "'context_ids'[1] is null" in ids.items["context_precision_ids/error"][0]
    assert "(read at context_ids_path=sources.*.id)" in ids.items["context_precision_ids/error"][0]


def test_a_star_takes_every_element_of_a_list() -> None:
    reply = {"sources": [{"id": "a", "meta": {"score": 1}}, {"id": "b", "meta": {"score": 2}}], "n": 1}
    assert extract(reply, "sources.*.id") == ["a", "b"]
    assert extract(reply, "sources.*.meta.score") == [1, 2]
    assert extract(reply, "sources.*") == reply["sources"]
    assert extract({"s": []}, "s.*.id") == []
    with pytest.raises(ReplyError, match=r"has int 1 at n, not a list for '\*'; fix contexts_path"):
        extract(reply, "n.*", "contexts_path")
    with pytest.raises(ReplyError, match=r"no 'id' at sources.1 \(keys there: name\); fix output_path"):
        extract({"sources": [{"id": "a"}, {"name": "b"}]}, "sources.*.id")


def test_the_target_options_compose_and_build_with_the_new_keys() -> None:
    python = compose(["target=python", f"target.fn={__name__}:rag", PROVIDES])["target"]
    built = PythonTarget(**{k: v for k, v in python.items() if k != "_target_"})
    assert built.provides == {"contexts", "context_ids", "tool_calls"}
    http = compose(["target=http", "target.url=http://127.0.0.1:9/a", "target.contexts_path=sources.*.text"])
    target = HTTPTarget(**{k: v for k, v in http["target"].items() if k != "_target_"})
    assert target.provides == {"contexts"} and target.paths == {"contexts": "sources.*.text"}
    assert HTTPTarget(url="http://127.0.0.1:9/a").provides == frozenset()
