"""LoRA for Flux.1 and SD3/SD3.5 in the spellings people ship (BFL/SAI native, kohya, diffusers /
PEFT / ai-toolkit, OneTrainer, LyCORIS): each patches exactly the weights and fused-weight slices
it names, all spellings of one LoRA patch identically (to the last bit of float rounding), the output changes and is restored
bit-exactly, misfitting records are skipped, a LoRA for another model loads nothing (as ComfyUI)."""
from __future__ import annotations

import logging

import pytest
import torch

from comfy_core.lora import load_lora_for_models, unet_key_map
from comfy_core.lora.dit_convert import convert_dit_lora, convert_uso_lora
from comfy_core.patching import Offset, PatchEntry, calculate_weight
from tests.fixtures.dit_loras import (FLUX_DIFFUSERS, FLUX_HIDDEN, MMDIT_DIFFUSERS, MMDIT_WIDTH, flux_inputs,
                                      lora_in_spelling, mmdit_inputs, random_factors, run, tiny_flux_model,
                                      tiny_mmdit_model)

RANK, ALPHA, STRENGTH = 4, 2.0, 0.8
SCALE = STRENGTH * ALPHA / RANK


@pytest.fixture(scope="module")
def flux():
    return tiny_flux_model(seed=3)


@pytest.fixture(scope="module")
def mmdit():
    return tiny_mmdit_model("sd35", seed=3)


def weights(model) -> dict[str, torch.Tensor]:
    """Every tensor of the MODEL as it runs (patches applied), copied."""
    with model.applied() as module:
        return {k: v.detach().clone() for k, v in module.state_dict().items()}


def base(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.model.state_dict().items()}


def swap(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0)


def load(model, tensors, strength=STRENGTH):
    new, _, report = load_lora_for_models(model, None, tensors, strength, 0.0, "test")
    return new, report


# --- every spelling patches the same weights -----------------------------------------------------

def assert_same_patches(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    """The same weights, to float rounding: a fused weight patched by one LoRA over all of it and
    by one per slice computes `up @ down` in blocks of different shapes, which some CPUs' matmul
    kernels round differently in the last bit (seen: 3e-8 on weights of 0.4). A patch in the
    wrong slice, or missing, is off by the size of a LoRA update (about 1e-2 here)."""
    assert sorted(expected) == sorted(got)
    off = {k: (expected[k] - got[k]).abs().max().item() for k in expected if not torch.equal(expected[k], got[k])}
    assert {k: d for k, d in off.items() if d > 1e-6} == {}


@pytest.mark.parametrize("spelling", ["bfl_checkpoint", "kohya", "diffusers", "onetrainer", "lycoris"])
def test_flux_spellings_patch_identically_to_bfl(flux, spelling):
    factors = random_factors(flux, list(FLUX_DIFFUSERS), seed=1, rank=RANK)
    reference, report = load(flux, lora_in_spelling(factors, "bfl", FLUX_DIFFUSERS, ALPHA))
    assert report.unmatched == [] and report.model_keys == len(FLUX_DIFFUSERS)
    other, report = load(flux, lora_in_spelling(factors, spelling, FLUX_DIFFUSERS, ALPHA))
    assert report.unmatched == [] and report.skipped == []
    expected, got = weights(reference), weights(other)
    assert_same_patches(expected, got)


@pytest.mark.parametrize("spelling", ["kohya", "diffusers", "base_model", "onetrainer", "lycoris"])
def test_sd3_spellings_patch_identically_to_sai(mmdit, spelling):
    factors = random_factors(mmdit, list(MMDIT_DIFFUSERS), seed=2, rank=RANK)
    reference, report = load(mmdit, lora_in_spelling(factors, "bfl", MMDIT_DIFFUSERS, ALPHA))
    assert report.unmatched == [] and report.model_keys == len(MMDIT_DIFFUSERS)
    other, report = load(mmdit, lora_in_spelling(factors, spelling, MMDIT_DIFFUSERS, ALPHA))
    assert report.unmatched == [] and report.skipped == []
    expected, got = weights(reference), weights(other)
    assert_same_patches(expected, got)


def test_native_lora_patches_exactly_the_weights_it_names(flux):
    factors = random_factors(flux, list(FLUX_DIFFUSERS), seed=4, rank=RANK)
    patched, _ = load(flux, lora_in_spelling(factors, "kohya", FLUX_DIFFUSERS, ALPHA))
    before, after = base(flux), weights(patched)
    targets = {f"diffusion_model.{m}.weight" for m in factors}
    for module, (up, down) in factors.items():
        key = f"diffusion_model.{module}.weight"
        torch.testing.assert_close(after[key], before[key] + SCALE * up @ down, atol=1e-6, rtol=0)
    assert [k for k in before if k not in targets and not torch.equal(before[k], after[k])] == []
    assert all(torch.equal(v, base(flux)[k]) for k, v in before.items())  # the input MODEL is untouched


# --- diffusers names onto slices of fused weights -----------------------------------------------

FLUX_SLICES = [  # (LoRA layer, fused BFL weight, first row, rows)
    ("transformer.transformer_blocks.0.attn.to_k", "double_blocks.0.img_attn.qkv", 64, 64),
    ("transformer.transformer_blocks.0.attn.add_v_proj", "double_blocks.0.txt_attn.qkv", 128, 64),
    ("transformer.single_transformer_blocks.0.attn.to_q", "single_blocks.0.linear1", 0, 64),
    ("lora_transformer_single_transformer_blocks_0_proj_mlp", "single_blocks.0.linear1", 192, 256),
    ("diffusion_model.single_blocks.0.linear1_qkv", "single_blocks.0.linear1", 0, 192),
]


@pytest.mark.parametrize("layer, fused, start, rows", FLUX_SLICES, ids=[s[0].split(".")[-1] for s in FLUX_SLICES])
def test_flux_slice_lora_patches_only_its_rows(flux, layer, fused, start, rows):
    gen = torch.Generator().manual_seed(5)
    up, down = 0.1 * torch.randn(rows, RANK, generator=gen), 0.1 * torch.randn(RANK, FLUX_HIDDEN, generator=gen)
    patched, report = load(flux, {f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down,
                                  f"{layer}.alpha": torch.tensor(ALPHA)})
    assert report.model_keys == 1
    key = f"diffusion_model.{fused}.weight"
    before, after = base(flux), weights(patched)
    torch.testing.assert_close(after[key][start:start + rows], before[key][start:start + rows] + SCALE * up @ down,
                               atol=1e-6, rtol=0)
    assert torch.equal(after[key][:start], before[key][:start])
    assert torch.equal(after[key][start + rows:], before[key][start + rows:])
    assert [k for k in before if k != key and not torch.equal(before[k], after[k])] == []


def test_flux_final_layer_halves_are_swapped_from_diffusers_order(flux):
    gen = torch.Generator().manual_seed(6)
    up = 0.1 * torch.randn(2 * FLUX_HIDDEN, RANK, generator=gen)
    down = 0.1 * torch.randn(RANK, FLUX_HIDDEN, generator=gen)
    bias = 0.1 * torch.randn(2 * FLUX_HIDDEN, generator=gen)
    layer = "transformer.norm_out.linear"  # diffusers: (scale, shift); BFL: (shift, scale)
    patched, _ = load(flux, {f"{layer}.lora_B.weight": up, f"{layer}.lora_A.weight": down, f"{layer}.diff_b": bias},
                      strength=1.0)
    key = "diffusion_model.final_layer.adaLN_modulation.1"
    before, after = base(flux), weights(patched)
    torch.testing.assert_close(after[key + ".weight"], before[key + ".weight"] + swap(up @ down), atol=1e-6, rtol=0)
    torch.testing.assert_close(after[key + ".bias"], before[key + ".bias"] + swap(bias), atol=1e-7, rtol=0)


def test_diff_b_on_a_slice_patches_the_same_rows_of_the_bias(flux):
    gen = torch.Generator().manual_seed(7)
    layer = "transformer.transformer_blocks.0.attn.to_v"
    bias = torch.randn(FLUX_HIDDEN, generator=gen)
    patched, _ = load(flux, {f"{layer}.lora_A.weight": torch.randn(RANK, FLUX_HIDDEN, generator=gen),
                             f"{layer}.lora_B.weight": torch.randn(FLUX_HIDDEN, RANK, generator=gen),
                             f"{layer}.diff_b": bias}, strength=1.0)
    key = "diffusion_model.double_blocks.0.img_attn.qkv.bias"
    before, after = base(flux), weights(patched)
    assert torch.equal(after[key][:128], before[key][:128])
    torch.testing.assert_close(after[key][128:], before[key][128:] + bias, atol=1e-7, rtol=0)


def test_sd3_diffusers_lora_onto_joint_block_qkv_slices(mmdit):
    w = MMDIT_WIDTH
    gen = torch.Generator().manual_seed(8)
    cases = [("transformer.transformer_blocks.0.attn.to_v", "joint_blocks.0.x_block.attn.qkv", 2 * w),
             ("transformer.transformer_blocks.0.attn.add_q_proj", "joint_blocks.0.context_block.attn.qkv", 0),
             ("transformer.transformer_blocks.1.attn.to_k", "joint_blocks.1.x_block.attn.qkv", w)]
    tensors, factors = {}, {}
    for layer, _, _ in cases:
        factors[layer] = (0.1 * torch.randn(w, RANK, generator=gen), 0.1 * torch.randn(RANK, w, generator=gen))
        tensors[f"{layer}.lora_B.weight"], tensors[f"{layer}.lora_A.weight"] = factors[layer]
    patched, report = load(mmdit, tensors, strength=0.5)
    assert report.model_keys == 3 and report.unmatched == []
    before, after = base(mmdit), weights(patched)
    for layer, fused, start in cases:
        key = f"diffusion_model.{fused}.weight"
        up, down = factors[layer]
        torch.testing.assert_close(after[key][start:start + w], before[key][start:start + w] + 0.5 * up @ down,
                                   atol=1e-6, rtol=0)
        rest = torch.ones(3 * w, dtype=torch.bool)
        rest[start:start + w] = False
        assert torch.equal(after[key][rest], before[key][rest])
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {f"diffusion_model.{fused}.weight" for _, fused, _ in cases}


def test_sd35_medium_attn2_names_map_only_where_the_block_has_it():
    model = tiny_mmdit_model("sd35_medium", seed=1)  # MMDiT-X: x_block.attn2 in block 0 only
    key_map = unet_key_map(model.model)
    assert key_map["transformer.transformer_blocks.0.attn2.to_k"] == (
        "diffusion_model.joint_blocks.0.x_block.attn2.qkv.weight", (0, MMDIT_WIDTH, MMDIT_WIDTH))
    assert "transformer.transformer_blocks.1.attn2.to_k" not in key_map


def test_offset_patch_scales_only_its_slice_by_strength_model():
    """ComfyUI's calculate_weight: with an offset, strength_model multiplies the slice only."""
    weight = torch.ones(6, 2)
    out = calculate_weight(weight, [PatchEntry(1.0, torch.ones(2, 2), 0.5, Offset(0, 2, 2))], "k")
    assert torch.equal(out[2:4], torch.full((2, 2), 1.5))
    assert torch.equal(out[:2], torch.ones(2, 2)) and torch.equal(out[4:], torch.ones(2, 2))


# --- the model output ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["flux", "mmdit"])
def test_output_changes_with_the_lora_and_is_restored_bit_exactly(flux, mmdit, kind):
    model, pieces, inputs = ((flux, FLUX_DIFFUSERS, flux_inputs()) if kind == "flux"
                             else (mmdit, MMDIT_DIFFUSERS, mmdit_inputs()))
    originals = dict(model.model.state_dict(keep_vars=True))
    plain = run(model, inputs)
    patched, _ = load(model, lora_in_spelling(random_factors(model, list(pieces), seed=9, rank=RANK), "diffusers",
                                              pieces, ALPHA), strength=1.0)
    assert (run(patched, inputs) - plain).abs().max() > 1e-3
    assert torch.equal(run(model, inputs), plain)
    after = model.model.state_dict(keep_vars=True)
    assert all(after[k] is v for k, v in originals.items())  # the module's own tensors are back


# --- what does not fit ------------------------------------------------------------------------

def test_shape_mismatched_records_are_skipped_with_a_warning(flux, caplog):
    gen = torch.Generator().manual_seed(10)
    good = "lora_unet_double_blocks_0_img_attn_proj"
    wide = "lora_unet_double_blocks_0_txt_attn_proj"  # a LoRA for a wider Flux: 96 columns, not 64
    bad_slice = "transformer.single_transformer_blocks.0.proj_mlp"  # rows for a 4 x 96 MLP
    tensors = {f"{good}.lora_up.weight": torch.randn(64, 2, generator=gen),
               f"{good}.lora_down.weight": torch.randn(2, 64, generator=gen),
               f"{wide}.lora_up.weight": torch.randn(64, 2, generator=gen),
               f"{wide}.lora_down.weight": torch.randn(2, 96, generator=gen),
               f"{bad_slice}.lora_B.weight": torch.randn(384, 2, generator=gen),
               f"{bad_slice}.lora_A.weight": torch.randn(2, 64, generator=gen)}
    with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
        patched, report = load(flux, tensors)
    assert report.model_keys == 1 and len(report.skipped) == 2
    assert sorted(line.split(":")[0] for line in report.skipped) == [
        "diffusion_model.double_blocks.0.txt_attn.proj.weight", "diffusion_model.single_blocks.0.linear1.weight"]
    assert sum(r.getMessage().startswith("ERROR test diffusion_model.") for r in caplog.records) == 2
    before, after = base(flux), weights(patched)
    assert torch.equal(after["diffusion_model.double_blocks.0.txt_attn.proj.weight"],
                       before["diffusion_model.double_blocks.0.txt_attn.proj.weight"])
    assert torch.equal(after["diffusion_model.single_blocks.0.linear1.weight"],
                       before["diffusion_model.single_blocks.0.linear1.weight"])
    assert not torch.equal(after["diffusion_model.double_blocks.0.img_attn.proj.weight"],
                           before["diffusion_model.double_blocks.0.img_attn.proj.weight"])


def test_a_lora_for_another_model_loads_nothing_with_a_warning(flux, caplog):
    sd_lora = {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": torch.zeros(4, 2),
               "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": torch.zeros(2, 4)}
    with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
        patched, report = load(flux, sd_lora)
    assert report.model_keys == 0 and report.unmatched == list(sd_lora) and patched.patches == {}
    assert any("none of its 2 keys patched this Flux model" in r.getMessage() for r in caplog.records)


def test_full_diff_and_set_weight_records(flux):
    scale_key = "diffusion_model.double_blocks.0.img_attn.norm.key_norm.scale"
    proj = "diffusion_model.double_blocks.0.txt_attn.proj"
    new_scale = torch.full((32,), 0.5)
    diff = torch.full((64, 64), 0.01)
    patched, report = load(flux, {f"{scale_key}.set_weight": new_scale, f"{proj}.diff": diff}, strength=1.0)
    assert report.model_keys == 2
    before, after = base(flux), weights(patched)
    assert torch.equal(after[scale_key], new_scale)
    torch.testing.assert_close(after[proj + ".weight"], before[proj + ".weight"] + diff, atol=1e-7, rtol=0)


# --- layouts converted first ----------------------------------------------------------------

def test_uso_names_convert_onto_bfl_names():
    names = ["double_blocks.18.processor.qkv_lora2.up.weight", "double_blocks.18.processor.qkv_lora1.down.weight",
             "double_blocks.3.processor.proj_lora1.up.weight", "double_blocks.3.processor.proj_lora2.down.weight",
             "single_blocks.37.processor.qkv_lora.up.weight", "single_blocks.2.processor.proj_lora.down.weight"]
    converted = convert_dit_lora({n: torch.zeros(1) for n in names})
    assert sorted(converted) == sorted([
        "diffusion_model.double_blocks.18.txt_attn.qkv.lora_up.weight",
        "diffusion_model.double_blocks.18.img_attn.qkv.lora_down.weight",
        "diffusion_model.double_blocks.3.img_attn.proj.lora_up.weight",
        "diffusion_model.double_blocks.3.txt_attn.proj.lora_down.weight",
        "diffusion_model.single_blocks.37.linear1_qkv.lora_up.weight",
        "diffusion_model.single_blocks.2.linear2.lora_down.weight"])


def test_uso_lora_patches_the_attention_rows_of_linear1(flux):
    gen = torch.Generator().manual_seed(11)
    up, down = 0.1 * torch.randn(192, 2, generator=gen), 0.1 * torch.randn(2, 64, generator=gen)
    tensors = convert_uso_lora({"single_blocks.0.processor.qkv_lora.up.weight": up,
                                "single_blocks.0.processor.qkv_lora.down.weight": down})
    patched, report = load(flux, tensors, strength=1.0)
    assert report.model_keys == 1
    key = "diffusion_model.single_blocks.0.linear1.weight"
    before, after = base(flux), weights(patched)
    torch.testing.assert_close(after[key][:192], before[key][:192] + up @ down, atol=1e-6, rtol=0)
    assert torch.equal(after[key][192:], before[key][192:])


def _control_lora(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """BFL's FLUX.1 Depth dev LoRA layout at the tiny Flux's sizes: `img_in` as a LoRA from twice
    the inputs (the latent, then the control latent, x 4 patch), its bias as `lora_B.bias`, a
    block LoRA, and a norm scale stored whole."""
    return {"img_in.lora_A.weight": 0.1 * torch.randn(2, 128, generator=gen),
            "img_in.lora_B.weight": 0.1 * torch.randn(FLUX_HIDDEN, 2, generator=gen),
            "img_in.lora_B.bias": 0.1 * torch.randn(FLUX_HIDDEN, generator=gen),
            "double_blocks.0.img_attn.proj.lora_A.weight": 0.1 * torch.randn(2, FLUX_HIDDEN, generator=gen),
            "double_blocks.0.img_attn.proj.lora_B.weight": 0.1 * torch.randn(FLUX_HIDDEN, 2, generator=gen),
            "single_blocks.0.norm.key_norm.scale": 1.0 + 0.1 * torch.randn(32, generator=gen)}


def test_bfl_control_loras_widen_img_in_as_comfyui_does(flux):
    """ComfyUI's `convert_lora_bfl_control` + LoRA `reshape`: img_in zero-padded to 128 inputs,
    then the LoRA added; the LoRA bias added; the norm scale replaced."""
    tensors = _control_lora(torch.Generator().manual_seed(5))
    patched, report = load(flux, tensors, strength=1.0)
    assert report.model_keys == 4 and not report.unmatched and not report.skipped
    before, after = base(flux), weights(patched)
    img_in = "diffusion_model.img_in"
    delta = tensors["img_in.lora_B.weight"] @ tensors["img_in.lora_A.weight"]
    assert after[img_in + ".weight"].shape == (FLUX_HIDDEN, 128)
    torch.testing.assert_close(after[img_in + ".weight"][:, :64], before[img_in + ".weight"] + delta[:, :64],
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(after[img_in + ".weight"][:, 64:], delta[:, 64:], atol=1e-6, rtol=0)
    torch.testing.assert_close(after[img_in + ".bias"], before[img_in + ".bias"] + tensors["img_in.lora_B.bias"])
    assert torch.equal(after["diffusion_model.single_blocks.0.norm.key_norm.scale"],
                       tensors["single_blocks.0.norm.key_norm.scale"])
    with flux.applied() as module:  # restored: the original shape again
        assert module.diffusion_model.img_in.weight.shape == (FLUX_HIDDEN, 64)


def test_a_control_lora_flux_runs_as_the_same_weights_built_as_a_control_model(flux):
    """The patched Flux takes the control latent as extra channels (its input width read from the
    widened img_in), and computes what a Flux built with those weights (a Canny / Depth dev model,
    32 channels in) computes."""
    from comfy_core.families.flux.dit import FluxConfig, FluxTransformer as Flux
    from comfy_core.families.flux.latent_format import flux_latent_format
    from comfy_core.models.diffusion import DiffusionModel
    from comfy_core.models.model_conditions import FluxConditions
    from comfy_core.models.model_sampling import FluxModelSampling
    from comfy_core.patching import ModelPatcher

    patched, _ = load(flux, _control_lora(torch.Generator().manual_seed(6)), strength=0.7)
    state = {k[len("diffusion_model."):]: v for k, v in weights(patched).items() if k.startswith("diffusion_model.")}
    control_model = Flux.from_config(FluxConfig.detect_from_weights(state))
    control_model.load_state_dict(state, strict=True)
    reference = ModelPatcher(DiffusionModel(control_model.eval(), FluxModelSampling(), flux_latent_format(),
                                            adm=FluxConditions()))
    assert control_model.config.in_channels == 32
    inputs = flux_inputs(seed=2)
    control = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(9))
    got, expected = run(patched, {**inputs, "c_concat": control}), run(reference, {**inputs, "c_concat": control})
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    other = run(patched, {**inputs, "c_concat": torch.zeros_like(control)})
    assert (other - got).abs().max() > 1e-3  # the control channels are read


# --- ComfyUI's functions as packs call them ----------------------------------------------------

def test_pack_path_key_map_has_slice_targets_and_patches_them(flux):
    """`comfy.lora.model_lora_keys_unet` + `load_lora` + `add_patches`, as packs call them."""
    from compat.lora_api import load_lora, model_lora_keys_unet

    key_map = model_lora_keys_unet(flux.model, {})
    assert key_map["transformer.single_transformer_blocks.0.proj_mlp"] == (
        "diffusion_model.single_blocks.0.linear1.weight", (0, 3 * FLUX_HIDDEN, 4 * FLUX_HIDDEN))
    gen = torch.Generator().manual_seed(12)
    up, down = torch.randn(4 * FLUX_HIDDEN, 2, generator=gen), torch.randn(2, FLUX_HIDDEN, generator=gen)
    layer = "transformer.single_transformer_blocks.0.proj_mlp"
    patches = load_lora({f"{layer}.lora_B.weight": up, f"{layer}.lora_A.weight": down}, key_map)
    clone = flux.clone()
    assert len(clone.add_patches(patches, 0.5)) == 1
    key = "diffusion_model.single_blocks.0.linear1.weight"
    before, after = base(flux), weights(clone)
    torch.testing.assert_close(after[key][192:], before[key][192:] + 0.5 * up @ down, atol=1e-6, rtol=0)
    assert torch.equal(after[key][:192], before[key][:192])


@pytest.mark.parametrize("slots, t5_prefixes", [(("clip_l", "t5xxl"), {"lora_te2_", "lora_te3_"}),
                                                (("clip_l", "clip_g", "t5xxl"), {"lora_te3_"})],
                         ids=["flux", "sd3"])
def test_t5_text_encoder_kohya_numbers_follow_comfyui(slots, t5_prefixes):
    from torch import nn

    from comfy_core.lora import text_encoder_key_map

    encoders = nn.Module()
    for slot in slots:
        leaf = nn.Module()
        leaf.register_parameter("weight", nn.Parameter(torch.zeros(2, 2)))
        path = ("encoder.block.0.layer.0.SelfAttention.q" if slot == "t5xxl"
                else "text_model.encoder.layers.0.self_attn.q_proj")
        parent = encoders
        for part in [slot, "transformer", *path.split(".")[:-1]]:
            if part not in parent._modules:
                parent.add_module(part, nn.Module())
            parent = parent._modules[part]
        parent.add_module(path.split(".")[-1], leaf)
    key_map = text_encoder_key_map(encoders)
    t5 = "t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q.weight"
    assert {k[: -len("encoder_block_0_layer_0_SelfAttention_q")] for k, v in key_map.items()
            if v == t5 and k.startswith("lora_te")} == t5_prefixes
    assert key_map["lora_te1_text_model_encoder_layers_0_self_attn_q_proj"] == (
        "clip_l.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight")
