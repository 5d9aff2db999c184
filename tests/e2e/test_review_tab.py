"""The review loop as a reviewer sees it: a panel's run logged to a real `mlflow server`, its most
disputed items pushed (`evalframe review push`), and headless Chromium on the experiment's Review tab:
the queue is there with its items, and the question is factuality's, its choices the judge's own.
The screenshot, test-artifacts/review_tab.png, is the README's picture (a copy:
evalframe/resources/review-tab.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalframe.tracking.store import fluent_store
from tests.cli.test_review import _evaluated
from tests.conftest import run_cli
from tests.e2e.browser import ARTIFACTS, click, close_assistant, wait_for_text
from tests.mlflow_server import mlflow_server
from tests.scripted import ScriptedModel
from tests.test_readme import README

pytestmark = pytest.mark.slow


def test_the_queue_and_its_questions_in_mlflows_review_tab(
    scripted: ScriptedModel, browser: Any, tmp_path: Path
) -> None:
    from mlflow.genai import review_queues as rq
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path) as url:
        _, run_id = _evaluated(scripted, tmp_path, url)
        push = [
            "review",
            "push",
            f"run_id={run_id}",
            "queue=factuality-check",
            "size=5",
            f"tracking.uri={url}",
        ]
        done = run_cli(push, tmp_path)
        assert done.returncode == 0, done.stderr
        experiment = MlflowClient(url).get_run(run_id).info.experiment_id

        ARTIFACTS.mkdir(exist_ok=True)
        close_assistant(browser, url)
        with fluent_store(url):
            queue = rq.get_review_queue(name="factuality-check", experiment_id=experiment).queue_id
        tab = f"{url}/#/experiments/{experiment}/review-queue"
        browser.get(tab)
        wait_for_text(browser, "factuality-check")
        browser.save_screenshot(str(ARTIFACTS / "review_queues.png"))
        # The queue's first item, as a reviewer starts on it: the trace, and the question made from
        # factuality's reply schema with the judge's five choices.
        browser.get(f"{tab}?selectedQueueId={queue}&startReview=true")
        wait_for_text(browser, "factuality", "Question?", "Select an option")
        picker = browser.find_elements(By.XPATH, "//*[normalize-space()='Select an option']")[-1]
        click(browser, picker)
        wait_for_text(browser, "same", "subset", "superset", "disagree", "immaterial")
        browser.save_screenshot(str(ARTIFACTS / "review_tab.png"))
    assert "review-tab.png" in README.read_text()
