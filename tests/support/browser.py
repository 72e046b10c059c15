"""A real browser for the tests of `ctu view`'s page: Debian's chromium, headless, driven by selenium through
Debian's chromedriver (both installed by .ci/run; nothing downloaded). Test support only."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def available() -> bool:
    """Whether chromium and its driver are installed (as .ci/run installs them)."""
    return bool(shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER))


@contextlib.contextmanager
def browser(width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    """A headless chromium (selenium's `webdriver.Chrome`) that records the console, closed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver: WebDriver, page: Path, fragment: str = "") -> None:
    """Load `page` (a file) at `fragment` (``view=episodes&outcome=fail``) and wait until it has rendered."""
    from selenium.webdriver.support.ui import WebDriverWait

    url = page.absolute().as_uri() + (f"#{fragment}" if fragment else "")
    driver.get("about:blank")
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.ctuRendered !== undefined && location.href") == url)


def console_errors(driver: WebDriver) -> list[str]:
    """The console's messages of level SEVERE since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]  # type: ignore[attr-defined]  # Chrome's alone


def embedded_data(page: Path) -> dict:
    """The data a `ctu view` page embeds (`ctu.view.data.page_data`), read from the file."""
    text = page.read_text()
    return json.loads(text.split('<script id="ctu-data" type="application/json">')[1].split("</script>")[0])


def episode_facts(driver: WebDriver) -> dict[str, str]:
    """The open episode's facts as the page shows them: each ``dt``'s text to its ``dd``'s."""
    terms = driver.find_elements("css selector", "article.episode dt")
    values = driver.find_elements("css selector", "article.episode dd")
    return dict(zip([term.text for term in terms], [value.text for value in values], strict=True))
