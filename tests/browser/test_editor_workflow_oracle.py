"""The converter (graph/editor_workflow.py) against its oracle: ComfyUI's own editor, served by
our server in Debian's Chromium, loads the same saved workflow and builds its prompt
(`app.graphToPrompt()`, what Run sends); both prompts must be equal (titles aside). Subgraphs,
nested ones, promoted widgets, bypass inside, renumbered inner ids, two official templates, saves
older than today's schemas (tests/graph/test_editor_workflow_saved_2026.py); and
the 2026 nodes' dynamic inputs, built in the editor itself and saved by it (nested dynamic combos
of SaveImageAdvanced, ResizeImageMaskNode's options, growing inputs)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import tests.graph.test_editor_workflow_saved_2026 as cases_saved_2026
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
    hand.update(cases_saved_2026.older_saves())
    workflows = {name: _editor_shape(workflow) for name, workflow in hand.items()}
    for path in sorted(TEMPLATES.glob("*.json")):
        workflows[path.stem] = json.loads(path.read_text())
    return workflows


def _bare(prompt: dict) -> dict:
    return {node_id: {"class_type": n["class_type"], "inputs": n["inputs"]} for node_id, n in prompt.items()}


async def _editor(tmp_path: Path):
    state = build_state(ServerConfig(base_dir=tmp_path, listen=("127.0.0.1",), port=0, custom_node_dirs=()))
    runner, urls = await start_server(state, frontend=True)
    playwright = await playwright_api.async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
    page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
    await page.goto(urls[0])
    await page.wait_for_function("() => window.app?.graph?.nodes?.length > 0", timeout=90_000)
    return state, runner, playwright, browser, page


async def test_prompts_equal_the_editors(tmp_path: Path) -> None:
    state, runner, playwright, browser, page = await _editor(tmp_path)
    try:
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


# Built in the editor: each node created, its widgets set (a dynamic combo's callback adds the
# chosen option's widgets), linked, then the graph saved as the editor saves it.
BUILD = """async (c) => {
  const app = window.app, LG = window.LiteGraph, pause = () => new Promise((r) => setTimeout(r, 50));
  app.graph.clear();
  const made = {};
  for (const spec of c.nodes) {
    const node = LG.createNode(spec.type);
    node.pos = [100 + 320 * Object.keys(made).length, 100];
    app.graph.add(node);
    made[spec.key] = node;
  }
  for (const spec of c.nodes) {
    for (const [name, value] of (spec.set || [])) {
      const widget = made[spec.key].widgets.find((w) => w.name === name);
      if (!widget) throw new Error(`no widget ${name} on ${spec.type}`);
      widget.value = value;
      widget.callback?.(value, app.canvas, made[spec.key]);
      await pause();
    }
  }
  for (const [from, slot, to, input] of (c.links || [])) {
    const target = made[to];
    made[from].connect(slot, target, typeof input === 'number' ? input : target.inputs.findIndex((i) => i.name === input));
    await pause();
  }
  return JSON.parse(JSON.stringify(app.graph.serialize()));
}"""

_IMAGE = {"key": "e", "type": "EmptyImage", "set": [["width", 64], ["height", 48]]}
DYNAMIC_CASES = {
    "SaveImageAdvanced png 16-bit": (
        [_IMAGE, {"key": "s", "type": "SaveImageAdvanced", "set": [["format", "png"], ["format.bit_depth", "16-bit"]]}],
        [["e", 0, "s", 0]], {"format": "png", "format.bit_depth": "16-bit", "format.input_color_space": "sRGB"}),
    "SaveImageAdvanced exr linear": (
        [_IMAGE, {"key": "s", "type": "SaveImageAdvanced",
                  "set": [["format", "exr"], ["format.input_color_space", "linear"]]}],
        [["e", 0, "s", 0]], {"format.bit_depth": "32-bit float", "format.input_color_space": "linear"}),
    "SaveImageAdvanced avif animated (nested)": (
        [_IMAGE, {"key": "s", "type": "SaveImageAdvanced", "set": [
            ["format", "avif"], ["format.crf", 30], ["format.save_mode", "animated"],
            ["format.save_mode.fps", 12.5], ["format.save_mode.loop_count", 3]]}],
        [["e", 0, "s", 0]], {"format.crf": 30, "format.save_mode": "animated", "format.save_mode.fps": 12.5,
                             "format.save_mode.loop_count": 3}),
    "SaveImageAdvanced avif still": (
        [_IMAGE, {"key": "s", "type": "SaveImageAdvanced",
                  "set": [["format", "avif"], ["format.bit_depth", "10-bit YUV420"]]}],
        [["e", 0, "s", 0]], {"format.bit_depth": "10-bit YUV420", "format.save_mode": "still images"}),
    "ResizeImageMaskNode dimensions": (
        [_IMAGE, {"key": "r", "type": "ResizeImageMaskNode", "set": [
            ["resize_type", "scale dimensions"], ["resize_type.width", 640], ["resize_type.height", 360]]},
         {"key": "p", "type": "PreviewImage"}],
        [["e", 0, "r", 0], ["r", 0, "p", 0]], {"resize_type.width": 640, "resize_type.height": 360}),
    "ResizeImageMaskNode multiplier": (
        [_IMAGE, {"key": "r", "type": "ResizeImageMaskNode", "set": [
            ["resize_type", "scale by multiplier"], ["resize_type.multiplier", 2.5], ["scale_method", "lanczos"]]},
         {"key": "p", "type": "PreviewImage"}],
        [["e", 0, "r", 0], ["r", 0, "p", 0]], {"resize_type.multiplier": 2.5, "scale_method": "lanczos"}),
    "ResizeImageMaskNode longer side": (
        [_IMAGE, {"key": "r", "type": "ResizeImageMaskNode", "set": [["resize_type", "scale longer dimension"]]},
         {"key": "p", "type": "PreviewImage"}],
        [["e", 0, "r", 0], ["r", 0, "p", 0]], {"resize_type": "scale longer dimension"}),
    "ResizeImageMaskNode match size (linked sub-input)": (
        [_IMAGE, {"key": "f", "type": "EmptyImage"},
         {"key": "r", "type": "ResizeImageMaskNode", "set": [["resize_type", "match size"]]},
         {"key": "p", "type": "PreviewImage"}],
        [["e", 0, "r", 0], ["f", 0, "r", "resize_type.match"], ["r", 0, "p", 0]], {"resize_type": "match size"}),
    "BatchImagesNode growing": (
        [_IMAGE, {"key": "f", "type": "EmptyImage"}, {"key": "g", "type": "EmptyImage"},
         {"key": "b", "type": "BatchImagesNode"}, {"key": "p", "type": "PreviewImage"}],
        [["e", 0, "b", 0], ["f", 0, "b", 1], ["g", 0, "b", 2], ["b", 0, "p", 0]], {}),
    "ComfyMathExpression growing": (
        [{"key": "i", "type": "PrimitiveInt"}, {"key": "j", "type": "PrimitiveFloat"},
         {"key": "m", "type": "ComfyMathExpression", "set": [["expression", "a * b + 1"]]},
         {"key": "p", "type": "PreviewAny"}],
        [["i", 0, "m", 0], ["j", 0, "m", 1], ["m", 0, "p", 0]], {"expression": "a * b + 1"}),
    "StringFormat growing": (
        [{"key": "i", "type": "PrimitiveString"}, {"key": "j", "type": "PrimitiveInt"},
         {"key": "m", "type": "StringFormat"}, {"key": "p", "type": "PreviewAny"}],
        [["i", 0, "m", 0], ["j", 0, "m", 1], ["m", 0, "p", 0]], {}),
}


async def test_dynamic_inputs_built_in_the_editor_equal_its_prompts(tmp_path: Path) -> None:
    state, runner, playwright, browser, page = await _editor(tmp_path)
    try:
        node_defs = state.registry.object_info(state.env)
        different, missing = {}, {}
        for name, (nodes, links, expected) in DYNAMIC_CASES.items():
            saved = await page.evaluate(BUILD, {"nodes": nodes, "links": links})
            ours = _bare(editor_to_prompt(saved, node_defs))
            theirs = _bare(await page.evaluate(
                "async (wf) => { await window.app.loadGraphData(wf, true, true, null);"
                " return (await window.app.graphToPrompt()).output; }", saved))
            if ours != theirs:
                different[name] = {"saved": [n.get("widgets_values") for n in saved["nodes"]],
                                   "ours": ours, "editor": theirs}
            sent = {k: v for node in ours.values() for k, v in node["inputs"].items()}
            if any(sent.get(k, "(absent)") != v for k, v in expected.items()):
                missing[name] = sent
        assert not different, json.dumps(different, indent=1)[:4000]
        assert not missing, json.dumps(missing, indent=1)[:4000]
        grown = [n for n in ours.values() if n["class_type"] == "StringFormat"][0]["inputs"]
        assert set(grown) >= {"values.a", "values.b"}
        await browser.close()
    finally:
        await playwright.stop()
        await runner.cleanup()
