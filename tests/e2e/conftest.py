"""The browser of the tests that look at MLflow's UI (tests/e2e/browser.py has their shared steps)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser import CHROMEDRIVER, CHROMIUM, chromium_driver
from tests.system_packages import require


@pytest.fixture(scope="session")
def chromium() -> None:
    require(["chromium", "chromium-driver"], [CHROMIUM, CHROMEDRIVER])


@pytest.fixture
def browser(chromium: None) -> Iterator[Any]:
    with chromium_driver() as driver:
        yield driver
