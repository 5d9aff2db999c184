"""Headless Chromium for the tests that look at MLflow's UI as a person does (selenium + chromedriver):
the browser itself is a fixture (tests/e2e/conftest.py); these are the steps every such test takes."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"  # screenshots, for a person to look at
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT = 90  # seconds for a page to render: two cores shared with the server and the run


@contextlib.contextmanager
def chromium_driver() -> Iterator[Any]:
    """A headless Chromium with a profile of its own, always quit after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="chromium-")
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-quic",
        "--no-first-run",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=2000,1100",
    ):
        options.add_argument(arg)
    # The driver's path is given, so selenium never tries to download one.
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def page_text(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def wait_for_text(driver: Any, *texts: str) -> str:
    """The page's visible text once every one of `texts` is on it (the UI renders asynchronously)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, WAIT).until(lambda d: all(t in page_text(d) for t in texts))
    except TimeoutException:
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "failed.png"))
        missing = [t for t in texts if t not in page_text(driver)]
        raise AssertionError(
            f"not on the page after {WAIT}s: {missing}\n{page_text(driver)[:2000]}"
        ) from None
    return page_text(driver)


def click(driver: Any, element: Any) -> None:
    """A real pointer click: the UI's tabs react to pointer events, not to element.click() from script."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element)
    ActionChains(driver).move_to_element(element).click().perform()


def close_assistant(driver: Any, url: str) -> None:
    """The UI opens its chat assistant on first load, over a third of the page: remember it closed."""
    driver.get(url)
    driver.execute_script(
        "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
        "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
    )
