"""A real headless Chromium for the browser tests: Debian's chromium and chromedriver, never a download.

`make sysdeps-chromium` installs both when missing. Screenshots go under reports/ (git-ignored).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
REPORTS = Path(__file__).resolve().parent.parent / "reports"


def chromium() -> object:
    """A headless Chromium session (selenium); the test fails if the browser is not installed."""
    if not CHROMEDRIVER.exists() or not (CHROMIUM.exists() or shutil.which("chromium")):
        pytest.fail("Chromium is not installed: run `make sysdeps-chromium` (Debian chromium, chromium-driver)")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    flags = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,2000")
    for flag in flags:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def screenshot(driver: object, name: str) -> Path:
    """Save the page under reports/ (``name`` may hold a subdirectory: one per test's set of pages)."""
    path = REPORTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path
