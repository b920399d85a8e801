"""Our default workflow (web/extensions/default_workflow.json) is well formed, and, converted to
an API prompt the way the editor does it, passes validation against our real nodes."""
from __future__ import annotations

import json
from pathlib import Path

from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from web.frontend import OWN_EXTENSION_DIR

WORKFLOW = json.loads((OWN_EXTENSION_DIR / "default_workflow.json").read_text())
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}


def test_the_default_workflow_is_the_text_to_image_chain() -> None:
    nodes = {n["id"]: n for n in WORKFLOW["nodes"]}
    assert sorted(n["type"] for n in nodes.values()) == sorted(
        ["CheckpointLoaderSimple", "CLIPTextEncode", "CLIPTextEncode", "KSampler", "EmptyLatentImage",
         "VAEDecode", "SaveImage"])
    assert WORKFLOW["version"] == 0.4
    assert WORKFLOW["last_node_id"] == max(nodes) and WORKFLOW["last_link_id"] == max(l[0] for l in WORKFLOW["links"])
    # Every link is recorded at both ends, with matching types.
    for link_id, src, src_slot, dst, dst_slot, type_ in WORKFLOW["links"]:
        assert link_id in nodes[src]["outputs"][src_slot]["links"]
        assert nodes[src]["outputs"][src_slot]["type"] == type_
        assert nodes[dst]["inputs"][dst_slot]["link"] == link_id
        assert nodes[dst]["inputs"][dst_slot]["type"] == type_
    edges = {(nodes[s]["type"], nodes[d]["type"], nodes[d]["inputs"][ds]["name"])
             for _, s, _, d, ds, _ in WORKFLOW["links"]}
    assert ("CheckpointLoaderSimple", "KSampler", "model") in edges
    assert ("EmptyLatentImage", "KSampler", "latent_image") in edges
    assert ("CLIPTextEncode", "KSampler", "positive") in edges and ("CLIPTextEncode", "KSampler", "negative") in edges
    assert ("KSampler", "VAEDecode", "samples") in edges and ("VAEDecode", "SaveImage", "images") in edges


def to_api_prompt(workflow: dict, object_info: dict) -> dict:
    """The editor's graph-to-prompt conversion, for what this workflow uses: links by input
    name, widget values in declaration order (an INT named seed/noise_seed, or one with
    `control_after_generate`, is followed by its control widget's value, which is skipped),
    and a combo without a saved value takes its first option, as the editor's widget does."""
    nodes = {n["id"]: n for n in workflow["nodes"]}
    links = {l[0]: l for l in workflow["links"]}
    prompt = {}
    for node in workflow["nodes"]:
        info = object_info[node["type"]]
        linked = {i["name"]: links[i["link"]] for i in node.get("inputs", []) if i.get("link") is not None}
        values = list(node.get("widgets_values", []))
        inputs: dict = {}
        for section in ("required", "optional"):
            for name in info["input_order"].get(section, []):
                spec = info["input"][section][name]
                if name in linked:
                    link = linked[name]
                    inputs[name] = [str(link[1]), link[2]]
                    continue
                type_ = "COMBO" if isinstance(spec[0], list) else spec[0]
                if type_ not in WIDGET_TYPES:
                    continue
                options = spec[1] if len(spec) > 1 else {}
                if values:
                    inputs[name] = values.pop(0)
                    if type_ == "INT" and (options.get("control_after_generate") or name in ("seed", "noise_seed")):
                        values.pop(0)
                elif isinstance(spec[0], list):
                    inputs[name] = options.get("default", spec[0][0] if spec[0] else None)
                else:
                    inputs[name] = options.get("default")
        assert values == [], f"{node['type']}: widgets_values has {len(values)} values too many"
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    assert set(nodes) == {int(k) for k in prompt}
    return prompt


async def test_the_default_workflow_validates_against_our_nodes(tmp_path: Path) -> None:
    registry = Registry()
    register_builtin_nodes(registry)
    assert {n["type"] for n in WORKFLOW["nodes"]} <= set(registry)
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    checkpoints = tmp_path / "models" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "any.safetensors").write_bytes(b"")  # only its name is validated here
    prompt = to_api_prompt(WORKFLOW, registry.object_info(env))
    assert prompt["4"]["inputs"] == {"ckpt_name": "any.safetensors"}
    assert prompt["3"]["inputs"]["steps"] == 20 and prompt["3"]["inputs"]["sampler_name"] == "euler"
    result = await validate_prompt(prompt, registry, env=env)
    assert result.ok, (result.error, result.node_errors)
    assert result.outputs == ["9"]
