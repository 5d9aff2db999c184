"""The pytest plugin: `evalframe_eval` in a user's test suite, run by pytest's own pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
# In a subprocess: an in-process pytester run unloads the modules it imported (numpy among them),
# and numpy cannot be loaded twice in one process.
pytestmark = pytest.mark.slow

SUITE = """
import pytest

QA = [
    {"id": "fr", "input": "Capital of France?", "ground_truth": "Paris"},
    {"id": "de", "input": "Capital of Germany?", "ground_truth": "Berlin"},
    {"id": "it", "input": "Capital of Italy?", "ground_truth": "Rome"},
]


def agent(question):
    return {"Capital of France?": "Paris", "Capital of Germany?": "Bonn"}.get(question, "no idea")


def test_good_enough(evalframe_eval):
    result = evalframe_eval(QA, "token_f1", target=agent)
    assert result.mean("token_f1") > 0.3


def test_too_strict(evalframe_eval):
    result = evalframe_eval(QA, ["exact_match", "token_f1"], target=agent)
    assert result.mean("exact_match") > 0.8


async def answer_async(question):
    return agent(question)


def test_two_runs_in_one_test(evalframe_eval):
    evalframe_eval(QA[:1], "exact_match", target=agent)
    second = evalframe_eval(QA, "exact_match", target=answer_async)
    assert second.mean("exact_match") == 1.0
"""


def test_a_failing_threshold_shows_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    junit = pytester.path / "junit.xml"
    outcome = pytester.runpytest_subprocess("-p", "evalframe.pytest_plugin", f"--junitxml={junit}")
    outcome.assert_outcomes(passed=1, failed=2)
    out = outcome.stdout.str()
    # The failing test's report: the summary table, the worst items with reasons, where the rest is.
    section = out.split("evalframe run 1 of 1")[1].split("short test summary")[0]
    assert "exact_match  0.333" in section and "token_f1" in section
    assert "95% CI" in section and "[0.000, 1.000]" in section  # 3 items: an interval as wide as can be
    assert section.index("## de") < section.index("## fr")  # worst first: "Bonn" for Berlin
    assert "**Output:** Bonn" in section and "- **exact_match** 0.00:" in section
    assert "results: " in section and "results.jsonl" in section
    # A passing test reports nothing; two runs in one test get a section each.
    assert "test_good_enough" not in out.split("FAILURES")[1]
    assert "evalframe run 1 of 2" in out and "evalframe run 2 of 2" in out
    # The run directories are in the JUnit XML for CI systems that link artifacts.
    assert junit.read_text().count('name="evalframe_run_dir"') == 1 + 1 + 2


def test_report_length_is_configurable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\nevalframe_report_items = 1\n")
    outcome = pytester.runpytest_subprocess("-p", "evalframe.pytest_plugin", "-k", "too_strict")
    out = outcome.stdout.str()
    assert "The 1 lowest-scoring of 3 items" in out
    assert "## de" in out and "## fr" not in out
