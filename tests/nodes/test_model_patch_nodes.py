"""UNet/CLIP patch nodes (FreeU, FreeU_V2, TomePatchModel, HyperTile, PatchModelAddDownscale,
the attention multipliers, HypernetworkLoader, ModelComputeDtype) and the guidance nodes'
declarations: zero /object_info differences from ComfyUI 0.3.64, torch-free import, patches
on clones only, and sampled results on the tiny SD1 model against independent expectations."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from graph.context import NodeContext, reset_current, set_current
from graph.registry import Registry
from nodes import model_patch_nodes as mp
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.hypernetworks import write_hypernetwork
from tests.fixtures.object_info_parity import comfyui_object_info, differences
from tests.nodes.model_patch_helpers import MY_NODES, sample, snapshot


@pytest.fixture(scope="module")
def sd1(sd1_with_prompts):
    return sd1_with_prompts


def test_object_info_of_these_nodes_is_comfyuis(tmp_path) -> None:
    registry = Registry()
    register_builtin_nodes(registry)
    ours = registry.object_info(Environment.rooted_at(tmp_path))
    theirs = comfyui_object_info()
    assert set(MY_NODES) <= set(ours)
    assert differences({n: ours[n] for n in MY_NODES}, theirs) == {}


def test_node_modules_import_without_torch() -> None:
    code = ("import sys; import nodes.model_patch_nodes, nodes.guidance_nodes; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))


def test_freeu_patches_a_clone_and_changes_the_result(sd1) -> None:
    from comfy_core.model_patches.freeu import FreeU

    before = snapshot(sd1.model)
    (patched,) = mp.freeu(sd1.model, 1.1, 1.2, 0.9, 0.2)
    (v2,) = mp.freeu_v2(sd1.model, 1.3, 1.4, 0.9, 0.2)
    assert snapshot(sd1.model) == before
    assert patched.model_options["transformer_options"]["patches"]["output_block_patch"] == [
        FreeU(((128, 1.1, 0.9), (64, 1.2, 0.2)), 1)]  # tiny SD1: base width 32
    plain = sample(sd1.model, sd1)
    assert not torch.allclose(sample(patched, sd1), plain) and not torch.allclose(sample(v2, sd1), plain)
    # b = 1 and s = 1: the filter is an FFT round trip, so the run stays put up to its rounding.
    torch.testing.assert_close(sample(mp.freeu(sd1.model, 1.0, 1.0, 1.0, 1.0)[0], sd1), plain, rtol=1e-3, atol=1e-2)


def test_tome_ratio_zero_and_hypertile_with_whole_map_tiles_equal_the_unpatched_run(sd1) -> None:
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(mp.tome_patch_model(sd1.model, 0.0)[0], sd1), plain)
    assert torch.equal(sample(mp.hyper_tile(sd1.model, 2048, 2, 0, False)[0], sd1), plain)
    torch.manual_seed(0)
    assert not torch.allclose(sample(mp.tome_patch_model(sd1.model, 0.5)[0], sd1), plain)
    assert not torch.allclose(sample(mp.hyper_tile(sd1.model, 32, 1, 0, False)[0], sd1), plain)
    with pytest.raises(NodeInputError, match="scale_depth"):
        mp.hyper_tile(sd1.model, 256, 2, 0, "yes")


def test_downscale_acts_inside_its_percent_window_only(sd1) -> None:
    plain = sample(sd1.model, sd1)
    # A window the two-step schedule never enters (its sigmas: max, middle, 0).
    (never,) = mp.patch_model_add_downscale(sd1.model, 1, 2.0, 0.99, 1.0, True, "bicubic", "bicubic")
    assert torch.equal(sample(never, sd1), plain)
    (early,) = mp.patch_model_add_downscale(sd1.model, 1, 2.0, 0.0, 0.35, False, "bislerp", "bicubic")
    patches = early.model_options["transformer_options"]["patches"]
    assert "input_block_patch" in patches and "input_block_patch_after_skip" not in patches
    assert not torch.allclose(sample(early, sd1), plain)
    with pytest.raises(NodeInputError, match="downscale_method"):
        mp.patch_model_add_downscale(sd1.model, 1, 2.0, 0.0, 0.35, True, "lanczos", "bicubic")


def test_unet_attention_multipliers_scale_exactly_the_chosen_projection_weights(sd1) -> None:
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(mp.unet_self_attention_multiply(sd1.model, 1.0, 1.0, 1.0, 1.0)[0], sd1), plain)
    (patched,) = mp.unet_cross_attention_multiply(sd1.model, 1.0, 2.0, 0.5, 1.0)
    assert not sd1.model.patches
    key_k = "diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_k.weight"
    key_q = "diffusion_model.middle_block.1.transformer_blocks.0.attn2.to_q.weight"
    key_self = "diffusion_model.middle_block.1.transformer_blocks.0.attn1.to_k.weight"
    original = sd1.model.model_state_dict()
    with patched.applied() as dm:
        weights = dict(dm.named_parameters())
        torch.testing.assert_close(weights[key_k].detach(), original[key_k] * 2.0)
        assert torch.equal(weights[key_q].detach(), original[key_q])
        assert torch.equal(weights[key_self].detach(), original[key_self])
    assert not torch.allclose(sample(patched, sd1), plain)
    (temporal,) = mp.unet_temporal_attention_multiply(sd1.model, 0.5, 1.0, 1.0, 1.0)
    factors = {k: [e.strength_model for e in v] for k, v in temporal.patches.items()}
    assert factors and all(k.endswith((".to_out.0.weight", ".to_out.0.bias")) for k in factors)
    assert all(f == ([0.5] if ".attn1." in k else [1.0]) for k, f in factors.items())


def test_clip_attention_multiply_changes_the_encoding_of_a_clone(tiny_sd1_ckpt) -> None:
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    _, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    plain = clip_text_encode("a red cube", clip)[0][0][0]
    (same,) = mp.clip_attention_multiply(clip, 1.0, 1.0, 1.0, 1.0)
    assert torch.equal(clip_text_encode("a red cube", same)[0][0][0], plain)
    (patched,) = mp.clip_attention_multiply(clip, 1.0, 1.0, 1.0, 0.0)  # no attention output at all
    assert not clip.patcher.patches and patched.patcher.patches
    assert not torch.allclose(clip_text_encode("a red cube", patched)[0][0][0], plain)
    with pytest.raises(NodeInputError, match="clip"):
        mp.clip_attention_multiply(None, 1.0, 1.0, 1.0, 1.0)


def test_hypernetwork_loader_reads_an_a1111_file_from_the_hypernetworks_folder(sd1, tmp_path) -> None:
    from comfy_core.model_patches.hypernetwork import Hypernetwork

    env = Environment.rooted_at(tmp_path)
    folder = tmp_path / "models" / "hypernetworks"
    folder.mkdir(parents=True)
    # Tiny SD1 widths: 32 and 64 channels (self-attention), 64 context (cross-attention).
    write_hypernetwork(folder / "tiny.pt", widths=(32, 64), layer_structure=(1, 2, 1), activation="relu", seed=4)
    assert mp._hypernetwork_files(env) == ["tiny.pt"]
    token = set_current(NodeContext("p", "1", "1", None, env, class_type="HypernetworkLoader"))
    try:
        (patched,) = mp.hypernetwork_loader(sd1.model, "tiny.pt", 1.0)
        (none,) = mp.hypernetwork_loader(sd1.model, "tiny.pt", 0.0)
        (again,) = mp.hypernetwork_loader(sd1.model, "tiny.pt", 1.0)
        with pytest.raises(NodeInputError, match="hypernetwork_name"):
            mp.hypernetwork_loader(sd1.model, "missing.pt", 1.0)
        (folder / "bad.pt").write_bytes(b"not a pickle")
        with pytest.raises(NodeInputError, match="hypernetwork_name"):
            mp.hypernetwork_loader(sd1.model, "bad.pt", 1.0)
    finally:
        reset_current(token)
    patches = patched.model_options["transformer_options"]["patches"]
    assert isinstance(patches["attn1_patch"][0], Hypernetwork) and patches["attn2_patch"] == patches["attn1_patch"]
    assert sorted(patches["attn1_patch"][0].networks) == [32, 64]
    assert "patches" not in sd1.model.model_options["transformer_options"]
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(none, sd1), plain)  # strength 0: k + 0 * mlp(k)
    assert not torch.allclose(sample(patched, sd1), plain)
    # The same file at the same strength gives the same cache key (a re-run hits the cache).
    assert patched.cache_signature() is not None and patched.cache_signature() == again.cache_signature()


def test_model_compute_dtype_runs_the_unet_in_that_dtype(sd1) -> None:
    from comfy_core.model_patches.compute_dtype import ComputeDtype

    (bf16,) = mp.model_compute_dtype(sd1.model, "bf16")
    assert bf16.model_options["model_function_wrapper"] == ComputeDtype(torch.bfloat16)
    assert bf16.object_patches["manual_cast_dtype"] is torch.bfloat16
    (back,) = mp.model_compute_dtype(bf16, "default")
    assert "model_function_wrapper" not in back.model_options
    plain = sample(sd1.model, sd1)
    assert torch.equal(sample(back, sd1), plain)
    assert torch.equal(sample(mp.model_compute_dtype(sd1.model, "fp32")[0], sd1), plain)  # fp32 weights already
    assert not torch.equal(sample(bf16, sd1), plain)
    # One model call through the wrapper is the call of a bf16 copy of the model, bit for bit.
    import copy

    x, sigma = torch.randn(1, 4, 16, 16), torch.tensor([3.0])
    c = {"c_crossattn": sd1.positive[0][0], "transformer_options": {}}
    with bf16.applied() as dm:
        out = bf16.model_options["model_function_wrapper"](dm.apply_model, {"input": x, "timestep": sigma, "c": c})
        reference = copy.deepcopy(dm).to(torch.bfloat16).apply_model(x, sigma, **c)
    assert out.dtype == torch.float32 and torch.equal(out, reference)
    assert sd1.model.model_dtype() == torch.float32 and not sd1.model.object_patches
    with pytest.raises(NodeInputError, match="dtype"):
        mp.model_compute_dtype(sd1.model, "fp8")
