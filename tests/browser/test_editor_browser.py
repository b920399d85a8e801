"""End to end: ComfyUI's official editor, served by our server, driven in Debian's Chromium.

Each test starts a real server (built-in nodes, a fresh base folder, a free loopback port) and
a fresh browser profile, then uses the editor as a person would: the Run button, the node
library, the canvas. `window.app` is read to know when the editor is ready and what it shows.

Set `COMFY_ENGINE_SCREENSHOT=<path.png>` to keep the final screenshot of the default workflow
test (that is how docs/screenshot-editor.png is made).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from PIL import Image

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's /usr/bin/chromium is not installed "
                       "(apt-get install chromium; scripts/setup.sh --dev does it)"),
]
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed "
                                     "(pip install -r requirements-dev.txt)")

from web.app import start_server  # noqa: E402
from web.bootstrap import build_state  # noqa: E402
from web.config import ServerConfig  # noqa: E402
from web.frontend import OWN_EXTENSION_DIR  # noqa: E402

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
    # Any host other than this server fails at once, even if a request slipped past the CSP.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]
BOOT_TIMEOUT_MS = 90_000
RUN_TIMEOUT_MS = 120_000
UI_TIMEOUT_MS = 60_000  # generous: the machine running the tests may be busy
DEFAULT_WORKFLOW = json.loads((OWN_EXTENSION_DIR / "default_workflow.json").read_text())

# LoadImage -> ImageScale -> SaveImage, in the editor's own (UI) format.
SMALL_WORKFLOW = {
    "last_node_id": 3, "last_link_id": 2,
    "nodes": [
        {"id": 1, "type": "LoadImage", "pos": [60, 120], "size": [315, 314], "flags": {}, "order": 0, "mode": 0,
         "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [1], "slot_index": 0},
                     {"name": "MASK", "type": "MASK", "links": None, "slot_index": 1}],
         "properties": {}, "widgets_values": ["start.png", "image"]},
        {"id": 2, "type": "ImageScale", "pos": [430, 120], "size": [315, 130], "flags": {}, "order": 1, "mode": 0,
         "inputs": [{"name": "image", "type": "IMAGE", "link": 1}],
         "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [2], "slot_index": 0}],
         "properties": {}, "widgets_values": ["bilinear", 96, 64, "disabled"]},
        {"id": 3, "type": "SaveImage", "pos": [790, 120], "size": [315, 300], "flags": {}, "order": 2, "mode": 0,
         "inputs": [{"name": "images", "type": "IMAGE", "link": 2}],
         "properties": {}, "widgets_values": ["browser/small"]},
    ],
    "links": [[1, 1, 0, 2, 0, "IMAGE"], [2, 2, 0, 3, 0, "IMAGE"]],
    "groups": [], "config": {}, "extra": {}, "version": 0.4,
}


class Editor:
    """One server and one browser page on it, with what the page did recorded."""

    def __init__(self, state, runner, url: str, page, browser) -> None:
        self.state, self.runner, self.url, self.page, self.browser = state, runner, url, page, browser
        self.responses: list[tuple[int, str]] = []
        self.page_errors: list[str] = []
        self.console: list[str] = []
        self.in_flight: set = set()  # requests the page started that have not finished or failed
        self.done_paths: list[str] = []  # URL paths of the requests that finished or failed, in order
        self.request_done = asyncio.Event()  # set whenever one does
        page.on("request", lambda r: self.in_flight.add(r))
        page.on("requestfinished", self._request_done)
        page.on("requestfailed", self._request_done)
        page.on("response", lambda r: self.responses.append((r.status, r.url)))
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("console", lambda m: self.console.append(m.text))

    def _request_done(self, request) -> None:
        self.in_flight.discard(request)
        self.done_paths.append(urlsplit(request.url).path)
        self.request_done.set()

    async def settled(self, paths: tuple[str, ...], timeout: float = UI_TIMEOUT_MS / 1000) -> None:
        """Wait until a request to each of `paths` has finished (or failed), nothing the page
        started is still in flight, and the page has drawn a frame after that: what those
        answers would show (an error dialog, a page error) is on the page by then."""
        async def wait() -> None:
            while not (all(path in self.done_paths for path in paths) and not self.in_flight):
                self.request_done.clear()
                await self.request_done.wait()
        await asyncio.wait_for(wait(), timeout)
        await self.page.evaluate("() => new Promise(resolve => requestAnimationFrame(() => resolve()))")

    async def open(self) -> None:
        await self.page.goto(self.url)
        await self.page.wait_for_function("() => window.app?.graph?.nodes?.length > 0", timeout=BOOT_TIMEOUT_MS)

    async def load(self, workflow: dict) -> None:
        await self.page.evaluate("(wf) => window.app.loadGraphData(wf)", workflow)

    async def fit_view(self) -> None:
        """Show the whole graph: the editor loads a node's images only while it is on screen."""
        await self.page.evaluate("() => window.app.extensionManager.command.execute('Comfy.Canvas.FitView')")

    async def run(self) -> None:
        await self.page.get_by_role("button", name="Run", exact=True).first.click()

    async def wait_for_image_on(self, node_id: int) -> str:
        """The URL of the first image the node shows, once it has loaded in the page."""
        await self.page.wait_for_function(
            """(id) => { const n = window.app.graph.getNodeById(id);
                         return n?.imgs?.length > 0 && n.imgs[0].complete && n.imgs[0].naturalWidth > 0 }""",
            arg=node_id, timeout=RUN_TIMEOUT_MS)
        return await self.page.evaluate("(id) => window.app.graph.getNodeById(id).imgs[0].src", node_id)

    async def set_widget(self, node_id: int, name: str, value) -> None:
        await self.page.evaluate(
            """([id, name, value]) => { const w = window.app.graph.getNodeById(id).widgets.find(w => w.name === name);
                                        w.value = value; w.callback?.(value); }""", [node_id, name, value])

    def foreign_responses(self) -> list[str]:
        return [u for _, u in self.responses if urlsplit(u).hostname not in (None, "127.0.0.1")
                and not u.startswith(("data:", "blob:"))]


@pytest.fixture
async def editor_factory(tmp_path: Path):
    """`await make(prepare=None, custom_node_dirs=(), viewport=(1400, 900))`: a server over
    `tmp_path/base` (`prepare(base)` runs first, to put files in place; `custom_node_dirs` are
    relative to base) and an editor page on it, both closed after the test."""
    started = []
    playwright = await playwright_api.async_playwright().start()

    async def make(prepare=None, custom_node_dirs: tuple[str, ...] = (), viewport: tuple[int, int] = (1400, 900)) -> Editor:
        base = tmp_path / "base"
        base.mkdir(exist_ok=True)
        if prepare is not None:
            prepare(base)
        state = build_state(ServerConfig(base_dir=base, listen=("127.0.0.1",), port=0,
                                         custom_node_dirs=tuple(base / d for d in custom_node_dirs)))
        runner, urls = await start_server(state, frontend=True)
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        editor = Editor(state, runner, urls[0], await context.new_page(), browser)
        started.append(editor)
        return editor

    try:
        yield make
    finally:
        for editor in started:
            await editor.browser.close()
            await editor.runner.cleanup()
        await playwright.stop()


async def wait_until(check, what: str, timeout: float = 30.0) -> None:
    """Poll a condition on the server side (files written by the editor's requests)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def _input_image(base: Path) -> None:
    (base / "input").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (48, 32), (200, 40, 90)).save(base / "input" / "start.png")


async def test_editor_opens_with_our_default_graph_and_lists_our_nodes(editor_factory) -> None:
    editor = await editor_factory()
    await editor.open()
    page = editor.page

    # Our extension replaced the editor's built-in default graph with ours.
    # (ComfyUI's own default has the same node types and ids: compare titles and prompts too.)
    shown = await page.evaluate(
        """() => window.app.graph.nodes.map(n => [String(n.id), n.type, n.title,
                                                  n.widgets?.find(w => w.name === 'text')?.value ?? null])""")
    ours = DEFAULT_WORKFLOW["nodes"]
    assert sorted(s[:2] for s in shown) == sorted([str(n["id"]), n["type"]] for n in ours)
    texts = {str(n["id"]): (n.get("title"), n["widgets_values"][0]) for n in ours if n["type"] == "CLIPTextEncode"}
    assert {s[0]: (s[2], s[3]) for s in shown if s[1] == "CLIPTextEncode"} == texts

    # No error dialog, no page error; nothing was fetched from any other host.
    # The editor's late start-up requests (its queue and model library) have been answered.
    await editor.settled(("/api/jobs", "/api/experiment/models"))
    assert await page.locator('[role="dialog"]:visible').count() == 0
    assert editor.page_errors == []
    assert editor.foreign_responses() == []
    # The server's Content-Security-Policy is what stops the editor talking to other hosts
    # (not only this test's resolver rule, which would fail differently).
    verdict = await page.evaluate("() => fetch('https://telemetry.example/x').then(() => 'reached', () => 'blocked')")
    assert verdict == "blocked"
    assert any("https://telemetry.example/x" in m and "Content Security Policy" in m and "connect-src" in m
               for m in editor.console)
    assert await page.get_by_text("Missing Node Packs").count() == 0  # every node of our graph exists

    # The node library (key "n") shows our categories and nodes.
    await page.mouse.click(700, 700)
    await page.keyboard.press("n")
    library = page.get_by_role("tree").first
    await library.wait_for(timeout=UI_TIMEOUT_MS)
    await library.get_by_text("image", exact=True).first.click()
    for name in ("Save Image", "Load Image", "Preview Image"):
        await library.get_by_text(name, exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
    # Every built-in node is registered in the editor.
    registered = await page.evaluate("() => Object.keys(window.LiteGraph.registered_node_types)")
    assert set(editor.state.registry) <= set(registered)

    # "Load Default Workflow" also gives ours, not the editor's built-in graph.
    await editor.load(SMALL_WORKFLOW)
    await page.wait_for_function("() => window.app.graph.nodes.length === 3", timeout=UI_TIMEOUT_MS)
    await page.evaluate("() => window.app.extensionManager.command.execute('Comfy.LoadDefaultWorkflow')")
    await page.wait_for_function("() => window.app.graph.getNodeById(6)?.title === 'Positive prompt'",
                                 timeout=UI_TIMEOUT_MS)


async def test_a_workflow_runs_and_its_image_shows_then_a_validation_error_shows_on_its_node(editor_factory,
                                                                                              tmp_path: Path) -> None:
    editor = await editor_factory(prepare=_input_image)
    await editor.open()
    page = editor.page

    await editor.load(SMALL_WORKFLOW)
    await editor.run()
    src = await editor.wait_for_image_on(3)
    assert "/api/view?" in src and "filename=small_00001_.png" in src and "subfolder=browser" in src
    saved = editor.state.env.output_dir / "browser" / "small_00001_.png"
    with Image.open(saved) as img:
        assert img.size == (96, 64)
        workflow = json.loads(img.text["workflow"])  # the editor's graph, embedded by SaveImage
        prompt = json.loads(img.text["prompt"])
    assert sorted(n["type"] for n in workflow["nodes"]) == ["ImageScale", "LoadImage", "SaveImage"]
    assert prompt["2"]["inputs"]["width"] == 96
    assert any(status == 200 and "/api/view?" in url for status, url in editor.responses)

    # LoadImage's upload button puts a new file in the input folder and selects it.
    upload = tmp_path / "from disk.png"
    Image.new("RGBA", (40, 20), (10, 200, 90, 128)).save(upload)
    # The button is drawn on the canvas, and the node may still be growing to show its preview:
    # locate the button afresh for each click, and click again if no file chooser opened.
    chooser = None
    for _ in range(6):
        await page.evaluate("() => window.app.canvas.draw(true, true)")
        button = await page.evaluate(
            """() => { const n = window.app.graph.getNodeById(1), w = n.widgets.find(w => w.name === 'upload');
                       const ds = window.app.canvas.ds, r = window.app.canvas.canvas.getBoundingClientRect();
                       return [(n.pos[0] + n.size[0] / 2 + ds.offset[0]) * ds.scale + r.left,
                               (n.pos[1] + w.y + 10 + ds.offset[1]) * ds.scale + r.top]; }""")
        try:
            async with page.expect_file_chooser(timeout=UI_TIMEOUT_MS // 6) as waiting:
                await page.mouse.click(*button)
            chooser = await waiting.value
            break
        except playwright_api.TimeoutError:
            continue
    assert chooser is not None, "LoadImage's upload button never opened a file chooser"
    # The editor may show the new name before its upload request has finished: wait for the answer.
    async with page.expect_response(lambda r: "/upload/image" in r.url and r.request.method == "POST",
                                    timeout=UI_TIMEOUT_MS) as uploaded:
        await chooser.set_files(str(upload))
    assert (await uploaded.value).status == 200
    await page.wait_for_function(
        "() => window.app.graph.getNodeById(1).widgets.find(w => w.name === 'image').value === 'from disk.png'",
        timeout=UI_TIMEOUT_MS)
    assert (editor.state.env.input_dir / "from disk.png").read_bytes() == upload.read_bytes()
    await editor.run()
    await page.wait_for_function(
        "() => window.app.graph.getNodeById(3).imgs?.[0]?.src.includes('small_00002_.png')", timeout=RUN_TIMEOUT_MS)
    with Image.open(editor.state.env.output_dir / "browser" / "small_00002_.png") as img:
        assert img.getpixel((48, 32)) == (10, 200, 90)

    bad = json.loads(json.dumps(SMALL_WORKFLOW))
    bad["nodes"][1]["widgets_values"] = ["bilinear", 99999, 64, "disabled"]
    await editor.load(bad)
    await editor.run()
    await page.wait_for_function("() => window.app.extensionManager.lastNodeErrors?.['2']", timeout=RUN_TIMEOUT_MS)
    errors = await page.evaluate("() => window.app.extensionManager.lastNodeErrors")
    assert list(errors) == ["2"]
    assert errors["2"]["errors"][0]["type"] == "value_bigger_than_max"
    await page.get_by_text("Input out of range").first.wait_for(timeout=UI_TIMEOUT_MS)
    await page.get_by_text("Upscale Image's width is above the maximum 16384").first.wait_for(timeout=UI_TIMEOUT_MS)
    assert await page.locator('[role="dialog"]:visible').count() == 0
    assert not (editor.state.env.output_dir / "browser" / "small_00003_.png").exists()
    assert editor.page_errors == []


async def test_the_default_text_to_image_workflow_runs_in_the_editor(editor_factory, tiny_sd1_ckpt: Path,
                                                                     tmp_path: Path) -> None:
    def prepare(base: Path) -> None:
        (base / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_sd1_ckpt, base / "models" / "checkpoints" / "tiny_sd1.safetensors")

    editor = await editor_factory(prepare=prepare)
    await editor.open()
    page = editor.page
    checkpoint = await page.evaluate(
        "() => window.app.graph.getNodeById(4).widgets.find(w => w.name === 'ckpt_name').value")
    assert checkpoint == "tiny_sd1.safetensors"
    # Small and short, so the test stays fast on a CPU: the graph itself is unchanged.
    await editor.set_widget(5, "width", 64)
    await editor.set_widget(5, "height", 64)
    await editor.set_widget(3, "steps", 2)
    await editor.fit_view()
    await editor.run()
    src = await editor.wait_for_image_on(9)
    assert "filename=ComfyUI_00001_.png" in src
    assert (editor.state.env.output_dir / "ComfyUI_00001_.png").is_file()
    assert await page.locator('[role="dialog"]:visible').count() == 0
    assert editor.page_errors == [] and editor.foreign_responses() == []
    shot = tmp_path / "editor.png"
    await page.screenshot(path=str(shot))
    if os.environ.get("COMFY_ENGINE_SCREENSHOT"):
        shutil.copy(shot, os.environ["COMFY_ENGINE_SCREENSHOT"])


async def test_saved_workflows_and_settings_live_on_the_server(editor_factory) -> None:
    editor = await editor_factory()
    await editor.open()
    page = editor.page
    user_root = editor.state.env.user_dir / "default"

    # Ctrl+S on the unsaved default workflow asks for a name, then writes it to the user folder.
    await page.mouse.click(700, 700)
    await page.keyboard.press("Control+s")
    name_box = page.locator('[role="dialog"] input').first
    await name_box.wait_for(timeout=UI_TIMEOUT_MS)
    await name_box.fill("my lighthouse")
    await name_box.press("Enter")
    saved = user_root / "workflows" / "my lighthouse.json"
    await wait_until(saved.is_file, "the workflow file to be written")
    assert {n["type"] for n in json.loads(saved.read_text())["nodes"]} == {n["type"] for n in DEFAULT_WORKFLOW["nodes"]}

    await page.evaluate("() => window.app.extensionManager.setting.set('Comfy.Graph.ZoomSpeed', 1.25)")
    settings_file = user_root / "comfy.settings.json"
    await wait_until(lambda: settings_file.is_file()
                     and json.loads(settings_file.read_text()).get("Comfy.Graph.ZoomSpeed") == 1.25,
                     "the setting to be written to the user folder")

    # A fresh browser profile sees both: they came from the server, not from browser storage.
    other = await (await editor.browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
    await other.goto(editor.url)
    await other.wait_for_function("() => window.app?.graph?.nodes?.length > 0", timeout=BOOT_TIMEOUT_MS)
    assert await other.evaluate("() => window.app.extensionManager.setting.get('Comfy.Graph.ZoomSpeed')") == 1.25
    await other.mouse.click(700, 700)
    await other.keyboard.press("w")  # the workflows sidebar
    await other.get_by_text("my lighthouse").first.wait_for(timeout=UI_TIMEOUT_MS)


async def test_the_library_panels_show_templates_models_and_imported_files(editor_factory, tiny_sd1_ckpt: Path,
                                                                           tmp_path: Path) -> None:
    """The three panels a new user opens on the first day show what the server has: the
    official templates it can run, the checkpoints in its model folder, the files in input/."""
    def prepare(base: Path) -> None:
        (base / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_sd1_ckpt, base / "models" / "checkpoints" / "tiny_sd1.safetensors")
        _input_image(base)

    editor = await editor_factory(prepare=prepare)
    await editor.open()
    page = editor.page
    command = "(name) => window.app.extensionManager.command.execute(name)"

    # Templates: today's official ones that run here, the first of them Z-Image-Turbo's.
    await page.evaluate(command, "Comfy.BrowseTemplates")
    dialog = page.locator('[role="dialog"]:visible').first
    await dialog.get_by_text("Z-Image-Turbo: Text to Image").first.wait_for(timeout=UI_TIMEOUT_MS)
    assert await dialog.get_by_text("No templates found").count() == 0
    await page.keyboard.press("Escape")
    await dialog.wait_for(state="hidden", timeout=UI_TIMEOUT_MS)

    # Model Library: the checkpoints folder lists our file.
    await page.evaluate(command, "Workspace.ToggleSidebarTab.model-library")
    await page.get_by_text("checkpoints", exact=True).first.click(timeout=UI_TIMEOUT_MS)
    await page.get_by_text("tiny_sd1").first.wait_for(timeout=UI_TIMEOUT_MS)

    # Assets -> Imported: the input folder's image.
    await page.evaluate(command, "Workspace.ToggleSidebarTab.assets")
    await page.get_by_text("Imported", exact=True).first.click(timeout=UI_TIMEOUT_MS)
    await page.get_by_text("start", exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)  # start.png's card
    await page.locator('img[src*="filename=start.png"]').first.wait_for(timeout=UI_TIMEOUT_MS)
    assert await page.get_by_text("No imported files found").count() == 0
    assert editor.page_errors == [] and editor.foreign_responses() == []
    for path in ("/templates/index.json", "/experiment/models/checkpoints", "/internal/files/input"):
        assert any(status == 200 and urlsplit(url).path.endswith(path) for status, url in editor.responses), path


async def test_an_empty_checkpoint_folder_is_explained_in_the_editor(editor_factory) -> None:
    editor = await editor_factory()
    await editor.open()
    toast = editor.page.get_by_text("No checkpoints yet").first
    await toast.wait_for(timeout=UI_TIMEOUT_MS)
    await editor.page.get_by_text("python -m tests.fixtures.checkpoints").first.wait_for(timeout=UI_TIMEOUT_MS)
    assert editor.page_errors == []
