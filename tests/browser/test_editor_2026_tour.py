"""A tour of the 2026 editor on our server (Debian's Chromium, as test_editor_browser.py): the
Logs tab, Settings > About, the node library's subgraph blueprints (one provided by a pack's
`subgraphs/*.json`), and an official template with a subgraph, queued and run to its image;
every request the editor made is recorded and none answers 404 unless ComfyUI's server answers
404 there too (`EXPECTED_404`, each with why). And the default graph opens with every node in
view at 1280x720, clear of the toolbars.

Set `COMFY_ENGINE_SCREENSHOT_DIR=<folder>` to keep the screenshots."""
from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import tests.graph.test_editor_workflow_subgraphs as cases
from graph.editor_workflow import editor_to_prompt
from tests.browser.test_editor_browser import UI_TIMEOUT_MS, editor_factory, pytestmark  # noqa: F401
from tests.browser.test_editor_workflow_oracle import _editor_shape

DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATE = DATA / "templates" / "flux_dev_checkpoint_example.json"  # a subgraph with legacy proxy widgets
COMFY_OBJECT_INFO = DATA / "comfyui_0.3.64_object_info.json"
BLUEPRINT_NAME = "flip_latent"

# Paths the editor asks for that ComfyUI's server answers 404 too (on a fresh user folder).
EXPECTED_404 = {
    "/user.css": "the editor's index.html links user.css; the frontend package has none and ComfyUI "
                 "serves only the package's static folder there",
    "/api/userdata/user.css": "the user's own stylesheet, absent until they write one (ComfyUI: 404)",
    "/api/userdata/comfy.templates.json": "the user's saved template list, absent on a fresh user folder "
                                          "(ComfyUI: 404)",
}


def _blueprint_pack(base: Path) -> None:
    """custom_nodes/blueprint_pack: no nodes, one subgraph blueprint (a LatentFlip inside)."""
    pack = base / "custom_nodes" / "blueprint_pack"
    (pack / "subgraphs").mkdir(parents=True)
    (pack / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    workflow = _editor_shape(cases._flip_workflow())
    host = next(n for n in workflow["nodes"] if n["id"] == 10)
    host["inputs"] = [dict(slot, link=None) for slot in host["inputs"]]
    workflow["nodes"], workflow["links"] = [host], []
    (pack / "subgraphs" / f"{BLUEPRINT_NAME}.json").write_text(json.dumps(workflow))


def _template_files(base: Path) -> None:
    from tests.fixtures.template_models import provide_files

    workflow = json.loads(TEMPLATE.read_text())
    provide_files(editor_to_prompt(workflow, json.loads(COMFY_OBJECT_INFO.read_text())), base)


def _screenshot_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("COMFY_ENGINE_SCREENSHOT_DIR") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
async def test_logs_about_blueprints_and_a_subgraph_template_with_no_unexpected_404(editor_factory, tmp_path) -> None:
    def prepare(base: Path) -> None:
        _blueprint_pack(base)
        _template_files(base)

    editor = await editor_factory(prepare, custom_node_dirs=("custom_nodes",))
    page = editor.page
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
    await editor.open()
    await editor.settled(("/api/jobs", "/api/global_subgraphs"))

    # The Logs tab.
    await page.evaluate(
        "() => window.app.extensionManager.command.execute('Workspace.ToggleBottomPanelTab.logs-terminal')")
    await editor.settled(("/internal/logs/raw", "/internal/logs/subscribe"))
    assert await page.get_by_text("Unable to load logs").count() == 0
    await page.locator(".xterm").first.wait_for(timeout=UI_TIMEOUT_MS)

    # Settings > About: the templates version the server reports.
    await page.evaluate("() => window.app.extensionManager.command.execute('Comfy.Help.AboutComfyUI')")
    from importlib.metadata import version

    await page.get_by_text(version("comfyui-workflow-templates"), exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
    await page.keyboard.press("Escape")

    # The node library's subgraph blueprints: the pack's blueprint is listed, and dragging it
    # onto the canvas adds an instance of its subgraph.
    await page.evaluate(
        "() => window.app.extensionManager.command.execute('Workspace.ToggleSidebarTab.node-library')")
    await page.get_by_text("Subgraph Blueprints", exact=False).first.wait_for(timeout=UI_TIMEOUT_MS)
    blueprint = page.get_by_text(BLUEPRINT_NAME, exact=True)
    if await blueprint.count() == 0:  # folded in its folder
        await page.get_by_text("Comfy Blueprints", exact=True).first.click()
    await blueprint.first.wait_for(timeout=UI_TIMEOUT_MS)
    await page.screenshot(path=str(_screenshot_dir(tmp_path) / "blueprints.png"))
    before = await page.evaluate("() => window.app.graph.nodes.length")
    await blueprint.first.drag_to(page.locator("canvas#graph-canvas"), target_position={"x": 760, "y": 380})
    await page.wait_for_function(f"() => window.app.graph.nodes.length > {before}", timeout=UI_TIMEOUT_MS)
    placed = await page.evaluate("() => { const n = window.app.graph.nodes.at(-1); return [n.type, !!n.subgraph]; }")
    assert placed[1], placed
    await editor.settled(())
    fetched = [(s, u) for s, u in editor.responses if urlsplit(u).path.startswith("/api/global_subgraphs/")]
    assert fetched and all(s == 200 for s, _ in fetched), fetched

    # An official template with a subgraph, queued from the editor, runs to its image.
    await editor.load(json.loads(TEMPLATE.read_text()))
    await editor.fit_view()
    await editor.run()
    src = await editor.wait_for_image_on(9)
    assert "/api/view" in src
    assert any('"execution_success"' in f for f in frames)
    assert any('"56:52"' in f for f in frames)  # the KSampler inside the subgraph, by compound id
    await page.screenshot(path=str(_screenshot_dir(tmp_path) / "template_ran.png"))

    await editor.settled(())
    not_found = sorted({urlsplit(u).path for s, u in editor.responses if s == 404})
    assert set(not_found) <= set(EXPECTED_404), not_found
    failed = sorted({(s, urlsplit(u).path) for s, u in editor.responses if s >= 400 and s != 404})
    assert failed == [], failed
    assert editor.page_errors == []


async def test_default_graph_is_in_view_at_1280x720(editor_factory, tmp_path) -> None:
    """Every node of the default graph lies on the visible canvas: inside the window and under
    no toolbar, side bar or minimap (what the page shows at each node's corners is the canvas)."""
    def prepare(base: Path) -> None:  # a checkpoint, so no "no checkpoints yet" toast covers the graph
        (base / "models" / "checkpoints").mkdir(parents=True)
        (base / "models" / "checkpoints" / "demo.safetensors").write_bytes(b"")

    editor = await editor_factory(prepare, viewport=(1280, 720))
    await editor.open()
    await editor.settled(("/api/jobs", "/api/experiment/models"))
    page = editor.page
    hidden = await page.evaluate("""() => {
      const canvas = window.app.canvas, ds = canvas.ds, box = canvas.canvas.getBoundingClientRect();
      const problems = [];
      for (const node of window.app.graph.nodes) {
        const [x, y, w, h] = Array.from(node.getBounding());
        const left = (x + ds.offset[0]) * ds.scale + box.left, top = (y + ds.offset[1]) * ds.scale + box.top;
        const right = (x + w + ds.offset[0]) * ds.scale + box.left, bottom = (y + h + ds.offset[1]) * ds.scale + box.top;
        for (const [px, py] of [[left + 3, top + 3], [right - 3, top + 3], [left + 3, bottom - 3], [right - 3, bottom - 3]]) {
          const element = document.elementFromPoint(px, py);
          if (element !== canvas.canvas) problems.push([node.title, Math.round(px), Math.round(py),
                                                        element ? element.tagName + '.' + element.className : null]);
        }
      }
      return problems;
    }""")
    await page.screenshot(path=str(_screenshot_dir(tmp_path) / "default_graph_1280x720.png"))
    assert hidden == [], hidden
