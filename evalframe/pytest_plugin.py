"""pytest plugin: evaluate in a test, assert on the scores, and see why when it fails.

    def test_answers(evalframe_eval):
        result = evalframe_eval(QA, "answer_similarity", target=my_agent, model="gpt")
        assert result.mean("answer_similarity") > 0.8

`evalframe_eval` takes `evaluate`'s arguments and writes each run under the test's tmp_path. When the
test fails, its report gets a section per run: the summary table, the worst items with their reasons,
and where the full results are. Loaded through the `pytest11` entry point once evalframe is installed;
from a checkout, `-p evalframe.pytest_plugin` or `pytest_plugins = ["evalframe.pytest_plugin"]`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from evalframe.api import Evaluation, evaluate

RUNS = pytest.StashKey[list[Evaluation]]()
WORST = 10  # items shown with their reasons in a failure report; the rest are in the run directory


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "evalframe_report_items",
        f"how many of the worst items a failing evalframe test reports with reasons (default {WORST})",
        default=str(WORST),
    )


@pytest.fixture
def evalframe_eval(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Evaluation]]:
    """`evaluate` for a test: each run goes to its own directory under the test's temporary directory
    (kept by pytest for the last runs), unless `output_dir=` says otherwise."""
    runs = request.node.stash.setdefault(RUNS, [])

    def run(*args: Any, **options: Any) -> Evaluation:
        if "output_dir" not in options and not options.get("resume"):
            options["output_dir"] = tmp_path_factory.mktemp("evalframe", numbered=True)
        result = evaluate(*args, **options)
        runs.append(result)
        return result

    yield run


def failure_report(result: Evaluation, worst: int = WORST) -> str:
    """What a failing test shows about one run: the summary, the worst items and where the rest is."""
    shown = min(worst, len(result.result.items))
    where = [f"results: {result.results_file}"]
    if result.report_path:
        where.append(f"report: {result.report_path}")
    if result.run_id:
        where.append(f"MLflow run: {result.run_id} ({result.config['tracking']['uri']})")
    return "\n\n".join(
        [
            result.summary(),
            f"The {shown} lowest-scoring of {len(result.result.items)} items:",
            result.reasons(worst_first=True, limit=shown),
            "\n".join(where),
        ]
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    runs = item.stash.get(RUNS, [])
    if runs and report.when == "call":
        # Into the JUnit XML (--junitxml, which reads them from the teardown report), for CI systems
        # that link artifacts.
        item.user_properties += [("evalframe_run_dir", str(result.run_dir)) for result in runs]
        if report.failed:
            worst = int(item.config.getini("evalframe_report_items"))
            for n, result in enumerate(runs, start=1):
                title = f"evalframe run {n} of {len(runs)}: {result.run_dir}"
                report.sections.append((title, failure_report(result, worst)))
    return report
