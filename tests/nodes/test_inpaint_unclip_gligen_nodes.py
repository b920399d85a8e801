"""InpaintModelConditioning, InstructPixToPixConditioning, unCLIPCheckpointLoader,
unCLIPConditioning, GLIGENLoader, GLIGENTextBoxApply: ComfyUI's declarations and semantics
(expected values computed here from nodes.py / nodes_ip2p.py), and their typed errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.clip_vision.output import ClipVisionOutput
from nodes.errors import NodeInputError
from nodes.gligen import gligen_loader, gligen_textbox_apply
from nodes.inpaint_conditioning import inpaint_model_conditioning, instruct_pix_to_pix_conditioning
from nodes.unclip import unclip_checkpoint_loader, unclip_conditioning

NODES = ("unCLIPCheckpointLoader", "unCLIPConditioning", "GLIGENLoader", "GLIGENTextBoxApply",
         "InpaintModelConditioning", "InstructPixToPixConditioning")


def test_declared_exactly_as_comfyui_declares_them(tmp_path):
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment
    from tests.fixtures.object_info_parity import comfyui_object_info, differences

    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert set(NODES) <= set(ours)
    assert differences({n: ours[n] for n in NODES}, {n: theirs[n] for n in NODES}) == {}


class PoolVAE:
    """A deterministic stand-in VAE: crops to multiples of 8 as ComfyUI's does, 8x8 mean pool."""

    def __init__(self):
        self.seen = []

    def encode(self, pixels):
        self.seen.append(pixels)
        h, w = pixels.shape[1] // 8 * 8, pixels.shape[2] // 8 * 8
        y0, x0 = pixels.shape[1] % 8 // 2, pixels.shape[2] % 8 // 2
        pooled = F.avg_pool2d(pixels[:, y0:y0 + h, x0:x0 + w, :3].movedim(-1, 1), 8)
        return torch.cat([pooled, pooled[:, :1]], 1)

    def decode(self, latent):
        raise AssertionError("not used")


def _cond(tag):
    return [[torch.zeros(1, 2, 8), {"tag": tag}]]


def test_inpaint_model_conditioning_follows_comfyuis_formulas():
    g = torch.Generator().manual_seed(0)
    pixels = torch.rand(2, 21, 27, 3, generator=g)  # not multiples of 8: cropped around the centre
    mask = torch.rand(1, 10, 9, generator=g)
    vae = PoolVAE()
    positive, negative = _cond("p"), _cond("n")
    pos, neg, latent = inpaint_model_conditioning(positive, negative, vae, pixels, mask, True)
    big = F.interpolate(mask.reshape(1, 1, 10, 9), size=(21, 27), mode="bilinear")
    crop_mask = big[:, :, 2:18, 1:25]  # offsets (21 % 8) // 2 = 2, (27 % 8) // 2 = 1
    grey = pixels[:, 2:18, 1:25].clone()
    keep = 1.0 - crop_mask.round()[:, 0]
    for c in range(3):
        grey[..., c] = (grey[..., c] - 0.5) * keep + 0.5
    assert torch.equal(vae.seen[0], grey)
    assert torch.equal(pos[0][1]["concat_mask"], crop_mask) and pos[0][1]["tag"] == "p" and neg[0][1]["tag"] == "n"
    assert torch.equal(pos[0][1]["concat_latent_image"], vae.encode(grey))
    assert pos[0][1]["concat_latent_image"] is neg[0][1]["concat_latent_image"]
    assert torch.equal(latent["samples"], vae.encode(pixels)) and torch.equal(latent["noise_mask"], crop_mask)
    assert "concat_mask" not in positive[0][1]  # inputs untouched
    assert "noise_mask" not in inpaint_model_conditioning(positive, negative, vae, pixels, mask, False)[2]


def test_instruct_pix_to_pix_conditioning_gives_an_empty_latent_and_the_image_latent():
    pixels = torch.rand(1, 19, 16, 3, generator=torch.Generator().manual_seed(1))
    vae = PoolVAE()
    pos, neg, latent = instruct_pix_to_pix_conditioning(_cond("p"), _cond("n"), vae, pixels)
    assert torch.equal(vae.seen[0], pixels[:, 1:17])
    expected = vae.encode(pixels[:, 1:17])
    assert torch.equal(pos[0][1]["concat_latent_image"], expected) and torch.equal(neg[0][1]["concat_latent_image"], expected)
    assert torch.equal(latent["samples"], torch.zeros_like(expected))


def _embeds():
    out = ClipVisionOutput()
    out.image_embeds = torch.ones(1, 8)
    return out


def test_unclip_conditioning_appends_to_every_entry_and_strength_zero_is_a_no_op():
    embeds = _embeds()
    cond = _cond("p") + [[torch.zeros(1, 2, 8), {"unclip_conditioning": [{"earlier": True}]}]]
    out = unclip_conditioning(cond, embeds, 0.5, 0.2)[0]
    added = {"clip_vision_output": embeds, "strength": 0.5, "noise_augmentation": 0.2}
    assert out[0][1]["unclip_conditioning"] == [added]
    assert out[1][1]["unclip_conditioning"] == [{"earlier": True}, added]
    assert cond[1][1]["unclip_conditioning"] == [{"earlier": True}]
    assert unclip_conditioning(cond, embeds, 0.0, 0.2)[0] is cond


def test_unclip_conditioning_errors_are_typed(in_node):
    with in_node("unCLIPConditioning", "4"), pytest.raises(NodeInputError, match="clip_vision_output"):
        unclip_conditioning(_cond("p"), object(), 1.0, 0.0)
    with pytest.raises(NodeInputError, match="noise_augmentation"):
        unclip_conditioning(_cond("p"), _embeds(), 1.0, 1.5)


@pytest.fixture
def models_env(tmp_path):
    from graph.context import NodeContext, reset_current, set_current
    from nodes.environment import Environment
    from tests.fixtures.checkpoints import write_tiny_checkpoint
    from tests.fixtures.checkpoints_variants import write_tiny_gligen, write_tiny_variant

    write_tiny_variant(tmp_path / "models" / "checkpoints", "sd21_unclip")
    write_tiny_checkpoint(tmp_path / "models" / "checkpoints", "sd1")
    write_tiny_gligen(tmp_path / "models" / "gligen", "sd1")
    env = Environment.rooted_at(tmp_path)
    token = set_current(NodeContext("p", "1", "1", None, env, class_type="test"))
    yield env
    reset_current(token)


def test_unclip_checkpoint_loader_returns_the_files_image_encoder(models_env):
    model, clip, vae, clip_vision = unclip_checkpoint_loader("tiny_sd21_unclip.safetensors")
    assert model.model.family.name == "sd21_unclip" and clip is not None and vae is not None
    out = clip_vision.encode_image(torch.rand(1, 32, 32, 3))
    assert out.image_embeds.shape == (1, model.model.adm_channels // 2)
    assert unclip_checkpoint_loader("tiny_sd1.safetensors")[3] is None  # no encoder in the file


def test_gligen_loader_and_text_box_apply(models_env):
    from comfy_core.loading import load_checkpoint

    gligen = gligen_loader("tiny_gligen_sd1.safetensors")[0]
    _model, clip, _vae = load_checkpoint(models_env.folders.full_path("checkpoints", "tiny_sd1.safetensors"),
                                         output_vae=False)
    cond = _cond("p")
    once = gligen_textbox_apply(cond, clip, gligen, "a dog", 64, 40, 16, 8)[0]
    twice = gligen_textbox_apply(once, clip, gligen, "a cat", 8, 8, 0, 0)[0]
    kind, model, boxes = twice[0][1]["gligen"]
    assert kind == "position" and model is gligen and [b[1:] for b in boxes] == [(5, 8, 1, 2), (1, 1, 0, 0)]
    _cond_tensor, pooled = clip.encode_from_tokens(clip.tokenize("a dog"), return_pooled="unprojected")
    assert torch.equal(boxes[0][0], pooled)
    assert "gligen" not in cond[0][1] and len(once[0][1]["gligen"][2]) == 1
    with pytest.raises(NodeInputError, match="gligen_textbox_model"):
        gligen_textbox_apply(cond, clip, object(), "x", 8, 8, 0, 0)
    with pytest.raises(NodeInputError, match="gligen_name"):
        gligen_loader("missing.safetensors")
