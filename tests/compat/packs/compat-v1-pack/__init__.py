"""A fixture pack in ComfyUI's V1 style, using every V1-era module of ComfyUI's import surface."""
import os

import numpy as np
import torch
from aiohttp import web
from PIL import Image

import comfy.model_management
from comfy.cli_args import args
import comfy.samplers
import comfy.sd
import comfy.utils
import folder_paths
import node_helpers
import latent_preview  # noqa: F401 -- imported by many sampler packs
import nodes
from comfy.comfy_types import IO, ComfyNodeABC, InputTypeDict
from comfy_execution.graph import ExecutionBlocker
from comfy_execution.graph_utils import GraphBuilder, is_link
from server import PromptServer

from .helpers import ANY, NUMBER


@PromptServer.instance.routes.get("/compat_v1/ping")
async def ping(request):
    return web.json_response({"pong": True, "client_id": PromptServer.instance.client_id,
                              "output": folder_paths.get_output_directory()})


@PromptServer.instance.routes.post("/compat_v1/stop")
async def stop(request):
    comfy.model_management.interrupt_current_processing()
    return web.json_response({"stopped": True})


class CompatWaitForStop:
    """Loops until the prompt is interrupted (checking comfy.model_management each turn)."""

    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 0})}}

    def run(self, value):
        import time

        for _ in range(2000):
            comfy.model_management.throw_exception_if_processing_interrupted()
            time.sleep(0.01)
        raise RuntimeError("was never interrupted")


class CompatNumber(ComfyNodeABC):
    CATEGORY = "compat"
    RETURN_TYPES = (IO.INT,)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls) -> InputTypeDict:
        return {"required": {"value": (IO.INT, {"default": 1, "min": -100, "max": nodes.MAX_RESOLUTION})}}

    def run(self, value):
        return (value,)


class CompatAdd:
    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"a": (NUMBER,), "b": ("INT", {"default": 1, "min": -1000, "max": 1000})}}

    def run(self, a, b):
        return (a + b,)


class CompatAnyToString:
    """Accepts anything through the AnyType wildcard."""

    CATEGORY = "compat"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"anything": (ANY,)}}

    def run(self, anything):
        return (repr(anything),)


class CompatProgress:
    """Reports progress with a preview through comfy.utils.ProgressBar and sends a custom event."""

    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True}), "steps": ("INT", {"default": 3, "min": 1})},
                "hidden": {"unique_id": "UNIQUE_ID"}}

    def run(self, value, steps, unique_id):
        bar = comfy.utils.ProgressBar(steps)
        preview = Image.new("RGB", (8, 8), (255, 0, 0))
        for step in range(steps):
            comfy.model_management.throw_exception_if_processing_interrupted()
            if step == 0:
                bar.update_absolute(1, steps, ("PNG", preview, None))
            else:
                bar.update(1)
        PromptServer.instance.send_sync("compat.done", {"node": unique_id, "value": value,
                                                        "interrupted": comfy.model_management.processing_interrupted()},
                                        PromptServer.instance.client_id)
        return (value * 10,)


class CompatChain:
    """Expands into `count` CompatAdd nodes built with GraphBuilder's default prefix."""

    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True}), "count": ("INT", {"default": 2, "min": 1})}}

    def run(self, value, count):
        graph = GraphBuilder()
        current = value
        for _ in range(count):
            node = graph.node("CompatAdd", a=current, b=1)
            current = node.out(0)
        assert is_link(current)
        return {"result": (current,), "expand": graph.finalize()}


class CompatGate:
    """Blocks everything downstream when `value` is negative (comfy_execution.graph.ExecutionBlocker)."""

    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"forceInput": True})}}

    def run(self, value):
        return (ExecutionBlocker("negative value") if value < 0 else value,)


class CompatResult:
    """An output node that shows its input, saves a PNG with get_save_image_path, and lists folders."""

    CATEGORY = "compat"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": (ANY,),
                             "sampler": (comfy.samplers.KSampler.SAMPLERS,),
                             "scheduler": (comfy.samplers.KSampler.SCHEDULERS,)},
                "optional": {"ckpt": (["none"] + folder_paths.get_filename_list("checkpoints"),)}}

    def run(self, value, sampler, scheduler, ckpt="none"):
        folder, filename, counter, subfolder, _ = folder_paths.get_save_image_path(
            "compat/result", folder_paths.get_output_directory(), 4, 4)
        name = f"{filename}_{counter:05}_.png"
        Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(os.path.join(folder, name))
        ckpt_path = folder_paths.get_full_path("checkpoints", ckpt) if ckpt != "none" else None
        digest = node_helpers.hasher()(str(value).encode()).hexdigest()[:8]
        return {"ui": {"values": [str(value)], "sampler": [sampler, scheduler],
                       "images": [{"filename": name, "subfolder": subfolder, "type": "output"}],
                       "ckpt": [ckpt_path], "device": [str(comfy.model_management.get_torch_device().type)],
                       "preview": [args.preview_method.value, args.port], "digest": [digest]}}


class CompatCoreNodes:
    """Uses ComfyUI's `nodes` module: the mappings and a built-in node class called directly."""

    CATEGORY = "compat"
    RETURN_TYPES = ("LATENT", "STRING")
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"width": ("INT", {"default": 64, "min": 8, "max": nodes.MAX_RESOLUTION, "step": 8})}}

    def run(self, width):
        latent = nodes.EmptyLatentImage().generate(width, 64, 1)[0]
        info = [type(nodes.NODE_CLASS_MAPPINGS["KSampler"]).__name__,
                str("CompatCoreNodes" in nodes.NODE_CLASS_MAPPINGS),
                nodes.NODE_DISPLAY_NAME_MAPPINGS.get("CompatCoreNodes", "")]
        return (latent, ",".join(info))


class CompatLoadCheckpoint:
    """comfy.sd + comfy.utils loading entry points on a checkpoint from the model folders."""

    CATEGORY = "compat"
    RETURN_TYPES = ("MODEL", "CLIP", "VAE", "INT")
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"ckpt_name": (folder_paths.get_filename_list("checkpoints"),)}}

    def run(self, ckpt_name):
        path = folder_paths.get_full_path_or_raise("checkpoints", ckpt_name)
        model, clip, vae, _ = comfy.sd.load_checkpoint_guess_config(path)
        keys = len(comfy.utils.load_torch_file(path))
        return (model, clip, vae, keys)


class CompatLatentWidth:
    CATEGORY = "compat"
    RETURN_TYPES = ("INT",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"latent": ("LATENT",)}}

    def run(self, latent):
        samples = latent["samples"]
        scaled = comfy.utils.common_upscale(samples, samples.shape[-1] * 2, samples.shape[-2], "nearest-exact",
                                            "disabled")
        assert isinstance(scaled, torch.Tensor)
        return (int(scaled.shape[-1]),)


NODE_CLASS_MAPPINGS = {
    "CompatWaitForStop": CompatWaitForStop, "CompatNumber": CompatNumber, "CompatAdd": CompatAdd, "CompatAnyToString": CompatAnyToString,
    "CompatProgress": CompatProgress, "CompatChain": CompatChain, "CompatGate": CompatGate,
    "CompatResult": CompatResult, "CompatCoreNodes": CompatCoreNodes,
    "CompatLoadCheckpoint": CompatLoadCheckpoint, "CompatLatentWidth": CompatLatentWidth,
}
NODE_DISPLAY_NAME_MAPPINGS = {"CompatCoreNodes": "Core Nodes Facade", "CompatChain": "Chain (expansion)"}
