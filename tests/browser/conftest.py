"""Browser tests of the admin UI: Debian's chromium driven by Playwright (``executable_path``;
Playwright's own browser download is never used), against a real ``tiergate serve`` on the edge tier.

Every page a test opens is checked for console errors and uncaught exceptions when the test ends.
Screenshots go to ``docs/screenshots/`` (the README links them).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

from tests.conftest import Gateway, start_gateway

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Module scope, not session: while Playwright's sync API is started, its event loop counts as
# running in this thread, and the asyncio tests of other modules could not run their own.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    with sync_playwright() as pw:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses root without it
        chromium = pw.chromium.launch(executable_path=executable, args=args, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="package")
def ui_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real gateway on the edge tier (llama.cpp) only: quick to start, no vLLM. One for the whole
    folder: the modules' tests make tenants of their own names, so they share it (a start costs
    seconds of both cores)."""
    gw = start_gateway(tmp_path_factory.mktemp("admin-ui"), "[cloud]\nenabled = false\n")
    yield gw
    gw.stop()


@dataclass
class Console:
    """What the pages of one browser context said on their consoles."""

    errors: list[str] = field(default_factory=list)
    expected: set[tuple[str, int]] = field(default_factory=set)

    def expect(self, path: str, status: int) -> None:
        """A page this test loads on purpose with an error status (a refused sign-in, a form with
        errors): Chromium logs that load as a console error, which is then not a failure."""
        self.expected.add((path, status))

    def watch(self, page: Page) -> None:
        page.on("console", self._message)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))

    def _message(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        url = message.location.get("url", "")
        status = re.search(r"status of (\d+)", message.text)
        path = urlsplit(url).path
        if status is None or (path, int(status.group(1))) not in self.expected:
            self.errors.append(f"console: {message.text} ({url})")


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def context(browser: Browser, console: Console) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies); its pages must end the test without console errors."""
    ctx = browser.new_context(viewport=LAPTOP)
    ctx.on("page", console.watch)
    ctx.set_default_timeout(30_000)
    yield ctx
    ctx.close()
    assert console.errors == [], "the pages logged errors:\n" + "\n".join(console.errors)


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


def sign_in(page: Page, gateway: Gateway, key: str | None = None, path: str = "/admin/") -> None:
    page.goto(f"{gateway.url}{path}")
    page.fill("#key", key or gateway.admin_key)
    page.click("form[action='/admin/login'] button[type=submit]")


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page, animations="disabled")
    return path
