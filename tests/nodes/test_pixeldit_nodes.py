"""PiDConditioning (nodes/pixeldit_nodes.py): ComfyUI's schema (tests/data/object_info_2026/
PiDConditioning.json is compared by tests/nodes/test_object_info_2026.py), the latent taken into
PiD's space by the chosen format, `degrade_sigma` set, inputs never mutated; and a PiD decode end
to end on tiny files through the node (UNETLoader, the entry's `lq_latent` reaching the network)."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.pixeldit_nodes import LATENT_FORMATS, pid_conditioning


def _conditioning():
    return [[torch.randn(1, 5, 32), {"pooled_output": None, "attention_mask": torch.ones(1, 5)}]]


@pytest.mark.parametrize("name,scale,shift", [("flux", 0.3611, 0.1159), ("sd3", 1.5305, 0.0609)])
def test_the_latent_goes_into_pids_space(name, scale, shift):
    positive = _conditioning()
    samples = torch.randn(1, 16, 4, 6)
    (out,) = pid_conditioning(positive, {"samples": samples}, name, 0.25)
    entry = out[0][1]
    torch.testing.assert_close(entry["lq_latent"], (samples - shift) * scale)
    assert entry["degrade_sigma"] == 0.25 and isinstance(entry["degrade_sigma"], float)
    assert entry["attention_mask"] is positive[0][1]["attention_mask"]
    assert "lq_latent" not in positive[0][1]  # the input is not changed
    assert out[0][0] is positive[0][0]


def test_flux2_latents_pass_unscaled():
    samples = torch.randn(1, 128, 2, 2)
    (out,) = pid_conditioning(_conditioning(), {"samples": samples}, "flux2", 0.0)
    torch.testing.assert_close(out[0][1]["lq_latent"], samples)
    assert LATENT_FORMATS == ("flux", "sd3", "flux2")


def test_bad_inputs_are_node_errors():
    with pytest.raises(NodeInputError):
        pid_conditioning(_conditioning(), {"samples": torch.zeros(1, 16, 2, 2)}, "sdxl", 0.0)
    with pytest.raises(NodeInputError):
        pid_conditioning(_conditioning(), {"nothing": 1}, "flux", 0.0)


def test_pid_decodes_a_latent_through_the_conditioning(tmp_path):
    """PiD on a tiny file: the model's extra inputs carry the node's latent and sigma, and the
    network's output depends on them."""
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_pixeldit import WRITERS_PIXELDIT

    path = tmp_path / "pid_flux1_1024_to_4096_4step_bf16.safetensors"
    WRITERS_PIXELDIT["unet_pid"](path)
    model = load_diffusion_model(path).model
    assert model.family.name == "pid"
    samples = torch.randn(1, 16, 2, 2, generator=torch.Generator().manual_seed(0))
    (cond,) = pid_conditioning(_conditioning(), {"samples": samples}, "flux", 0.5)
    extra = model.extra_inputs(**cond[0][1])
    assert set(extra) == {"attention_mask", "lq_latent", "degrade_sigma"}
    torch.testing.assert_close(extra["degrade_sigma"], torch.tensor([0.5]))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    network = model.diffusion_model.float()
    with torch.no_grad():
        out = network(x, torch.tensor([500.0]), cond[0][0], **extra)
        other = network(x, torch.tensor([500.0]), cond[0][0], **dict(extra, lq_latent=extra["lq_latent"] + 1))
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert not torch.allclose(out, other)
