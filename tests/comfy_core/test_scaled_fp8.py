"""ComfyUI's scaled-fp8 files kept at fp8 (comfy_core/models/storage_cast.py `keep_scaled_fp8`).

A tiny SD3.5 MMDiT with the real key names is written in ComfyUI's scaled-fp8 layout
(tests/fixtures/template_models.py `scaled_fp8_state`) and loaded through UNETLoader's path. The
reference is the same model written plainly in float32 with the true weights (each fp8 value
times its scale; linear biases rounded to fp8 as ComfyUI's `scaled_fp8_ops` stores them), loaded
through the same loader: the same maths, so outputs agree to float32 rounding.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn

from comfy_core.weights.stochastic_rounding import stochastic_rounding, string_to_seed
from comfy_core.models.storage_cast import ScaledFp8Error, ScaledFp8Linear, keep_scaled_fp8
from comfy_core.saving import save_checkpoint
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.fixtures.dit_checkpoints import CLIP_WIDTH, T5_WIDTH, save
from tests.fixtures.mmdit_files import tiny_mmdit_state_dict
from tests.fixtures.template_models import scaled_fp8_state

FP8 = torch.float8_e4m3fn
KEY = "diffusion_model.joint_blocks.0.x_block.attn.qkv"  # a scaled linear layer (module name)


def _true_state(scaled: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float32 state a scaled file stands for, as ComfyUI computes with it."""
    out = {}
    for key, value in scaled.items():
        if key.endswith(("scale_weight", "scaled_fp8")):
            continue
        layer = key.rsplit(".", 1)[0]
        scale = scaled.get(layer + ".scale_weight")
        if scale is not None and key.endswith(".weight"):
            out[key] = value.float() * scale
        elif scale is not None and key.endswith(".bias"):
            out[key] = value.to(FP8).float()  # ComfyUI holds a scaled layer's bias in fp8 too
        else:
            out[key] = value.float()
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scaled_fp8")
    state = {k: v.to(torch.bfloat16) for k, v in tiny_mmdit_state_dict(
        "sd35", 5, prefix="", context=T5_WIDTH, pooled=2 * CLIP_WIDTH).items()}
    scaled = scaled_fp8_state(state)
    return {"scaled": save(scaled, root / "sd3.5_large_fp8_scaled.safetensors"),
            "true": save(_true_state(scaled), root / "sd3.5_large_true.safetensors"),
            "root": root}


def _inputs():
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(1, 16, 8, 8, generator=gen), torch.tensor([0.6]), torch.randn(1, 5, T5_WIDTH, generator=gen),
            torch.randn(1, 2 * CLIP_WIDTH, generator=gen))


def _denoise(model) -> torch.Tensor:
    x, sigma, cond, pooled = _inputs()
    with model.applied() as dm, torch.no_grad():
        return dm.apply_model(x, sigma, c_crossattn=cond, y=pooled)


def _layer(model, name: str = KEY) -> nn.Module:
    return model.model.get_submodule(name)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.reshape(-1).view(torch.uint8)


def _close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-5) -> bool:
    return bool((a - b).abs().max() <= rel * b.abs().max())


def test_linear_layers_keep_fp8_weights_and_scales_from_the_file(files):
    model = load_diffusion_model(files["scaled"])
    linears = [m for m in model.model.diffusion_model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is ScaledFp8Linear for m in linears)
    assert all(m.weight.dtype == FP8 and (m.bias is None or m.bias.dtype == FP8) for m in linears)
    assert all(m.scale_weight.dtype == torch.float32 and m.scale_weight.shape == () for m in linears)
    with safe_open(str(files["scaled"]), "pt") as f:
        layer = _layer(model)
        name = KEY[len("diffusion_model."):]
        assert torch.equal(layer.scale_weight, f.get_tensor(name + ".scale_weight"))
        assert torch.equal(_bits(layer.weight), _bits(f.get_tensor(name + ".weight")))
        # The other tensors in the compute dtype, from the file's values (not rounded through fp8).
        norm = "joint_blocks.0.context_block.adaLN_modulation.1.bias"  # a linear bias: fp8 (ComfyUI's)
        assert model.model.diffusion_model.get_parameter(norm).dtype == FP8
        embed = "x_embedder.proj.weight"
        ours = model.model.diffusion_model.get_parameter(embed)
        assert ours.dtype == torch.float32 and torch.equal(ours, f.get_tensor(embed).float())
    # Zero-copy: every fp8 weight is a view of the one file mapping, not a copy in memory.
    storages = {m.weight.untyped_storage().data_ptr() for m in linears}
    assert len(storages) == 1 and linears[0].weight.untyped_storage().nbytes() == files["scaled"].stat().st_size
    assert model.model.manual_cast_dtype == torch.float32
    assert model.model.diffusion_model.scaled_fp8.dtype == FP8 and model.model.diffusion_model.scaled_fp8.numel() == 0


def test_outputs_equal_the_true_weight_model_and_no_compute_copy_persists(files):
    scaled, true = load_diffusion_model(files["scaled"]), load_diffusion_model(files["true"])
    before = {k: (v.dtype, v.data_ptr()) for k, v in scaled.model.state_dict().items()}
    a, b = _denoise(scaled), _denoise(true)
    assert _close(a, b)
    after = {k: (v.dtype, v.data_ptr()) for k, v in scaled.model.state_dict().items()}
    assert after == before  # the forward left no float32 weight behind
    assert not any(d in (torch.bfloat16, torch.float16) for d, _ in after.values())


def test_matches_the_dequantized_model(files):
    """`keep_scaled_fp8`'s per-call scaling equals a float32 model holding fp8 value x scale_weight."""
    from comfy_core.checkpoint.reader import CheckpointFile

    kept = load_diffusion_model(files["scaled"])
    plain = load_diffusion_model(files["true"])
    with CheckpointFile(files["scaled"]) as file:
        scaled_layers = 0
        for name, layer in plain.model.diffusion_model.named_modules():  # the raw fp8 values, dequantized here
            if isinstance(layer, nn.Linear) and name + ".scale_weight" in file.tensors:
                true = file.read(name + ".weight").float() * file.read(name + ".scale_weight").float()
                layer.weight = nn.Parameter(true, requires_grad=False)
                scaled_layers += 1
    assert scaled_layers > 0
    assert _close(_denoise(kept), _denoise(plain))


def _lora(layer: nn.Module, seed: int) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    out, inp = layer.weight.shape
    return ("lora", (torch.randn(out, 2, generator=gen) * 0.05, torch.randn(2, inp, generator=gen), 2.0, None, None))


def test_lora_sees_the_true_weight_stores_back_like_comfyui_and_restores_bit_exactly(files):
    scaled, true = load_diffusion_model(files["scaled"]), load_diffusion_model(files["true"])
    layer = _layer(scaled)
    stored = layer.weight
    raw_before = _bits(stored.detach()).clone()
    patch = _lora(layer, 7)
    key = KEY + ".weight"
    for model in (scaled, true):
        assert model.add_patches({key: patch}, 0.8) == [key]
    expected_true = _layer(true).weight.detach().clone()
    with true.applied():
        reference = _layer(true).weight.detach().clone()  # the LoRA on the true (float32) weight
    assert not torch.equal(reference, expected_true)
    with scaled.applied():
        patched = _layer(scaled).weight
        assert patched.dtype == FP8 and patched is not stored
        # ComfyUI's set_weight: (patched true weight / scale), seeded stochastic rounding to fp8.
        comfy = stochastic_rounding(reference / layer.scale_weight, FP8, seed=string_to_seed(key))
        assert torch.equal(_bits(patched), _bits(comfy))
        ours = patched.detach().float() * layer.scale_weight
        # Within one fp8 step of the LoRA on the dequantized layer (where it stays in fp8's range:
        # beyond 448 it saturates, as ComfyUI's rounding does).
        units = (reference / layer.scale_weight).abs()
        step = layer.scale_weight * torch.maximum(units / 8, torch.tensor(2.0 ** -9))
        inside = units <= torch.finfo(FP8).max
        assert inside.float().mean() > 0.9 and ((ours - reference).abs() <= step)[inside].all()
    assert _layer(scaled).weight is stored and torch.equal(_bits(stored), raw_before)
    assert _close(_denoise(scaled), _denoise(true), rel=0.05)


def test_model_save_round_trip_gives_comfyui_tensors(files, tmp_path):
    model = load_diffusion_model(files["scaled"])
    path = save_checkpoint(tmp_path / "saved.safetensors", model)
    with safe_open(str(path), "pt") as saved, safe_open(str(files["scaled"]), "pt") as source:
        names = set(saved.keys())
        assert "model.diffusion_model.scaled_fp8" in names
        for key in source.keys():
            ours = saved.get_tensor("model.diffusion_model." + key)
            theirs = source.get_tensor(key)
            if key.endswith((".weight", "scale_weight", "scaled_fp8")) and theirs.dtype in (FP8, torch.float32):
                assert ours.dtype == theirs.dtype and torch.equal(_bits(ours), _bits(theirs)), key
        # ComfyUI's fp8 optimisations (an empty marker): every linear layer saves a scale_input.
        assert "model.diffusion_model." + KEY[len("diffusion_model."):] + ".scale_input" in names
    again = load_diffusion_model(path)
    assert torch.equal(_denoise(again), _denoise(model))


def test_saving_a_patched_model_writes_the_stored_form(files, tmp_path):
    model = load_diffusion_model(files["scaled"])
    key = KEY + ".weight"
    model.add_patches({key: _lora(_layer(model), 8)}, 1.0)
    with model.applied():
        patched = _layer(model).weight.detach().clone()
        expected = _denoise(model)
    path = save_checkpoint(tmp_path / "patched.safetensors", model)
    with safe_open(str(path), "pt") as saved:
        assert torch.equal(_bits(saved.get_tensor("model." + key)), _bits(patched))
    assert torch.equal(_denoise(load_diffusion_model(path)), expected)


def test_merging_reads_the_scaled_model_true_weights(files):
    """Model merging (ComfyUI's `(weight, convert_func)` form) sees weight times scale."""
    scaled, true = load_diffusion_model(files["scaled"]), load_diffusion_model(files["true"])
    key = KEY + ".weight"
    head = scaled.get_key_patches()[key][0]
    assert len(head) == 2 and torch.equal(head[1](head[0].float()), _layer(true).weight)
    merged = true.clone()
    merged.add_patches(scaled.weight_references(), 0.5, 0.5)  # 0.5 true + 0.5 scaled's true = true
    nested = true.clone()
    nested.add_patches({key: scaled.get_key_patches()[key]}, 0.5, 0.5)
    with merged.applied(), torch.no_grad():
        assert _close(_layer(merged).weight, _layer(true).weight, rel=1e-6)
    with nested.applied(), torch.no_grad():
        assert _close(_layer(nested).weight, _layer(true).weight, rel=1e-6)


def test_forced_fp8_weight_dtype_keeps_the_scales(files):
    """UNETLoader's weight_dtype fp8 on a scaled file: ComfyUI still uses its scaled layers
    (the asked dtype is the other tensors')."""
    model = load_diffusion_model(files["scaled"], weight_dtype=torch.float8_e5m2)
    layer = _layer(model)
    assert type(layer) is ScaledFp8Linear and layer.weight.dtype == FP8
    assert model.model.diffusion_model.x_embedder.proj.weight.dtype == torch.float8_e5m2
    assert model.model.manual_cast_dtype == torch.float32
    assert _close(_denoise(model), _denoise(load_diffusion_model(files["true"])), rel=0.1)


def _encoder_like() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A bare module with linear layers (what the T5 loader passes) and its scaled-fp8 tensors."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8, bias=False), nn.LayerNorm(8))
    plain = {"enc." + k: v.detach().clone() for k, v in module.state_dict().items()}
    return module, scaled_fp8_state(plain, "enc.")


def test_keep_scaled_fp8_on_any_module_from_a_tensor_dict():
    module, state = _encoder_like()
    reference = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8, bias=False), nn.LayerNorm(8))
    reference.load_state_dict({k[len("enc."):]: v for k, v in _true_state(state).items()})
    module.load_state_dict({k[len("enc."):]: v.float() for k, v in state.items()
                            if not k.endswith(("scale_weight", "scaled_fp8"))}, strict=True)
    assert keep_scaled_fp8(module, state, state.__getitem__, "enc.") == 2
    assert module[0].weight.dtype == FP8 and module[2].weight.dtype == FP8
    assert module[0].scale_input is None and "0.scale_input" not in module.state_dict()  # text encoders: none
    assert module[3].weight.dtype == torch.float32  # other layers left as they are
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert _close(module(x), reference(x))


def test_two_element_marker_turns_the_input_scales_off():
    module, state = _encoder_like()
    state["enc.scaled_fp8"] = torch.zeros(2, dtype=FP8)
    keep_scaled_fp8(module, state, state.__getitem__, "enc.", fp8_matrix_mult=None)
    assert module[0].scale_input is None and not module[0].fp8_matrix_mult
    module, state = _encoder_like()
    state["enc.0.scale_input"] = torch.tensor(0.5)
    keep_scaled_fp8(module, state, state.__getitem__, "enc.", fp8_matrix_mult=None)
    assert module[0].fp8_matrix_mult and float(module[0].scale_input) == 0.5 and float(module[2].scale_input) == 1.0


def test_a_scale_of_more_than_one_value_is_refused():
    module, state = _encoder_like()
    state["enc.0.scale_weight"] = torch.ones(32)
    with pytest.raises(ScaledFp8Error, match="enc.0.scale_weight"):
        keep_scaled_fp8(module, state, state.__getitem__, "enc.")


def test_fp8_matrix_mult_falls_back_to_the_scaled_cast_where_the_device_cannot():
    """On the CPU (no fp8 matrix product) a layer asking for one computes the same as without."""
    module, state = _encoder_like()
    module.load_state_dict({k[len("enc."):]: v.float() for k, v in state.items()
                            if not k.endswith(("scale_weight", "scaled_fp8"))})
    keep_scaled_fp8(module, state, state.__getitem__, "enc.", fp8_matrix_mult=True)
    x = torch.randn(3, 16)
    with torch.no_grad():
        fast = module(x)
        for layer in (module[0], module[2]):
            layer.fp8_matrix_mult = False
        assert torch.equal(fast, module(x))


def test_set_weight_stores_weight_over_scale_in_fp8():
    module, state = _encoder_like()
    module.load_state_dict({k[len("enc."):]: v.float() for k, v in state.items()
                            if not k.endswith(("scale_weight", "scaled_fp8"))})
    keep_scaled_fp8(module, state, state.__getitem__, "enc.")
    layer = module[0]
    true = layer.convert_weight(layer.weight.float())
    assert torch.equal(true, layer.weight.float() * state["enc.0.scale_weight"])
    layer.set_weight(true * 0.5, seed=3)
    assert layer.weight.dtype == FP8
    expected = stochastic_rounding(true * 0.5 / layer.scale_weight, FP8, seed=3)
    assert torch.equal(_bits(layer.weight), _bits(expected))
