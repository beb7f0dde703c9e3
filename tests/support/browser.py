"""A real headless Chromium (Debian's, see scripts/chromium.sh) driven by Playwright."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Page]:
    """A page in a fresh profile; page errors (uncaught JS exceptions) fail the test."""
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} missing: run scripts/chromium.sh")
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile, sync_playwright() as p:
        context: BrowserContext = p.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=FLAGS,
            headless=True,
            viewport={"width": width, "height": height},
        )
        try:
            page = context.new_page()
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
        finally:
            context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
