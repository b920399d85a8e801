"""Each network's DIFFUSION_MODEL wrapper layout (`wrapper_arguments`, ComfyUI's `_forward` order)
names inputs the network takes: the positional ones a wrapper sees are mapped back by these
names, so a misspelt name would silently drop an input (comfy_core/models/diffusion.py)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import comfy_core.families
from comfy_core.models.diffusion import UNET_WRAPPER_ARGUMENTS

CALL_INPUTS = set(UNET_WRAPPER_ARGUMENTS)


def networks_with_layouts() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(comfy_core.families.__path__, "comfy_core.families."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and "wrapper_arguments" in vars(value) and value.__module__ == info.name:
                found[f"{info.name}.{value.__name__}"] = value
    return found


def test_every_layout_names_inputs_its_network_takes():
    networks = networks_with_layouts()
    assert len(networks) >= 12  # Flux, Flux 2, Wan, Chroma, LTXV, Qwen-Image, HunyuanVideo, HiDream, ...
    for name, network in networks.items():
        layout = network.wrapper_arguments
        assert layout[:1] == ("x",) and len(set(layout)) == len(layout), name
        parameters = inspect.signature(network.forward).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for argument in layout:
            assert argument in CALL_INPUTS or argument in parameters or takes_any, (name, argument)
