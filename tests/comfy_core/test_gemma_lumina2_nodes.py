"""CLIPTextEncodeLumina2 (nodes/lumina2_nodes.py): ComfyUI 0.3.64's object_info entry, the system
prompt template, and Lumina 2 end to end on tiny files: UNETLoader + CLIPLoader type "lumina2" with
a Gemma 2 file + CLIPTextEncodeLumina2 + KSampler."""
from __future__ import annotations

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.registry import Registry
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.lumina2_nodes import SYSTEM_PROMPTS, clip_text_encode_lumina2, lumina2_prompt
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.gemma_files import tiny_gemma_state_dict, write_gemma_file
from tests.fixtures.lumina2_files import write_lumina2_unet
from tests.fixtures.object_info_parity import comfyui_object_info, differences

NODE = "CLIPTextEncodeLumina2"


def test_object_info_is_comfyuis(tmp_path):
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert differences({NODE: ours[NODE]}, theirs) == {}
    assert {k: v for k, v in ours[NODE].items() if k in theirs[NODE]} == theirs[NODE]


def test_the_prompt_is_comfyuis_template():
    assert lumina2_prompt("superior", "a cat") == (
        "You are an assistant designed to generate superior images with the superior degree of image-text "
        "alignment based on textual prompts or user prompts. <Prompt Start> a cat")
    assert lumina2_prompt("alignment", "").startswith(SYSTEM_PROMPTS["alignment"] + " <Prompt Start> ")
    with pytest.raises(NodeInputError, match="system_prompt"):
        lumina2_prompt("best", "a cat")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lumina2_nodes")
    write_gemma_file(root / "models" / "text_encoders" / "gemma_2_2b_fp16.safetensors", tiny_gemma_state_dict(seed=2))
    write_lumina2_unet(root / "models", seed=3)
    return root


@pytest.fixture
def env(root):
    environment = Environment.rooted_at(root, mmap=False)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_lumina2_runs_end_to_end(env):
    from nodes.sd3_nodes import empty_sd3_latent_image
    from nodes.loaders import clip_loader, unet_loader
    from nodes.sampling import ksampler

    (clip,) = clip_loader("gemma_2_2b_fp16.safetensors", "lumina2")
    (model,) = unet_loader("lumina2_tiny_comfy.safetensors", "default")
    (positive,) = clip_text_encode_lumina2("superior", "a photo of a cat", clip)
    (negative,) = clip_text_encode_lumina2("superior", "", clip)
    expected = clip.encode_from_tokens(clip.tokenize(lumina2_prompt("superior", "a photo of a cat")))
    torch.testing.assert_close(positive[0][0], expected, atol=0, rtol=0)
    assert positive[0][0].shape[-1] == 32 and positive[0][1]["pooled_output"] is None
    assert positive[0][1]["attention_mask"].shape == positive[0][0].shape[:2]
    (latent,) = empty_sd3_latent_image(32, 32, 1)
    (out,) = ksampler(model, 5, 2, 4.0, "euler", "simple", positive, negative, latent)
    (again,) = ksampler(model, 5, 2, 4.0, "euler", "simple", positive, negative, latent)
    (other,) = ksampler(model, 5, 2, 4.0, "euler", "simple",
                        clip_text_encode_lumina2("alignment", "a photo of a cat", clip)[0], negative, latent)
    samples = out["samples"]
    assert samples.shape == (1, 16, 4, 4) and torch.isfinite(samples).all()
    assert torch.equal(samples, again["samples"]) and not torch.equal(samples, other["samples"])


def test_a_missing_clip_is_a_node_error():
    with pytest.raises(NodeInputError, match="clip"):
        clip_text_encode_lumina2("superior", "a cat", None)


def test_a_single_file_lumina2_checkpoint_loads_its_gemma_and_tokenizer(tmp_path):
    """ComfyUI's all-in-one layout: the NextDiT under `model.diffusion_model.`, Gemma under
    `text_encoders.gemma2_2b.transformer.`, the SentencePiece model as `text_encoders.spiece_model`
    (what ComfyUI's CLIP.get_sd saves), the Flux VAE under `vae.`; the same conditioning as the
    split Gemma file, and a missing tokenizer is a typed refusal."""
    from comfy_core.checkpoint.errors import ShapeMismatchError
    from comfy_core.loading import load_checkpoint
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.gemma_files import tiny_spiece_model
    from tests.fixtures.lumina2_files import tiny_lumina2_state_dict
    from tests.fixtures.vae16_files import tiny_vae16_state_dict

    gemma = tiny_gemma_state_dict(seed=4)
    state = tiny_lumina2_state_dict(prefix="model.diffusion_model.")
    state.update({"text_encoders.gemma2_2b.transformer." + k: v for k, v in gemma.items()})
    state.update({"vae." + k: v for k, v in tiny_vae16_state_dict("bfl").items()})
    bare = save(dict(state), tmp_path / "bare" / "lumina2_tiny.safetensors")
    state["text_encoders.spiece_model"] = torch.frombuffer(bytearray(tiny_spiece_model()), dtype=torch.uint8)
    model, clip, vae = load_checkpoint(save(state, tmp_path / "checkpoints" / "lumina2_tiny.safetensors"))
    assert model.model.family.name == "lumina2" and type(clip.cond_stage_model).__name__ == "LuminaModel"
    split = load_text_encoders([write_gemma_file(tmp_path / "te" / "gemma.safetensors", gemma, dtype=torch.float32)],
                               "lumina2")
    prompt = lumina2_prompt("superior", "a red cat")
    torch.testing.assert_close(clip.encode_from_tokens(clip.tokenize(prompt)),
                               split.encode_from_tokens(split.tokenize(prompt)), atol=1e-6, rtol=1e-6)
    with pytest.raises(ShapeMismatchError, match="no tokenizer"):
        load_checkpoint(bare)
