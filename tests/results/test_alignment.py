"""The pure part of `evalframe align`: which training items become examples, and the held-out figures."""

from __future__ import annotations

import pytest

from evalframe.results import alignment
from evalframe.results.scores import ItemResult, ScoreResult


def item(id: str, human: float, score: float, output: str = "") -> ItemResult:
    return ItemResult(id, f"q {id}", None, output or f"a {id}", {"j": ScoreResult(score, "r")}, human=human)


def test_examples_are_balanced_over_labels_disagreements_first() -> None:
    items = [item(f"p{i}", 2, 1.0) for i in range(6)]  # people 2 (of 0-2), judge agrees
    items += [item("p-wrong", 2, 0.0)]  # people 2, judge 0: a disagreement
    items += [item(f"f{i}", 0, 0.0) for i in range(6)]
    items += [item("f-wrong", 0, 1.0), item("f-half", 0, 0.5)]
    items += [
        item("unscored", 0, float("nan")),
        ItemResult("unlabelled", "q", None, "a", {"j": ScoreResult(1, "r")}),
    ]
    candidates = alignment.labelled(items, "j", (0, 2))
    assert {c.id for c in candidates} == {i.id for i in items} - {"unscored", "unlabelled"}
    chosen = alignment.select(candidates, 4, seed=0)
    # Label by label (0 first), the largest disagreements first, then the rest in a seeded order.
    assert [c.id for c in chosen[:3]] == ["f-wrong", "p-wrong", "f-half"]
    assert sorted(c.human for c in chosen) == [0, 0, 2, 2]
    assert alignment.select(candidates, 4, seed=0) == chosen  # the same labels, the same examples
    assert len({alignment.select(candidates, 4, seed)[3].id for seed in range(10)}) > 1  # seeded order
    assert len(alignment.select(candidates, 100)) == len(candidates)


def test_the_held_out_figures_pair_items_by_id() -> None:
    human = [0, 1] * 10
    before = [item(f"i{n}", h, 1.0) for n, h in enumerate(human)]  # always passes: kappa 0
    after = [item(f"i{n}", h, float(h)) for n, h in reversed(list(enumerate(human)))]  # another order
    found = alignment.held_out(before, after, "j", "j", (0, 1))
    kappa, accuracy = found.change("kappa"), found.change("accuracy")
    assert found.n == 20 and (kappa.before, kappa.after) == (pytest.approx(0.0), pytest.approx(1.0))
    assert accuracy.difference == pytest.approx(0.5) and accuracy.interval.low > 0
    assert kappa.verdict == accuracy.verdict == "better"
    assert found.confusion == {"before": [[0, 10], [0, 10]], "after": [[10, 0], [0, 10]]}
    worse = alignment.held_out(after, before, "j", "j", (0, 1))
    assert worse.change("accuracy").verdict == "worse"
    same = alignment.held_out(before, before, "j", "j", (0, 1))
    assert same.change("accuracy").verdict == "unclear"
