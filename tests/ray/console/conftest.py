"""What the console's browser tests share beyond tests/ray's fixtures: each module makes its own
deployment with a console on it (`dep`, through tests.support.console_browser.console_deployment);
these give that console's URL, a headless chromium and where the screenshots go."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.deployment.launcher import Deployment
from tests.support.console_browser import chromium, console_url, screenshot_dir


@pytest.fixture(scope="module")
def url(dep: Deployment) -> str:
    return console_url(dep)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory)
