"""End to end with --users (web/auth/): ComfyUI's editor behind our login page, in Debian's
Chromium. A browser without a session is sent to the login page; logging in there lands in the
editor, which then runs a tiny workflow and shows its image (served by /view to its owner)."""
from __future__ import annotations

from pathlib import Path

import pytest
from argon2 import PasswordHasher
from PIL import Image

from tests.browser.test_editor_browser import (BOOT_TIMEOUT_MS, CHROMIUM, CHROMIUM_ARGS, SMALL_WORKFLOW,
                                               UI_TIMEOUT_MS, Editor, playwright_api)
from web.app import start_server
from web.auth.settings import AuthSettings
from web.bootstrap import build_state
from web.config import ServerConfig

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's /usr/bin/chromium is not installed"),
]
PASSWORD = "correct horse battery"


async def test_login_page_then_the_editor_runs_a_workflow(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "input").mkdir(parents=True)
    Image.new("RGB", (48, 32), (200, 40, 90)).save(base / "input" / "start.png")  # by hand: shared
    state = build_state(ServerConfig(base_dir=base, listen=("127.0.0.1",), port=0, custom_node_dirs=(),
                                     auth=AuthSettings()))
    runner, urls = await start_server(state, frontend=True)
    state.auth.store.hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    state.auth.store.add_user("alice", PASSWORD, "user")
    playwright = await playwright_api.async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        context = await browser.new_context(viewport={"width": 1400, "height": 900})
        editor = Editor(state, runner, urls[0], await context.new_page(), browser)
        page = editor.page
        await page.goto(editor.url)
        assert "/auth/login?next=" in page.url  # the redirect was followed by goto
        await page.fill("#username", "alice")
        await page.fill("#password", "wrong password")
        await page.click("#submit")
        await page.wait_for_url(lambda url: url.endswith("/auth/login?error=bad"), timeout=UI_TIMEOUT_MS)
        assert "Wrong user name or password" in await page.inner_text("#message")
        await page.fill("#username", "alice")
        await page.fill("#password", PASSWORD)
        await page.click("#submit")
        await page.wait_for_function("() => window.app?.graph?.nodes?.length > 0", timeout=BOOT_TIMEOUT_MS)
        cookies = await context.cookies()
        session = next(c for c in cookies if c["name"] == "comfy_engine_session")
        assert session["httpOnly"] and session["sameSite"] == "Lax"
        assert await page.evaluate("() => document.cookie") == ""  # not readable by scripts

        await editor.load(SMALL_WORKFLOW)
        await editor.run()
        src = await editor.wait_for_image_on(3)
        assert "/api/view?" in src and "filename=small_00001_.png" in src
        [item] = [r for r in state.store.history_records()]
        assert item.owner == "alice" and item.status == "success"
        assert not [u for status, u in editor.responses if status in (401, 403)]
        assert editor.page_errors == []
        # the user's settings went to their own folder
        assert (state.env.user_dir / "alice").is_dir()
    finally:
        await browser.close()
        await runner.cleanup()
        await playwright.stop()
