"""Native test nodes for the --ray tests, on top of the web test nodes (tests/web/web_test_nodes.py):
a gate that blocks (interruptibly, reporting progress) until a file exists, and an output node
that says which worker process ran it and for which "checkpoint" (a loader input, for affinity).
Workers build their registry with `make_ray_test_registry` (RaySettings.registry_factory)."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from graph.context import current
from graph.native import Input, Output, String, node
from tests.web.web_test_nodes import ALL as WEB_TEST_NODES

REGISTRY_FACTORY = "tests.web.ray_test_nodes:make_ray_test_registry"


@node("RayTestGate", category="test", not_idempotent=True,
      inputs=[Input("value", "INT"), String("gate", default="")], outputs=[Output("INT")])
def ray_test_gate(value: int, gate: str):
    """Waits until the file `gate` (an absolute path) exists; progress ticks show it is running."""
    ctx, path, waiter, tick = current(), Path(gate), threading.Event(), 0
    while not path.exists():
        tick += 1
        ctx.progress(tick % 100, 100)  # raises when the prompt is interrupted
        waiter.wait(0.02)
    return (value,)


@node("RayTestWho", category="test", output_node=True,
      inputs=[Input("value", "INT"), String("ckpt_name", default="none.safetensors")], outputs=[])
def ray_test_who(value: int, ckpt_name: str):
    return {"ui": {"pid": [os.getpid()], "ckpt": [ckpt_name], "values": [value]}, "result": ()}


@node("RayTestCopy", category="test", output_node=True, inputs=[String("image", default="")],
      outputs=[Output("INT")])
def ray_test_copy(image: str):
    """Copies the input file `image` (an upload) into the output folder as `copy_<image>`;
    outputs its size."""
    from nodes.environment import current_env

    env = current_env()
    data = (env.input_dir / image).read_bytes()
    env.output_dir.mkdir(parents=True, exist_ok=True)
    (env.output_dir / f"copy_{image}").write_bytes(data)
    return {"ui": {"images": [{"filename": f"copy_{image}", "subfolder": "", "type": "output"}]},
            "result": (len(data),)}


@node("RayTestPackSend", category="test", output_node=True, inputs=[Input("value", "INT")], outputs=[])
def ray_test_pack_send(value: int):
    """What packs do from a node: `PromptServer.instance.send_sync` to the prompt's client and to
    everyone, a progress text, and an unencoded preview (ComfyUI's BinaryEventTypes 2)."""
    from PIL import Image

    import server  # the pack-facing module, as a pack imports it

    instance = server.PromptServer.instance
    info = {"value": value, "client": instance.client_id, "prompt": instance.last_prompt_id, "pid": os.getpid()}
    instance.send_sync("raytest.direct", info, instance.client_id)
    instance.send_sync("raytest.everyone", {"value": value})
    instance.send_progress_text(f"text {value}", current().node_id)
    instance.send_sync(server.BinaryEventTypes.UNENCODED_PREVIEW_IMAGE,
                       ("PNG", Image.new("RGB", (4, 4), (value, 0, 0)), None), instance.client_id)
    return {"ui": {"values": [value]}, "result": ()}


def make_ray_test_registry():
    from graph.registry import Registry

    registry = Registry()
    for fn in [*WEB_TEST_NODES, ray_test_gate, ray_test_who, ray_test_copy, ray_test_pack_send]:
        registry.add_native(fn, builtin=True)
    return registry


def gated(value: int, gate: Path | None = None, *, ckpt: str = "none.safetensors") -> dict:
    """Const -> [Gate] -> Who."""
    prompt = {"1": {"class_type": "WebTestConst", "inputs": {"value": value}},
              "3": {"class_type": "RayTestWho", "inputs": {"value": ["1", 0], "ckpt_name": ckpt}}}
    if gate is not None:
        prompt["2"] = {"class_type": "RayTestGate", "inputs": {"value": ["1", 0], "gate": str(gate)}}
        prompt["3"]["inputs"]["value"] = ["2", 0]
    return prompt
