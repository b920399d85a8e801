"""`ControlNetModel` built from ComfyUI's cldm `ControlNet(**config)` keywords (how
Advanced-ControlNet builds SparseCtrl), with `operations` and `dtype` as ComfyUI's."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from comfy_core.controlnet.config import ControlNetConfig
from comfy_core.controlnet.model import ControlNetModel
from comfy_core.models.unet import UNetConfigError
from tests.fixtures.controlnets import controlnet_state_dict

SD1_KWARGS = dict(in_channels=4, model_channels=32, hint_channels=3, num_res_blocks=2, channel_mult=(1, 2, 2, 2),
                  transformer_depth=[1, 1, 1, 1, 1, 1, 0, 0], transformer_depth_middle=1, context_dim=64,
                  use_linear_in_transformer=False, num_heads=8, num_head_channels=-1, image_size=32,
                  use_checkpoint=False, legacy=False)


def test_comfy_kwargs_build_the_detected_structure():
    sd = controlnet_state_dict("sd1")
    detected = ControlNetConfig.detect_from_weights(sd)
    net = ControlNetModel(**SD1_KWARGS, some_pack_option=True)  # extras go to ComfyUI's **kwargs
    assert net.config.unet.transformer_depth == detected.unet.transformer_depth
    assert net.config.hint_channels == 3 and net.model_channels == 32 and net.dims == 2 and net.num_classes is None
    assert set(net.state_dict()) == set(sd)
    net.load_state_dict(sd)
    reference = ControlNetModel(detected)
    reference.load_state_dict(sd)
    gen = torch.Generator().manual_seed(0)
    x, hint = torch.randn(1, 4, 8, 8, generator=gen), torch.rand(1, 3, 64, 64, generator=gen)
    t, ctx = torch.tensor([400.0]), torch.randn(1, 77, 64, generator=gen)
    with torch.no_grad():
        a, b = net(x, hint, t, ctx), reference(x, hint, t, ctx)
    for p, q in zip(a["output"] + a["middle"], b["output"] + b["middle"]):
        assert torch.equal(p, q)


def test_operations_and_dtype_are_used():
    made = []

    class Ops:
        class Linear(nn.Linear):
            def __init__(self, *args, **kwargs):
                made.append("Linear")
                super().__init__(*args, **kwargs)

        class Conv2d(nn.Conv2d):
            def __init__(self, *args, **kwargs):
                made.append("Conv2d")
                super().__init__(*args, **kwargs)

        GroupNorm = nn.GroupNorm
        LayerNorm = nn.LayerNorm

        @classmethod
        def conv_nd(cls, dims, *args, **kwargs):
            return cls.Conv2d(*args, **kwargs)

    net = ControlNetModel(**SD1_KWARGS, operations=Ops, dtype=torch.float16)
    assert isinstance(net.input_hint_block[0], Ops.Conv2d) and isinstance(net.zero_convs[0][0], Ops.Conv2d)
    assert isinstance(net.time_embed[0], Ops.Linear)
    assert net.dtype == torch.float16 and "Linear" in made


def test_missing_or_conflicting_arguments_are_typed_errors():
    with pytest.raises(UNetConfigError, match="hint_channels"):
        ControlNetModel(**{k: v for k, v in SD1_KWARGS.items() if k != "hint_channels"})
    detected = ControlNetConfig.detect_from_weights(controlnet_state_dict("sd1"))
    with pytest.raises(UNetConfigError, match="not both"):
        ControlNetModel(detected, model_channels=32)
    with pytest.raises(UNetConfigError, match="not supported"):
        ControlNetModel(**SD1_KWARGS, use_scale_shift_norm=True)
