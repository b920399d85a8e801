"""A ComfyUI V1 node pack for server tests that run `main.py` as a subprocess (restart
durability, `main.py run`, the benchmark). Copied into a temporary `custom_nodes/` folder."""
from __future__ import annotations

import time


class SrvConst:
    CATEGORY = "webtest"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 1, "min": 0, "max": 255})}}

    def run(self, value):
        return (value,)


class SrvGate:
    """Waits (interruptibly, reporting progress) until a file named `gate` exists in the output folder."""

    CATEGORY = "webtest"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True}), "gate": ("STRING", {"default": "gate"})}}

    def run(self, value, gate):
        from graph.context import current
        from nodes.environment import current_env

        ctx, path = current(), current_env().output_dir / gate
        tick = 0
        while not path.exists():
            tick += 1
            ctx.progress(tick % 100, 100)
            time.sleep(0.05)
        return (value,)


class SrvSave:
    """Writes a 2x2 PNG whose red channel is `value`."""

    CATEGORY = "webtest"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True}),
                             "filename_prefix": ("STRING", {"default": "srv"})}}

    def run(self, value, filename_prefix):
        from PIL import Image

        from nodes.environment import current_env

        out = current_env().output_dir
        out.mkdir(parents=True, exist_ok=True)
        name = f"{filename_prefix}_{value:03d}.png"
        Image.new("RGB", (2, 2), (value, 0, 0)).save(out / name)
        return {"ui": {"images": [{"filename": name, "subfolder": "", "type": "output"}]}, "result": ()}


NODE_CLASS_MAPPINGS = {"SrvConst": SrvConst, "SrvGate": SrvGate, "SrvSave": SrvSave}
NODE_DISPLAY_NAME_MAPPINGS = {"SrvGate": "Wait For Gate File"}


def srv_prompt(value: int, *, gate: str | None = None, prefix: str = "srv") -> dict:
    """Const -> [Gate] -> Save."""
    prompt = {"1": {"class_type": "SrvConst", "inputs": {"value": value}},
              "3": {"class_type": "SrvSave", "inputs": {"value": ["1", 0], "filename_prefix": prefix}}}
    if gate is not None:
        prompt["2"] = {"class_type": "SrvGate", "inputs": {"value": ["1", 0], "gate": gate}}
        prompt["3"]["inputs"]["value"] = ["2", 0]
    return prompt
