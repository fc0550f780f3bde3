"""A headless Chromium for the browser tests: Debian's ``chromium`` driven by Playwright for Python.

``executable_path`` is the system's browser (``$STRAM_CHROMIUM``, else ``chromium`` or
``chromium-browser`` on PATH): nothing is downloaded (never ``playwright install``). Without
the browser or Playwright the tests that use the ``chromium`` fixture are skipped saying why;
with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import shutil

import pytest
from needs import missing


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium (the system's), through Playwright."""
    executable = os.environ.get("STRAM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        missing("headless Chromium for the console's browser tests",
                "Debian's `chromium` (apt-get install chromium; ./scripts/test installs it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("headless Chromium for the console's browser tests",
                "Playwright for Python (pip install -e '.[test]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()
