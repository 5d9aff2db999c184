"""A run's items as a table, one row per item and columns per scorer: what MLflow's table view
(items.json) and `Evaluation.items` show."""

from __future__ import annotations

import math
import statistics
from typing import Any

from evalframe.data.conversations import conversation_of, transcript
from evalframe.errors import DataError
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult


def items_table(result: RunResult) -> dict[str, list[Any]]:
    """Per-item results as columns (one row per item): what MLflow's table view shows."""
    columns: dict[str, list[Any]] = {"id": [], "input": [], "ground_truth": [], "output": [], "human": []}
    judged = [n for n in result.scorers if any(i.scores[n].verdicts() for i in result.items)]
    for name in result.scorers:
        for key in ("score", "reason", "error", "raw_reply", "cost", "latency"):
            columns[f"{name}/{key}"] = []
        if name in judged:  # the verdicts each score comes from (per claim, statement or chunk)
            columns[f"{name}/verdicts"] = []
    for item in result.items:
        columns["id"].append(item.id)
        columns["input"].append(item.input)
        columns["ground_truth"].append(item.ground_truth)
        columns["output"].append(item.output)
        columns["human"].append(item.human)
        for name in result.scorers:
            r = item.scores[name]
            columns[f"{name}/score"].append(None if not r.scored else r.score)
            columns[f"{name}/reason"].append(r.reason)
            columns[f"{name}/error"].append(r.error)
            failed = next((s for s in r.steps if s.error), None)  # what the judge said, when unusable
            columns[f"{name}/raw_reply"].append(failed.raw if failed else None)
            columns[f"{name}/cost"].append(None if math.isnan(r.usage.cost) else r.usage.cost)
            columns[f"{name}/latency"].append(round(r.latency, 3))
            if name in judged:
                columns[f"{name}/verdicts"].append("\n".join(r.verdicts()) or None)
    _judgment_columns(result, columns)
    _conversation_columns(result, columns)
    for name in result.scorers:
        for figure in result.figures[name]:
            columns[f"{name}/{figure}"] = [
                i.scores[name].details.get("figures", {}).get(figure) for i in result.items
            ]
    return columns


def _judgment_columns(result: RunResult, columns: dict[str, list[Any]]) -> None:
    """Each judge's score (its repeats' mean) and first reason per item, and the repeats' spread."""
    for name in result.scorers:
        labels = list(dict.fromkeys(j.judge for i in result.items for j in i.scores[name].judgments))
        repeated = any(not math.isnan(i.scores[name].repeat_std()) for i in result.items)
        for label in labels if len(labels) > 1 else ():
            scores, reasons = [], []
            for item in result.items:
                mine = [j for j in item.scores[name].judgments if j.judge == label]
                scored = [j for j in mine if not math.isnan(j.score)]
                scores.append(statistics.fmean(j.score for j in scored) if scored else None)
                reasons.append((scored or mine)[0].reason if mine else None)
            columns[f"{name}/judge/{label}/score"] = scores
            columns[f"{name}/judge/{label}/reason"] = reasons
        if repeated:
            stds = [i.scores[name].repeat_std() for i in result.items]
            columns[f"{name}/repeat_std"] = [None if math.isnan(v) else round(v, 4) for v in stds]


def chat_text(item: ItemResult) -> str | None:
    """A conversation item's conversation as the numbered transcript its judges read (`[4] assistant:
    ...`, tool calls on their own lines), so the turn numbers of its verdicts can be looked up."""
    if not item.conversation:
        return None
    try:
        return transcript(conversation_of(item.conversation, "conversation", f"item {item.id}"))
    except DataError:  # an odd record from an older results.jsonl: shown as it is, not lost
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in item.conversation)


def _conversation_columns(result: RunResult, columns: dict[str, list[Any]]) -> None:
    """For a run with conversation items: each one's transcript, and per scorer the turns cut from its
    judge's prompt (the per-turn verdicts themselves are in `<scorer>/verdicts`, `turn 4 forgot: ...`)."""
    if any(i.conversation for i in result.items):
        columns["conversation"] = [chat_text(i) for i in result.items]
    for name in result.scorers:
        cut = [i.scores[name].truncated_turns() for i in result.items]
        if any(cut):
            columns[f"{name}/truncated_turns"] = [", ".join(map(str, c)) or None for c in cut]
