"""Save nodes (nodes/model_save.py): files in ComfyUI's layouts with every patch materialized,
loaded back by our loaders into models whose outputs are bit-identical to the patched ones;
ComfyUI's metadata and file naming; --disable-metadata; typed errors."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open

from comfy_core.loading import load_checkpoint, load_vae
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.split.text_encoder_files import load_text_encoders
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.loaders import checkpoint_loader_simple
from nodes.model_merging import clip_merge_simple, model_merge_simple
from nodes.model_save import checkpoint_save, clip_save, model_save, vae_save
from tests.fixtures.checkpoints import write_tiny_checkpoint

PROMPT = {"3": {"class_type": "KSampler", "inputs": {"seed": 1}}}
WORKFLOW = {"workflow": {"nodes": [1, 2]}}


@pytest.fixture
def env(tmp_path):
    # Saving into models/ (ComfyUI's default prefixes are "checkpoints/...", "vae/...") lets the
    # loader nodes find the files. Loading copies the tensors (mmap=False): CPU convolution
    # kernels round differently for weights at unaligned addresses, and zero-copy views of a
    # file sit wherever the file puts them, while patched weights are fresh (aligned) memory.
    return Environment.rooted_at(tmp_path, output_dir=tmp_path / "models", mmap=False)


def _read(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


def _patched(family, ckpt, tmp_path_factory):
    """The checkpoint's model, CLIP and VAE, each patched (a merge with another seed, a VAE diff)."""
    other = write_tiny_checkpoint(tmp_path_factory.mktemp("other") / f"{family}.safetensors", family, seed=7)
    m1, c1, v1 = load_checkpoint(ckpt)
    m2, c2, _ = load_checkpoint(other, output_vae=False)
    (model,) = model_merge_simple(m1, m2, 0.35)
    (clip,) = clip_merge_simple(c1, c2, 0.6)
    vae = v1.clone()
    bias = vae.model_state_dict()["decoder.conv_out.bias"]
    vae.add_patches({"decoder.conv_out.bias": torch.linspace(-0.5, 0.5, bias.numel())})
    return model, clip, vae


def _outputs(model, clip, vae):
    gen = torch.Generator().manual_seed(11)
    unet = model.model.diffusion_model.config
    x = torch.randn(1, 4, 8, 8, generator=gen)
    context = torch.randn(1, 77, unet.context_dim, generator=gen)
    kwargs = {"y": torch.randn(1, unet.adm_in_channels, generator=gen)} if unet.adm_in_channels else {}
    with torch.no_grad(), model.applied() as module:
        eps = module.apply_model(x, torch.tensor([2.0]), c_crossattn=context, **kwargs)
    cond, pooled = clip.encode_from_tokens(clip.tokenize("a red cube"), return_pooled=True)
    pixels = vae.decode(torch.randn(1, 4, 4, 4, generator=gen))
    return eps, cond, pooled, pixels


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_a_saved_checkpoint_loads_back_bit_identical(family, request, tmp_path_factory, env, in_node):
    ckpt = request.getfixturevalue(f"tiny_{family}_ckpt")
    model, clip, vae = _patched(family, ckpt, tmp_path_factory)
    expected = _outputs(model, clip, vae)
    with in_node("CheckpointSave", "9", env=env):
        assert checkpoint_save(model, clip, vae, "checkpoints/ComfyUI", PROMPT, WORKFLOW) == {}
    path = env.output_dir / "checkpoints" / "ComfyUI_00001_.safetensors"
    tensors, metadata = _read(path)
    assert json.loads(metadata["prompt"]) == PROMPT and json.loads(metadata["workflow"]) == WORKFLOW["workflow"]
    assert metadata["modelspec.predict_key"] == "epsilon"
    with in_node("CheckpointLoaderSimple", "1", env=env):
        loaded = checkpoint_loader_simple("ComfyUI_00001_.safetensors")
    got = _outputs(*loaded)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    # The inputs stay patchers with their patches (nothing was baked into them).
    assert model.patches and clip.patcher.patches and vae.patches
    assert not any(k.startswith(("clip_l.", "clip_g.", "diffusion_model.")) for k in tensors)


def test_checkpoint_layout_and_metadata_are_comfyuis(tiny_sdxl_ckpt, tiny_sd1_ckpt, env, in_node):
    model, clip, vae = load_checkpoint(tiny_sdxl_ckpt)
    with in_node("CheckpointSave", "9", env=env):
        checkpoint_save(model, clip, vae, "checkpoints/xl", PROMPT, None)
        checkpoint_save(model, clip, vae, "checkpoints/xl", None, None)
    first, metadata = _read(env.output_dir / "checkpoints" / "xl_00001_.safetensors")
    _, second = _read(env.output_dir / "checkpoints" / "xl_00002_.safetensors")
    assert {k: v for k, v in metadata.items() if k.startswith("modelspec.")} == {
        "modelspec.architecture": "stable-diffusion-xl-v1-base", "modelspec.sai_model_spec": "1.0.0",
        "modelspec.implementation": "sgm", "modelspec.title": "xl 1", "modelspec.predict_key": "epsilon"}
    assert second["modelspec.title"] == "xl 2" and second["prompt"] == ""
    # ComfyUI's SDXL layout: the fixture's keys (written in the original layout) less logit_scale,
    # which this engine does not keep (it does nothing for conditioning).
    with safe_open(tiny_sdxl_ckpt, "pt") as f:
        original = set(f.keys())
    assert set(first) == original - {"conditioner.embedders.1.model.logit_scale"}
    position_ids = first["conditioner.embedders.0.transformer.text_model.embeddings.position_ids"]
    assert position_ids.dtype == torch.int64 and torch.equal(position_ids, torch.arange(77)[None])
    # SD1: ComfyUI drops the DDPM schedule buffers, EMA counters and position ids of the original.
    model, clip, vae = load_checkpoint(tiny_sd1_ckpt)
    with in_node("CheckpointSave", "9", env=env):
        checkpoint_save(model, clip, vae, "sd1", None, None)
    sd1, _ = _read(env.output_dir / "sd1_00001_.safetensors")
    with safe_open(tiny_sd1_ckpt, "pt") as f:
        kept = {k for k in f.keys() if k.startswith(("model.diffusion_model.", "first_stage_model.",
                                                     "cond_stage_model.")) and not k.endswith("position_ids")}
    assert set(sd1) == kept


def test_disable_metadata_drops_the_prompt_but_keeps_modelspec(tiny_sd1_ckpt, tmp_path, in_node):
    env = Environment.rooted_at(tmp_path, disable_metadata=True)
    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)
    with in_node("ModelSave", "2", env=env):
        model_save(model, "diffusion_models/plain", PROMPT, WORKFLOW)
    _, metadata = _read(env.output_dir / "diffusion_models" / "plain_00001_.safetensors")
    assert metadata == {"modelspec.predict_key": "epsilon"}


def test_model_save_writes_the_diffusion_model_alone_and_v_prediction_markers(tiny_sd2v_ckpt, env, in_node):
    model, _, _ = load_checkpoint(tiny_sd2v_ckpt, output_vae=False, output_clip=False)
    assert model.model.model_sampling.prediction == "v"
    with in_node("ModelSave", "2", env=env):
        model_save(model, "diffusion_models/v", PROMPT, None)
    path = env.output_dir / "diffusion_models" / "v_00001_.safetensors"
    tensors, metadata = _read(path)
    assert metadata["modelspec.predict_key"] == "v" and "modelspec.architecture" not in metadata
    assert tensors.pop("v_pred").shape == (0,)
    assert all(k.startswith("model.diffusion_model.") for k in tensors)
    assert set(tensors) == {"model." + k for k in model.model_state_dict("diffusion_model.")}
    reloaded = load_diffusion_model(path)
    assert reloaded.model.model_sampling.prediction == "v"
    assert all(torch.equal(reloaded.model_state_dict()[k], v) for k, v in model.model_state_dict().items())


def test_clip_save_writes_one_file_per_encoder_with_the_patches_applied(tiny_sdxl_ckpt, tmp_path_factory, env,
                                                                         in_node):
    _, clip, _ = _patched("sdxl", tiny_sdxl_ckpt, tmp_path_factory)
    with in_node("CLIPSave", "4", env=env):
        clip_save(clip, "text_encoders/mix", PROMPT, None)
    folder = env.output_dir / "text_encoders"
    assert sorted(p.name for p in folder.iterdir()) == ["mix_clip_g_00001_.safetensors", "mix_clip_l_00001_.safetensors"]
    with clip.patcher.applied() as encoders:
        for slot in ("clip_l", "clip_g"):
            tensors, metadata = _read(folder / f"mix_{slot}_00001_.safetensors")
            assert metadata["format"] == "pt" and json.loads(metadata["prompt"]) == PROMPT
            # ComfyUI's keys: the slot's transformers state dict, `clip_x.transformer.` stripped.
            expected = encoders.encoder(slot).transformer.state_dict()
            assert set(tensors) == set(expected)
            assert [k for k in tensors if not torch.equal(tensors[k], expected[k])] == []
    assert clip.patcher.patches  # the input keeps its patches


def test_a_saved_sd1_text_encoder_loads_back_bit_identical(tiny_sd1_ckpt, tmp_path_factory, env, in_node):
    _, clip, _ = _patched("sd1", tiny_sd1_ckpt, tmp_path_factory)
    with in_node("CLIPSave", "4", env=env):
        clip_save(clip, "text_encoders/sd1", None, None)
    reloaded = load_text_encoders([env.output_dir / "text_encoders" / "sd1_clip_l_00001_.safetensors"],
                                  "stable_diffusion")
    tokens = clip.tokenize("a red cube")
    for a, b in zip(reloaded.encode_from_tokens(tokens, return_pooled=True),
                    clip.encode_from_tokens(tokens, return_pooled=True)):
        assert torch.equal(a, b)


def test_vae_save_materializes_its_patches(tiny_sd1_ckpt, tmp_path_factory, env, in_node):
    _, _, vae = _patched("sd1", tiny_sd1_ckpt, tmp_path_factory)
    with in_node("VAESave", "5", env=env):
        vae_save(vae, "vae/ComfyUI_vae", None, WORKFLOW)
    path = env.output_dir / "vae" / "ComfyUI_vae_00001_.safetensors"
    tensors, metadata = _read(path)
    assert metadata == {"prompt": "", "workflow": json.dumps(WORKFLOW["workflow"])}
    assert all(k.startswith(("encoder.", "decoder.", "quant_conv.", "post_quant_conv.")) for k in tensors)
    latent = torch.randn(1, 4, 4, 4, generator=torch.Generator().manual_seed(2))
    assert torch.equal(load_vae(path).decode(latent), vae.decode(latent))


def test_a_prefix_leaving_the_output_folder_is_refused(tiny_sd1_ckpt, env, in_node, tmp_path):
    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False, output_clip=False)
    with in_node("ModelSave", "2", env=env), pytest.raises(NodeInputError, match="filename_prefix"):
        model_save(model, "../escape", None, None)
    assert not (tmp_path / "escape_00001_.safetensors").exists()
    with in_node("CheckpointSave", "2", env=env), pytest.raises(NodeInputError, match="clip"):
        checkpoint_save(model, None, None, "x", None, None)
    shutil.rmtree(env.output_dir, ignore_errors=True)
