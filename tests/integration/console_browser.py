"""What the console's browser tests share: Debian's chromium through Playwright, screenshots.

Playwright drives the system's ``/usr/bin/chromium`` (``executable_path``);
``playwright install`` never runs, so no browser is downloaded. As root,
chromium needs ``--no-sandbox``. The tests skip, saying why, only where
chromium is absent (CI installs it through scripts/system-deps.sh).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("HEADWATER_CHROMIUM", "/usr/bin/chromium")
#: Where each step's screenshot goes (git-ignored).
ARTIFACTS = Path(os.environ.get("HEADWATER_TEST_ARTIFACTS", "test-artifacts")) / "console"
#: Set (e.g. to docs/images) to also write the documentation's screenshots.
DOCS_IMAGES = os.environ.get("HEADWATER_CONSOLE_DOCS_IMAGES")
#: Generous bounds for a loaded 2-core machine; every wait is on a condition.
TIMEOUT_MS = 45_000


def chromium_missing() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"{CHROMIUM} is not installed (apt-get install chromium; scripts/system-deps.sh)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = chromium_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def web(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    pg = context.new_page()
    pg.shots_prefix = re.sub(r"[^A-Za-z0-9_-]+", "_", request.node.name)
    # ``web.snap(step, docs_name)``: tests need not import this module (pytest loads it as a
    # plugin, and a module imported before that escapes pytest's assertion rewriting).
    pg.snap = lambda step, docs_name=None: shot(pg, step, docs_name)
    try:
        yield pg
    finally:
        context.close()


def shot(page: Any, step: str, docs_name: str | None = None) -> Path:
    """Save the page as ``<test>-<step>.png`` in the artifacts dir (and in the docs)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{page.shots_prefix}-{step}.png"
    page.screenshot(path=str(path), full_page=True)
    if DOCS_IMAGES and docs_name:
        Path(DOCS_IMAGES).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(DOCS_IMAGES) / f"console-{docs_name}.png"), full_page=True)
    return path
