"""The Krea 2 style-reference template's conditioning path: TextEncodeQwenImageEditPlus on a CLIPLoader
type "krea2" CLIP (the picture through the Qwen3-VL vision tower, the edit template's system turn cut by
Krea 2's rule), FluxKontextMultiReferenceLatentMethod "index_timestep_zero", and Krea 2's conditions
handing the references and the method to the network."""
from __future__ import annotations

import pytest
import torch

from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("krea2") / "qwen3vl_4b_fp8_scaled.safetensors",
                              dtype=torch.float32, layers=36)
    return load_text_encoders([path], "krea2")


def test_edit_plus_conditioning_carries_the_picture_and_the_method(clip):
    from comfy_core.families.krea2.clip import template_end
    from comfy_core.text_encoders.qwen3vl import Qwen3VLTextEncoder
    from nodes.flux_nodes import flux_kontext_multi_reference_latent_method
    from nodes.qwen_image_nodes import text_encode_qwen_image_edit_plus

    image = torch.rand(1, 48, 64, 3)
    (conditioning,) = text_encode_qwen_image_edit_plus(clip, "cute", None, image, None, None)
    (conditioning,) = flux_kontext_multi_reference_latent_method(conditioning, "index_timestep_zero")
    (cond, extra), = conditioning
    assert extra["reference_latents_method"] == "index_timestep_zero"
    assert cond.shape[-1] == 12 * 64
    # what the encoder saw: the edit template, "Picture 1: " and the vision block after the user turn's opening
    tower = clip.cond_stage_model.encoder(clip.cond_stage_model.slots[0])
    assert isinstance(tower, Qwen3VLTextEncoder)
    tokens = clip.tokenize("Picture 1: <|vision_start|><|image_pad|><|vision_end|>cute", images=[image],
                           llama_template="<|im_start|>system\nx<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
                                          "<|im_start|>assistant\n")
    row = [pair[0] for pair in next(iter(tokens.values()))[0]]
    start = template_end(row, 10 ** 6)
    assert clip.tokenizer.decode([t for t in row[start:start + 3] if not isinstance(t, dict)]) == "Picture 1"


def test_the_references_reach_the_network_with_their_method(tmp_path):
    from comfy_core.families import default_registry
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.template_models_krea2 import tiny_krea2_state_dict

    model = load_diffusion_model(save(tiny_krea2_state_dict(seed=9), tmp_path / "krea2_turbo.safetensors")).model
    conditions = default_registry().get("krea2").conditioning
    ref = torch.randn(1, 16, 4, 4, generator=torch.Generator().manual_seed(0))
    extra = conditions.extra_conds(model, reference_latents=[ref], reference_latents_method="index_timestep_zero")
    x, ctx = torch.randn(1, 16, 4, 4), torch.randn(1, 3, 12 * 64)
    network = model.diffusion_model
    with torch.no_grad():
        with_refs = network(x, torch.tensor([0.5]), ctx, **extra)
        without = network(x, torch.tensor([0.5]), ctx)
    assert torch.equal(extra["ref_latents"][0], model.process_latent_in(ref))
    assert not torch.allclose(with_refs, without)
