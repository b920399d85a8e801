"""`comfy.controlnet` as packs import it: ComfyUI's names over comfy_core.controlnet."""
from __future__ import annotations

import importlib

import torch

from tests.fixtures.controlnets import write_controlnet


def test_comfy_controlnet_names_and_loader(session, tmp_path):
    module = importlib.import_module("comfy.controlnet")
    for name in ("ControlBase", "ControlNet", "ControlLora", "T2IAdapter", "load_controlnet",
                 "UNION_CONTROLNET_TYPES", "StrengthType", "broadcast_image_to"):
        assert hasattr(module, name)
    assert list(module.UNION_CONTROLNET_TYPES)[:2] == ["openpose", "depth"]
    cn = module.load_controlnet(str(write_controlnet(tmp_path / "cn.safetensors")), None, {"dtype": torch.float16})
    assert isinstance(cn, module.ControlNet) and isinstance(cn, module.ControlBase)
    assert cn.control_model.dtype == torch.float16
    assert module.StrengthType.LINEAR_UP.value == 2
