"""A conversation item in report.html: a chat with each scorer's verdict beside its assistant turn, read
back by parsing the page (the structure a browser builds, not the strings we wrote)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from evalframe.report import chat_html, html as html_report
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult
from tests.conftest import run_cli

HOSTILE = "<script>alert('x')</script>"
VOID = {"meta", "br", "img", "hr", "input", "link"}
CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel bot. Never book meat for vegetarians."},
    {"role": "user", "content": f"I'm Ann, vegetarian. {HOSTILE}"},
    {"role": "assistant", "content": "Hi Ann!"},
    {"role": "user", "content": "Book dinner in Paris."},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "book", "arguments": {"city": "Paris"}}]},
    {"role": "tool", "content": "booked: Le Boeuf"},
    {"role": "assistant", "content": "Booked a steakhouse."},
]


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def find(self, tag: str, cls: str | None = None) -> list[Node]:
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if c.tag == tag and (cls is None or cls in c.classes):
                    found.append(c)
                found += c.find(tag, cls)
        return found


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.stack == [tree.root], "every element is closed"
    return tree.root


def turns(score: float = 2 / 3, cut: list[int] | None = None) -> ScoreResult:
    said = [(3, "kept", 1.0, "greets Ann"), (5, "kept", 1.0, "books"), (7, "forgot", 0.0, f"steak {HOSTILE}")]
    details: dict[str, Any] = {
        "turns": [{"turn": n, "verdict": v, "score": s, "reason": r} for n, v, s, r in said]
    }
    if cut:
        details["truncated_turns"] = cut
    return ScoreResult(score=score, reason="2 of 3 turns", details=details)


def result() -> RunResult:
    chat = ItemResult(
        "c1",
        CHAT[1]["content"],
        None,
        "Booked a steakhouse.",
        scores={"knowledge_retention": turns(cut=[2]), "exact_match": ScoreResult(0.0, "differs")},
        conversation=CHAT,
    )
    plain = ItemResult(
        "q1",
        "2+2?",
        "4",
        "4",
        scores={"knowledge_retention": ScoreResult(1.0, "ok"), "exact_match": ScoreResult(1.0, "")},
    )
    return RunResult(items=[plain, chat], scorers=["knowledge_retention", "exact_match"])


def test_a_conversation_shows_as_a_chat_with_each_verdict_beside_its_turn():
    page = parse(html_report.run_report(result(), "chats").html)
    [chat] = page.find("div", "chat")
    assert chat.attrs["id"] == "chat-1"  # the items table's id links to it
    assert [a.attrs["href"] for a in page.find("a")] == ["#chat-1"]
    rows = chat.find("div", "turn")
    assert len(rows) == len(CHAT)
    # The system message is folded away; the others are bubbles of their role.
    [system] = rows[0].find("details", "system")
    assert "travel bot" in system.text() and not rows[0].find("div", "bubble")
    roles = [row.find("div", "bubble")[0].classes - {"bubble"} for row in rows[1:]]
    assert roles == [{"user"}, {"assistant"}, {"user"}, {"assistant"}, {"tool"}, {"assistant"}]
    assert 'calls book({"city": "Paris"})' in rows[4].text()
    # Beside each judged assistant turn, and only there, the verdict word, score and reason.
    beside = {n: [v.text() for v in row.find("div", "verdict")] for n, row in enumerate(rows, start=1)}
    assert beside[3] == ["knowledge_retention: kept 1.00: greets Ann"]
    assert beside[5] == ["knowledge_retention: kept 1.00: books"]
    assert beside[7] == [f"knowledge_retention: forgot 0.00: steak {HOSTILE}"]
    assert (
        "fail" in rows[6].find("div", "verdict")[0].classes
        and "pass" in rows[2].find("div", "verdict")[0].classes
    )
    # The turn cut from the judge's prompt is marked as such.
    assert beside[2] == ["knowledge_retention: cut from its judge's prompt"]
    assert beside[1] == beside[4] == beside[6] == []
    assert "knowledge_retention 0.67" in chat.text() and "exact_match 0.00" in chat.text()


def test_every_text_of_a_chat_is_escaped():
    html = html_report.run_report(result(), "chats").html
    assert HOSTILE not in html  # in a message, a judge's reason and the items table
    assert not parse(html).find("script")
    assert html.count("&lt;script&gt;") >= 3


def test_a_panels_turn_verdicts_are_each_named_by_judge():
    from evalframe.results.scores import Judgment

    panel = ScoreResult(
        0.5,
        "mean of 2 judges",
        details={
            "judgments": [
                turns().details,
                {"turns": [{"turn": 3, "verdict": "forgot", "score": 0.0, "reason": "b"}]},
            ]
        },
        judgments=[Judgment("gpt", 0, 2 / 3, ""), Judgment("claude", 0, 0.0, "")],
    )
    item = ItemResult("c1", "hi", None, "", scores={"kr": panel}, conversation=CHAT)
    page = parse(html_report.run_report(RunResult(items=[item], scorers=["kr"]), "t").html)
    third = page.find("div", "turn")[2]
    assert [v.text() for v in third.find("div", "verdict")] == [
        "kr (gpt): kept 1.00: greets Ann",
        "kr (claude): forgot 0.00: b",
    ]


@pytest.mark.slow
def test_a_run_over_conversations_shows_each_as_a_chat_without_turn_verdicts(tmp_path: Path):
    """Through `evalframe run`: a dataset of conversations (its messages in DeepEval's and RAGAS' shapes)
    scored by a single-turn scorer; results.jsonl keeps each judged conversation, and report.html shows
    it as a chat though no judge gave a verdict per turn."""
    ragas = [{"type": "human", "content": "Capital of France?"}, {"type": "ai", "content": "Paris"}]
    deepeval = [
        {"role": "user", "content": "And of Italy?"},
        {
            "role": "assistant",
            "content": "",
            "tools_called": [{"name": "atlas", "input_parameters": {"q": "Italy"}}],
        },
        {"role": "assistant", "content": f"Milan {HOSTILE}"},
    ]
    rows = [
        {"id": "fr", "messages": ragas, "answer": "Paris"},
        {"id": "it", "messages": deepeval, "answer": "Rome"},
    ]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = run_cli(
        [
            "scorer=exact_match",
            "tracking=none",
            f"dataset.path={data}",
            "dataset.columns.input=null",
            "dataset.columns.ground_truth=answer",
            "dataset.columns.output=null",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = (tmp_path / "outputs").glob("*/*")
    stored = {r["id"]: r for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}
    assert stored["fr"]["conversation"] == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
    ]
    assert stored["it"]["conversation"][1]["tool_calls"] == [{"name": "atlas", "arguments": {"q": "Italy"}}]
    assert (
        stored["fr"]["scores"]["exact_match"]["score"] == 1.0
        and stored["it"]["scores"]["exact_match"]["score"] == 0.0
    )
    html = (run_dir / "report.html").read_text()
    assert HOSTILE not in html
    chats = parse(html).find("div", "chat")
    assert [c.find("h3")[0].text() for c in chats] == ["fr", "it"]
    it = chats[1]
    assert [t.text() for t in it.find("div", "who")] == ["[1] user", "[2] assistant", "[3] assistant"]
    assert 'calls atlas({"q": "Italy"})' in it.text() and f"Milan {HOSTILE}" in it.text()
    assert not it.find("div", "verdict") and "exact_match 0.00" in it.text()
    # Judged again from that run (dataset=run, as rescore reads a logged run): the same conversations.
    again = run_cli(
        ["scorer=exact_match", "tracking=none", "dataset=run", f"dataset.path={run_dir}"], cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout + again.stderr
    [second] = [d for d in (tmp_path / "outputs").glob("*/*") if d != run_dir]
    restored = {r["id"]: r for r in map(json.loads, (second / "results.jsonl").read_text().splitlines())}
    assert {k: r["conversation"] for k, r in restored.items()} == {
        k: r["conversation"] for k, r in stored.items()
    }
    assert len(parse((second / "report.html").read_text()).find("div", "chat")) == 2


def test_past_the_cap_the_page_shows_the_first_chats_and_says_where_the_rest_are(monkeypatch):
    items = [ItemResult(f"c{i}", "hi", None, "", scores={"kr": turns()}, conversation=CHAT) for i in range(3)]
    monkeypatch.setattr(chat_html, "MAX_CHATS", 2)
    page = parse(html_report.run_report(RunResult(items=items, scorers=["kr"]), "t").html)
    assert [c.attrs["id"] for c in page.find("div", "chat")] == ["chat-0", "chat-1"]
    assert [a.attrs["href"] for a in page.find("a")] == ["#chat-0", "#chat-1"]  # no link to a missing chat
    assert "The first 2 of 3 conversations" in page.text() and "results.jsonl" in page.text()
