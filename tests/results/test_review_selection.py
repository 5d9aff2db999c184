"""Which items `evalframe review push` queues (results/review_selection.py), and the questions and
scales people answer on (results/review_questions.py): pure, on hand-made items."""

from __future__ import annotations

import math

import pytest

from evalframe.errors import ConfigError
from evalframe.results.review_questions import CATEGORICAL, NUMERIC, PASS_FAIL, question
from evalframe.results.review_selection import Candidate, select

N = math.nan


def _c(
    i: int, score: float, judgments: list[float] | None = None, labelled: bool = False, **more: float
) -> Candidate:
    return Candidate(
        id=f"i{i:03d}",
        trace_id=f"tr-{i}",
        scores={"s": score, **more},
        judgments={"s": judgments or []},
        labelled=labelled,
    )


def _ids(chosen: list[Candidate]) -> list[str]:
    return [c.id for c in chosen]


def test_disagreement_takes_the_widest_judgments_then_the_widest_spread_over_scorers() -> None:
    pool = [
        _c(0, 0.5, [0.0, 1.0]),  # judges split: range 1
        _c(1, 0.9, [0.8, 1.0]),  # range 0.2
        _c(2, 0.5, [0.4, 0.6], t=0.0),  # range 0.2, and its two scorers 0.5 apart
        _c(3, 0.7, [0.6, 0.6, N]),  # a judge that failed is no disagreement
        _c(4, 0.5, [1.0, 0.0], labelled=True),  # split too, but labelled already
    ]
    assert _ids(select(pool, 3, "disagreement")) == ["i000", "i002", "i001"]
    assert _ids(select(pool, 5, "disagreement"))[-1] == "i004"  # labelled last, whatever its rank


def test_threshold_takes_the_scores_nearest_a_line_of_their_scorer() -> None:
    pool = [_c(0, 0.95), _c(1, 0.52), _c(2, 0.71), _c(3, 0.1), _c(4, 0.49, labelled=True), _c(5, N)]
    assert _ids(select(pool, 2, "threshold", {"s": [0.5]})) == ["i001", "i002"]
    assert _ids(select(pool, 2, "threshold", {"s": [0.5, 0.9]})) == [
        "i001",
        "i000",
    ]  # 0.02, then 0.05 from 0.9
    assert _ids(select(pool, 6, "threshold", {"s": [0.5]}))[-2:] == ["i005", "i004"]  # unscored, labelled


def test_random_is_seeded_and_spread_over_the_bands_of_score() -> None:
    pool = [_c(i, i / 100) for i in range(100)]
    first = select(pool, 10, "random", seed=1)
    assert _ids(first) == _ids(select(pool, 10, "random", seed=1)) and len(set(_ids(first))) == 10
    assert _ids(first) != _ids(select(pool, 10, "random", seed=2))
    for seed in range(20):  # two from each fifth of the scale, whatever the seed
        bands = sorted(int(c.scores["s"] * 5) for c in select(pool, 10, "random", seed=seed))
        assert bands == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    labelled = [_c(i, i / 10, labelled=i < 8) for i in range(10)]
    assert sorted(_ids(select(labelled, 3, "random"))[:2]) == ["i008", "i009"]  # the unlabelled first


def test_questions_are_the_judges_reply_schema() -> None:
    factuality = {"output": {"type": "choice", "choices": {"same": 1.0, "subset": 0.4, "disagree": 0.0}}}
    q = question("factuality", factuality)
    assert (q.kind, q.options) == (CATEGORICAL, ("same", "subset", "disagree"))
    assert q.score("subset") == 0.4
    verdict = question("v", {"output": {"type": "choice", "choices": {"no": 0.0, "yes": 1.0}}, "scale": 1})
    assert (verdict.kind, verdict.options) == (PASS_FAIL, ("yes", "no"))  # the one scoring 1 is the thumbs-up
    assert (verdict.score(True), verdict.score(False), verdict.score("no")) == (1.0, 0.0, 0.0)
    rating = question("r", {"output": {"type": "number", "min": 1, "max": 5}})
    assert (rating.kind, rating.low, rating.high, rating.score(4)) == (NUMERIC, 1.0, 5.0, 0.75)
    computed = question("token_f1", {"_target_": "evalframe.scorers.reference.TokenF1"})
    assert (computed.kind, computed.low, computed.high, computed.score(0.25)) == (NUMERIC, 0.0, 1.0, 0.25)


@pytest.mark.parametrize(
    ("spec", "answer", "message"),
    [
        ({"output": {"type": "number", "min": 1, "max": 5}}, 6, "6 is outside s's scale (1 to 5)"),
        (
            {"output": {"type": "choice", "choices": {"a": 1.0, "b": 0.5}}},
            "c",
            "'c' is outside s's scale (a or b)",
        ),
        ({}, True, "True is outside s's scale (0 to 1)"),
    ],
)
def test_an_answer_outside_the_scale_is_refused(
    spec: dict[str, object], answer: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        question("s", spec).score(answer)


def test_disagreement_finds_judge_errors_at_least_twice_as_often_as_random() -> None:
    """Known answers: 200 items, a panel of two judges. On 40 items they split (one right, one wrong:
    the mean, 0.5, passes at the 0.5 line, wrong for the 20 of them that should fail); on the other 160
    they agree, wrongly on 5. 20 labels chosen by disagreement find the judges' errors far more often
    than 20 chosen at random (averaged over 50 seeds)."""
    pool, wrong = [], set()
    for i in range(200):
        truth = float(i % 2)  # every other item should pass
        if i < 40:  # split: one judge right, one wrong
            judgments, score = [truth, 1 - truth], 0.5
        elif i < 45:  # both wrong, in agreement: no rule can see these
            judgments, score = [1 - truth, 1 - truth], 1 - truth
        else:
            judgments, score = [truth, truth], truth
        if (score >= 0.5) != (truth >= 0.5):
            wrong.add(f"i{i:03d}")
        pool.append(_c(i, score, judgments))
    found = sum(c.id in wrong for c in select(pool, 20, "disagreement"))
    sampled = sum(sum(c.id in wrong for c in select(pool, 20, "random", seed=s)) for s in range(50)) / 50
    assert (
        len(wrong) == 25 and found == 10
    )  # half the split items are wrong: each of those 20 labels is a coin toss
    assert found >= 2 * sampled, (found, sampled)  # 10 against about 2.5
