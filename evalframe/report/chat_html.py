"""A conversation item in report.html: the chat as bubbles (user, assistant, tool; the system message
folded away), and beside each assistant turn what every scorer's judge said of it (verdict, score,
reason: `details["turns"]`), or that the turn was cut from that judge's prompt.

Like the rest of the page: no JavaScript (the system message folds with <details>), and every text from
the dataset, the target or the judge is HTML-escaped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from evalframe.results.scores import ItemResult, ScoreResult, turn_verdicts

# A message longer than this shows its start and folds the rest (chats hold long answers).
FOLD_CHARS = 1200
# Conversations shown as chats on one page: each is some 5 KB of HTML at 10 messages, so 2,000 would
# add 10 MB (bench/bench_chat_report.py); past this the page says so, and results.jsonl holds them all.
MAX_CHATS = 200

CSS = """
.chat{border:1px solid #d6dae3;border-radius:6px;padding:8px 12px;margin:10px 0;max-width:1100px}
.chat h3{font-size:15px;margin:2px 0 6px}
.turn{display:grid;grid-template-columns:minmax(0,600px) minmax(0,440px);gap:12px;margin:6px 0}
.bubble{border-radius:10px;padding:6px 10px;white-space:pre-wrap;word-break:break-word;font-size:13px}
.bubble.user{background:#e8effd;margin-right:60px}.bubble.assistant{background:#eaf6ee;margin-left:60px}
.bubble.tool{background:#f3f3f3;font-family:ui-monospace,monospace;font-size:12px;margin-left:60px}
.bubble .who{font-size:11px;color:#5b6478;white-space:normal}
.bubble code{display:block;font-size:12px;color:#364152;margin-top:4px}
.chat details.system{font-size:12px;color:#5b6478;white-space:pre-wrap;margin:4px 0}
.verdict{font-size:12px;border-left:3px solid #98a2b3;padding:2px 8px;margin:0 0 4px;white-space:pre-wrap}
.verdict.pass{border-color:#12b76a}.verdict.fail{border-color:#f04438}.verdict.part{border-color:#f79009}
.verdict.cut{color:#5b6478;font-style:italic}
"""


def _fold(content: str) -> str:
    if len(content) <= FOLD_CHARS:
        return escape(content)
    return (
        f"{escape(content[:FOLD_CHARS])}… <details><summary>all {len(content)} characters</summary>"
        f"{escape(content)}</details>"
    )


def _calls(message: Mapping[str, Any]) -> str:
    """The tool calls a turn made, one line each: `calls name({"arg": ...})`."""
    calls = message.get("tool_calls") or []
    lines = []
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, Mapping):
            arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            lines.append(f"<code>→ calls {escape(str(call.get('name')))}({escape(arguments)})</code>")
    return "".join(lines)


def _bubble(number: int, message: Mapping[str, Any]) -> str:
    role = str(message.get("role"))
    content = str(message.get("content") or "")
    if role == "system":  # frames every turn, but long and the same across items: folded away
        return (
            f'<details class="system"><summary>[{number}] system message</summary>{escape(content)}</details>'
        )
    kind = role if role in ("user", "assistant", "tool") else "tool"
    return (
        f'<div class="bubble {kind}"><div class="who">[{number}] {escape(role)}</div>'
        f"{_fold(content)}{_calls(message)}</div>"
    )


def _judged(result: ScoreResult) -> list[tuple[str, Mapping[str, Any]]]:
    """Each per-turn verdict of a score, with the judge that gave it when several judges or repeats
    did (a panel keeps each judgment's details in details["judgments"])."""
    found = [("", entry) for entry in turn_verdicts(result.details)]
    panel = result.details.get("judgments")
    if found or not isinstance(panel, list):
        return found
    repeats = any(j.repeat for j in result.judgments)
    for j, details in zip(result.judgments, panel, strict=False):
        label = j.judge + (f", repeat {j.repeat + 1}" if repeats else "")
        found += [(label, entry) for entry in turn_verdicts(details)]
    return found


def _kind(score: Any) -> str:
    if not isinstance(score, int | float):
        return ""
    return "pass" if score >= 1 else "fail" if score <= 0 else "part"


def _verdict(scorer: str, label: str, entry: Mapping[str, Any]) -> str:
    score = entry.get("score")
    shown = f" {score:.2f}" if isinstance(score, int | float) else ""
    who = f"{scorer} ({label})" if label else scorer
    return (
        f'<div class="verdict {_kind(score)}"><b>{escape(who)}</b>: {escape(str(entry.get("verdict")))}'
        f"{shown}: {escape(str(entry.get('reason') or ''))}</div>"
    )


def _beside(number: int, item: ItemResult, scorers: Sequence[str]) -> str:
    """What each scorer said of turn `number`, or that its judge never saw it."""
    said = []
    for name in scorers:
        result = item.scores.get(name)
        if result is None:
            continue
        said += [_verdict(name, label, e) for label, e in _judged(result) if e.get("turn") == number]
        if number in result.truncated_turns():
            said.append(f'<div class="verdict cut">{escape(name)}: cut from its judge\'s prompt</div>')
    return "".join(said)


def _score(name: str, result: ScoreResult) -> str:
    if result.not_applicable:
        return f"{escape(name)} n/a"
    if not result.scored:
        return f'{escape(name)} <span class="unscored">unscored</span>'
    return f"{escape(name)} {result.score:.2f}"


def chat(item: ItemResult, scorers: Sequence[str], anchor: str) -> str:
    """A conversation item as a chat with its verdicts beside their turns; "" for a single-turn item.
    `anchor` is the element id the items table links to."""
    if not item.conversation:
        return ""
    turns = []
    for number, message in enumerate(item.conversation, start=1):  # Turn.number: 1-based, as given
        if not isinstance(message, Mapping):
            continue
        turns.append(
            f'<div class="turn">{_bubble(number, message)}<div>{_beside(number, item, scorers)}</div></div>'
        )
    scores = "; ".join(_score(n, item.scores[n]) for n in scorers if n in item.scores)
    return (
        f'<div class="chat" id="{escape(anchor)}"><h3>{escape(item.id)}</h3>'
        f'<div class="meta">{scores}</div>{"".join(turns)}</div>'
    )


def shown(items: Sequence[ItemResult]) -> list[int]:
    """The positions in `items` of the conversations shown as chats: the first MAX_CHATS of them."""
    return [i for i, item in enumerate(items) if item.conversation][:MAX_CHATS]


def chats(items: Sequence[ItemResult], scorers: Sequence[str]) -> str:
    """The first MAX_CHATS conversations of `items`, each as a chat; "" when no item has one."""
    every, most = sum(1 for item in items if item.conversation), MAX_CHATS
    if not every:
        return ""
    note = (
        f'<p class="note">The first {most} of {every} conversations; every one is in results.jsonl next to '
        "this file (each item's <code>conversation</code>).</p>"
        if every > most
        else ""
    )
    chats = "".join(chat(items[i], scorers, anchor(i)) for i in shown(items))
    return f"<h2>Conversations ({every})</h2>{note}{chats}"


def anchor(position: int) -> str:
    """The element id of the chat of the item at `position` in the table (ids are data: not used)."""
    return f"chat-{position}"
