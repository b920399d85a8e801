"""The converter (graph/editor_workflow.py) against its oracle: ComfyUI's own editor, served by
our server in Debian's Chromium, loads the same saved workflow and builds its prompt
(`app.graphToPrompt()`, what Run sends); both prompts must be equal (titles aside). Subgraphs,
nested ones, promoted widgets, bypass inside, renumbered inner ids and two official templates."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import tests.graph.test_editor_workflow_subgraphs as cases
from graph.editor_workflow import editor_to_prompt

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser, pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's /usr/bin/chromium is not installed"),
]
playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")

from web.app import start_server  # noqa: E402
from web.bootstrap import build_state  # noqa: E402
from web.config import ServerConfig  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


def _editor_shape(workflow: dict) -> dict:
    """The fields the editor's loader expects that the hand-written cases leave out."""
    workflow = copy.deepcopy(workflow)

    def place(nodes: list) -> None:
        for index, node in enumerate(nodes):
            node.setdefault("pos", [120 * index, 100])
            node.setdefault("size", [200, 100])
            node.setdefault("flags", {})
            node.setdefault("order", index)
            node.setdefault("properties", {})

    place(workflow["nodes"])
    for definition in workflow.get("definitions", {}).get("subgraphs", []):
        place(definition["nodes"])
        definition.setdefault("version", 1)
        definition.setdefault("state", {"lastGroupId": 0, "lastNodeId": 0, "lastLinkId": 0, "lastRerouteId": 0})
        definition.setdefault("revision", 0)
        definition.setdefault("config", {})
        definition.setdefault("name", definition["id"])
        definition["inputNode"].setdefault("bounding", [0, 0, 100, 100])
        definition["outputNode"].setdefault("bounding", [600, 0, 100, 100])
        for slot in definition["inputs"] + definition["outputs"]:
            slot.setdefault("id", f"{definition['id']}-{slot['name']}")
        for key, empty in (("widgets", []), ("groups", []), ("extra", {})):
            definition.setdefault(key, empty)
    for key, value in (("version", 0.4), ("last_node_id", 40), ("last_link_id", 40), ("groups", []),
                       ("config", {}), ("extra", {})):
        workflow.setdefault(key, value)
    return workflow


def _workflows() -> dict[str, dict]:
    renumbered = cases._flip_workflow(["x-axis: vertically"])
    renumbered["nodes"][0]["id"] = 5
    renumbered["links"][0][1] = 5
    hand = {
        "promoted value": cases._flip_workflow(["x-axis: vertically"]),
        "bypass inside": cases._flip_workflow(inner_mode=4),
        "muted instance": cases._flip_workflow(host_mode=2),
        "nested": cases._nested_workflow(host_values=["x-axis: vertically"]),
        "renumbered": renumbered,
        "nested proxy widget": cases._nested_proxy_workflow(),
    }
    workflows = {name: _editor_shape(workflow) for name, workflow in hand.items()}
    for path in sorted(TEMPLATES.glob("*.json")):
        workflows[path.stem] = json.loads(path.read_text())
    return workflows


def _bare(prompt: dict) -> dict:
    return {node_id: {"class_type": n["class_type"], "inputs": n["inputs"]} for node_id, n in prompt.items()}


async def test_prompts_equal_the_editors(tmp_path: Path) -> None:
    state = build_state(ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=()))
    runner, urls = await start_server(state, frontend=True)
    playwright = await playwright_api.async_playwright().start()
    try:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
        await page.goto(urls[0])
        await page.wait_for_function("() => window.app?.graph?.nodes?.length > 0", timeout=90_000)
        node_defs = state.registry.object_info(state.env)
        different = {}
        for name, workflow in _workflows().items():
            ours = _bare(editor_to_prompt(workflow, node_defs))
            theirs = _bare(await page.evaluate(
                "async (wf) => { await window.app.loadGraphData(wf, true, true, null);"
                " return (await window.app.graphToPrompt()).output; }", workflow))
            if ours != theirs:
                different[name] = {"ours": ours, "editor": theirs}
        assert not different, json.dumps(different, indent=1)[:4000]
        await browser.close()
    finally:
        await playwright.stop()
        await runner.cleanup()
