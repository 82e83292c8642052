"""What the console's browser tests share: a deployment with a console on it; Debian's chromium,
headless, through chromium-driver and selenium; where screenshots go; reading a live page's text."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from actors.console.actor import start_console
from actors.console.collector import CollectorPeriods
from actors.deployment.launcher import Deployment
from tests.support.ray_cluster import registered_deployment

LIVE_PERIODS = CollectorPeriods(0.3, 1.0, 2.0)
"""The console's collector periods in these tests (NameServers every 0.3 s, stats every 1 s, long polls of 2 s)."""
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


@contextmanager
def console_deployment(data_dir: Path, periods: CollectorPeriods = LIVE_PERIODS,
                       **deploy: Any) -> Iterator[Deployment]:
    """A deployment whose brokers every NameServer registered (`registered_deployment`'s arguments)
    with a console on it (`console_url`), collecting every `periods`; torn down after the block."""
    with registered_deployment(data_dir, **deploy) as d:
        d.console, d.console_url = start_console(d.spec.namespace, d.spec.namesrv_names, periods=periods)
        yield d


def console_url(dep: Deployment) -> str:
    assert dep.console_url is not None and dep.console_url.startswith("http://127.0.0.1:")
    return dep.console_url


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (the test is skipped when Debian's chromium or its driver is missing)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (run.sh test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the pages' screenshots go: $CONSOLE_SCREENSHOTS (CI keeps it as an artefact), else a
    temporary directory."""
    where = os.environ.get("CONSOLE_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def shoot(driver: Any, shots: Path, name: str) -> None:
    assert driver.save_screenshot(str(shots / f"console-{name}.png"))


def text_of(driver: Any, css: str) -> str:
    """The text of the element `css` selects, "" when there is none. A live page replaces its rows
    between finding one and reading it (a stale element): then the replacement is found and read."""
    return _read(driver, css, lambda element: str(element.text))


def html_of(driver: Any, css: str) -> str:
    """The outer HTML of the element `css` selects (an inline SVG's markup), "" when there is none;
    read as `text_of` reads."""
    return _read(driver, css, lambda element: str(element.get_attribute("outerHTML")))


def _read(driver: Any, css: str, read: Callable[[Any], str]) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        try:
            return read(driver.find_element(By.CSS_SELECTOR, css))
        except NoSuchElementException:
            return ""
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} was replaced on every one of 10 reads")


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
