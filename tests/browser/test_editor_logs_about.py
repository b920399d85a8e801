"""The editor's Logs tab and Settings > About on our server (Debian's Chromium, as
test_editor_browser.py): the logs load and stream, the About page shows the templates version,
and the start-up requests for subgraph blueprints and node replacements are answered."""
from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

from tests.browser.test_editor_browser import UI_TIMEOUT_MS, editor_factory, pytestmark  # noqa: F401
from web.routes_logs import LOG_BUFFER_KEY

log = logging.getLogger("tests.browser.logs_tab")


async def test_logs_tab_loads_and_streams_and_about_shows_templates_version(editor_factory) -> None:
    editor = await editor_factory()
    log.warning("marker before the logs tab opened")
    page = editor.page
    frames: list[str] = []  # what the editor's WebSocket receives (listening before it opens)
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
    await editor.open()
    await editor.settled(("/api/jobs", "/api/global_subgraphs"))
    statuses = {urlsplit(u).path: s for s, u in editor.responses}
    assert statuses["/api/global_subgraphs"] == 200 and statuses.get("/api/node_replacements") == 200

    await page.evaluate(
        "() => window.app.extensionManager.command.execute('Workspace.ToggleBottomPanelTab.logs-terminal')")
    await editor.settled(("/internal/logs/raw", "/internal/logs/subscribe"))
    assert statuses_of(editor, "/internal/logs/raw") == [200]
    assert await page.get_by_text("Unable to load logs").count() == 0
    buffer = editor.runner.app[LOG_BUFFER_KEY]
    assert len(buffer.subscribers) == 1 and buffer.subscribers <= set(editor.state.hub.clients)
    raw_text = await page.locator(".xterm").first.inner_text()
    assert "marker before the logs tab opened" in raw_text

    # A new record reaches the page.
    for _ in range(100):
        log.warning("marker streamed to the logs tab")
        await asyncio.sleep(0.1)
        if any("marker streamed to the logs tab" in f for f in frames):
            break
    assert any('"type": "logs"' in f and "marker streamed to the logs tab" in f for f in frames)

    await page.evaluate("() => window.app.extensionManager.command.execute('Comfy.Help.AboutComfyUI')")
    from importlib.metadata import version

    await page.get_by_text(version("comfyui-workflow-templates"), exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
    assert editor.page_errors == []


def statuses_of(editor, path: str) -> list[int]:
    return [status for status, url in editor.responses if urlsplit(url).path == path]
