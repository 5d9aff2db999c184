"""report.html as a person sees it, in Chromium: a long run name wraps in the title instead of widening
the page (before: a horizontal scrollbar, the name running off the right edge)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalframe.report import html as html_report
from evalframe.results.run_result import RunResult
from evalframe.results.scores import ItemResult, ScoreResult

pytestmark = pytest.mark.slow

# A name as a run of many scorers gets: commas and underscores, where a line may not break.
LONG_NAME = "sample-" + ",".join(
    ["answer_similarity", "ground_truth_similarity", "semantic_similarity", "answer_relevancy", "factuality"]
    * 2
)


def test_a_long_run_name_wraps_in_the_title_and_the_page_does_not_scroll_sideways(
    browser: Any, tmp_path: Path
) -> None:
    item = ItemResult("q1", "question", "Paris", "Paris", {"exact_match": ScoreResult(1.0, "equal")})
    html_report.write_run_report(RunResult(items=[item], scorers=["exact_match"]), tmp_path, LONG_NAME)
    browser.set_window_size(1000, 900)
    browser.get((tmp_path / html_report.REPORT).as_uri())
    page, window, title, title_box = browser.execute_script(
        "const h1 = document.querySelector('h1');"
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " h1.scrollWidth, h1.clientWidth];"
    )
    assert browser.find_element("tag name", "h1").text.replace("\n", "") == LONG_NAME
    assert title <= title_box and page <= window, (page, window, title, title_box)
