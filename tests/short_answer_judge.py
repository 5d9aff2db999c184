"""A fake judge for short answers such as the SAS pairs ("Isaac Komnenos" vs "Isaac"): every content
word is a semantic unit, so a partly right answer has matched, missing and extra units, and the
penalty weights change how it scores and ranks.

The default fake judge (fake_judge.py) splits text into sentences: a short answer is a single unit,
matched or missing, and every penalty weight gives it the same score, which would make tuning the
weights to human scores a search over a flat line.
"""

from __future__ import annotations

from typing import Any

from tests import fake_judge
from tests.testserver import FakeRequest

# Words people drop without changing a short answer ("the dukes" is "dukes").
STOP_WORDS = {"a", "an", "the", "of", "and", "as", "in", "on", "to", "by", "for"}


def word_units(text: str) -> list[str]:
    words = fake_judge.WORD.findall(text)
    return [w for w in words if w.lower() not in STOP_WORDS] or words


def judge(request: FakeRequest) -> str | dict[str, Any]:
    """Word units; the analysis (exact, missing, extra per word) is the default judge's."""
    if fake_judge.step_of(request) == "SemanticUnits":
        return {"units": word_units(fake_judge.fenced(request)["TEXT"])}
    return fake_judge.judge(request)
