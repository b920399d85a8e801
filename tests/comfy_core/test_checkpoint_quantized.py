"""All-in-one checkpoints with ComfyUI's quantised diffusion models through CheckpointLoaderSimple's
path (comfy_core/loading.py `load_checkpoint`), held as UNETLoader holds them (`QuantizedUnet`,
`unet_storage`, `finish_unet`, one rule for both loaders as today's ComfyUI's `convert_old_quants`).

Two families, two layouts each: a tiny Flux.1 single file (diffusion model, CLIP-L, T5, VAE:
tests/fixtures/dit_checkpoints.py) and a tiny LTX-2 one (the DiT and its text projection:
tests/fixtures/ltx2_text_files.py), their block linear layers written (a) in today's per-layer form
(`comfy_quant` `{"format": "float8_e4m3fn"}` + a per-tensor `weight_scale`,
tests/fixtures/template_models_quant.py) and (b) in the legacy scaled-fp8 form (`scaled_fp8`
marker + `scale_weight`, tests/fixtures/template_models.py). Each loads with no unused-tensor
warning, keeps its weights fp8 in memory, computes what the same checkpoint dequantised to float32
computes (the same maths: float32 rounding), stays within fp8 e4m3's error of the float original,
and UNETLoader on the same file gives the same output. The VAE of the file loads as from the float
file; a text encoder in the file (Lumina 2's Gemma 2) reads its own quantised layers.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.checkpoint.dtype import DtypePolicy
from comfy_core.families.ltx2.latent import pack_latents
from comfy_core.loading import load_checkpoint
from comfy_core.models.quant_linear import QuantizedLinear
from comfy_core.models.storage_cast import ScaledFp8Linear
from comfy_core.split.diffusion_model import load_diffusion_model
from tests.comfy_core.test_scaled_fp8 import _true_state as scaled_truth
from tests.fixtures.dit_checkpoints import CLIP_WIDTH, T5_WIDTH, UNET, flux_state_dict, with_light_vae
from tests.fixtures.ltx2_files import CAPTION, IN_CHANNELS, tiny_ltx2_metadata
from tests.fixtures.ltx2_text_files import ltx2_state_dict, tiny_projection
from tests.fixtures.template_models import scaled_fp8_state
from tests.fixtures.template_models_quant import quantize_state, true_state

FP8 = torch.float8_e4m3fn
BLOCKS = {"flux": (UNET + "double_blocks.", UNET + "single_blocks."), "ltx2": (UNET + "transformer_blocks.",)}
LAYER = {"flux": "diffusion_model.double_blocks.0.img_attn.qkv", "ltx2": "diffusion_model.transformer_blocks.0.attn1.to_q"}
FP8_ERROR = 0.06  # e4m3's 3 mantissa bits on the outputs (a broken scale is off by ~100%)


def _state(family: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if family == "flux":
        return with_light_vae(flux_state_dict(seed=1), "vae."), {"format": "pt"}
    state = ltx2_state_dict("2.0", UNET, seed=1)
    state["text_embedding_projection.aggregate_embed.weight"] = tiny_projection(1)
    return state, tiny_ltx2_metadata("2.0")


def _write(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, dict[str, Path]]:
    root = tmp_path_factory.mktemp("ckpt_quant")
    out: dict[str, dict[str, Path]] = {}
    for family in ("flux", "ltx2"):
        state, metadata = _state(family)
        blocks = BLOCKS[family]
        quant, quant_meta = quantize_state(state, "float8_e4m3fn", select=lambda layer: layer.startswith(blocks),
                                           float_dtype=torch.float32)
        shapes = {n: tuple(v.shape) for n, v in state.items() if v.dim() == 2}
        # Only the diffusion model scaled: the text encoders and VAE stay float.
        scaled = scaled_fp8_state({k: v for k, v in state.items() if k.startswith(UNET)}, UNET)
        scaled.update({k: v for k, v in state.items() if not k.startswith(UNET)})
        out[family] = {
            "float": _write(root / f"{family}.safetensors", state, metadata),
            "comfy_quant": _write(root / f"{family}_fp8.safetensors", quant, {**metadata, **quant_meta}),
            "comfy_quant_true": _write(root / f"{family}_fp8_true.safetensors",
                                       true_state(quant, quant_meta, shapes), metadata),
            "scaled": _write(root / f"{family}_fp8_scaled.safetensors", scaled, metadata),
            "scaled_true": _write(root / f"{family}_fp8_scaled_true.safetensors", scaled_truth(scaled), metadata),
        }
    return out


def _denoise(family: str, model) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    with model.applied() as dm, torch.no_grad():
        if family == "flux":
            x, cond, pooled = (torch.randn(1, 16, 8, 8, generator=gen), torch.randn(1, 6, T5_WIDTH, generator=gen),
                               torch.randn(1, CLIP_WIDTH, generator=gen))
            return dm.apply_model(x, torch.tensor([0.6]), c_crossattn=cond, y=pooled)
        video, audio = torch.randn(1, IN_CHANNELS, 2, 2, 3, generator=gen), torch.randn(1, 8, 5, 16, generator=gen)
        packed, shapes = pack_latents([video, audio])
        context = torch.randn(1, 4, 2 * CAPTION, generator=gen)
        return dm.apply_model(packed, torch.tensor([0.6]), c_crossattn=context,
                              **dm.extra_inputs(latent_shapes=shapes, frame_rate=24))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _unused_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unused tensors" in r.getMessage()]


@pytest.mark.parametrize("family", ["flux", "ltx2"])
@pytest.mark.parametrize("form", ["comfy_quant", "scaled"])
def test_quantised_all_in_one_checkpoint_computes_its_dequantised_model(files, family, form, caplog):
    paths = files[family]
    with caplog.at_level(logging.WARNING):
        model, _clip, _vae = load_checkpoint(paths[form], output_vae=family == "flux", output_clip=False)
    assert not _unused_warnings(caplog)
    layer = model.model.get_submodule(LAYER[family])
    assert isinstance(layer, QuantizedLinear if form == "comfy_quant" else ScaledFp8Linear)
    assert layer.weight.dtype == FP8 and layer.weight_scale.dtype == torch.float32 if form == "comfy_quant" \
        else layer.weight.dtype == FP8 and layer.scale_weight.dtype == torch.float32
    assert model.model.manual_cast_dtype == torch.float32 or model.model.get_dtype() == torch.float32
    before = {k: (v.dtype, v.data_ptr()) for k, v in model.model.state_dict().items()}
    out = _denoise(family, model)
    assert {k: (v.dtype, v.data_ptr()) for k, v in model.model.state_dict().items()} == before  # stays fp8
    assert _rel(out, _denoise(family, load_checkpoint(paths[form + "_true"], output_vae=False, output_clip=False)[0])) < 1e-5
    assert 1e-4 < _rel(out, _denoise(family, load_checkpoint(paths["float"], output_vae=False, output_clip=False)[0])) < FP8_ERROR
    # UNETLoader on the same all-in-one file: the same model.
    assert _rel(_denoise(family, load_diffusion_model(paths[form])), out) < 1e-6


def test_the_vae_of_a_quantised_checkpoint_loads_as_from_the_float_file(files):
    """The VAE beside a quantised diffusion model is read as in the float file (its text encoders:
    `test_an_all_in_one_files_text_encoder_reads_its_own_quantised_layers`)."""
    _m, _c, vae_q = load_checkpoint(files["flux"]["comfy_quant"], output_clip=False)
    _m, _c, vae_f = load_checkpoint(files["flux"]["float"], output_clip=False)
    a, b = vae_q.model.state_dict(), vae_f.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_scaled_fp8_is_honoured_under_an_explicit_unet_dtype(files):
    """A dtype asked for the UNet (ComfyUI's `dtype` model option) sets the other tensors' dtype;
    the scaled layers still keep their fp8 weights and scales (before: read unscaled)."""
    path = files["ltx2"]["scaled"]
    default = _denoise("ltx2", load_checkpoint(path, output_vae=False)[0])
    model, _clip, _vae = load_checkpoint(path, output_vae=False, dtype_policy=DtypePolicy(unet=torch.float32))
    assert isinstance(model.model.get_submodule(LAYER["ltx2"]), ScaledFp8Linear)
    assert _rel(_denoise("ltx2", model), default) < 1e-6


@pytest.mark.parametrize("in_metadata", [False, True], ids=["comfy_quant", "metadata"])
def test_an_all_in_one_files_text_encoder_reads_its_own_quantised_layers(tmp_path, in_metadata):
    """A Lumina 2 single file with its diffusion model's and its Gemma 2 tower's layers quantised
    (per layer, or all described in one `_quantization_metadata` header by the file's names, as
    ComfyUI's `convert_old_quants` serves them to both): the diffusion model takes its layers, the
    text encoder its own (fp8 weight x scale) and encodes what the dequantised file's encodes."""
    from tests.fixtures.gemma_files import tiny_gemma_state_dict, tiny_spiece_model
    from tests.fixtures.lumina2_files import tiny_lumina2_state_dict

    te = "text_encoders.gemma2_2b.transformer."
    state = tiny_lumina2_state_dict(3, prefix=UNET)
    state.update({te + k: v for k, v in tiny_gemma_state_dict(4).items()})
    state.update(with_light_vae({}, "vae."))
    blocks = (UNET + "layers.", te + "model.layers.")
    quant, meta = quantize_state(state, "float8_e4m3fn", select=lambda layer: layer.startswith(blocks),
                                 in_metadata=in_metadata, float_dtype=torch.float32)
    quant["text_encoders.spiece_model"] = torch.frombuffer(bytearray(tiny_spiece_model()), dtype=torch.uint8)
    truth = true_state(quant, meta, {n: tuple(v.shape) for n, v in state.items() if v.dim() == 2})
    model, clip, _vae = load_checkpoint(_write(tmp_path / "q.safetensors", quant, meta), output_vae=False)
    ref_model, ref_clip, _vae = load_checkpoint(_write(tmp_path / "t.safetensors", truth, {}), output_vae=False)
    assert isinstance(model.model.get_submodule("diffusion_model.layers.0.attention.qkv"), QuantizedLinear)
    tower = [m for m in clip.patcher.model.modules() if isinstance(m, ScaledFp8Linear)]
    assert tower and all(m.weight.dtype == FP8 for m in tower)
    tokens = ref_clip.tokenize("a photo of a cat")
    assert _rel(clip.encode_from_tokens(tokens), ref_clip.encode_from_tokens(tokens)) < 1e-5


@pytest.mark.parametrize("form", ["comfy_quant", "scaled"])
def test_weight_hooks_on_a_quantised_layer_see_its_true_weight(files, form):
    """ComfyUI's `weight_function` / `bias_function` on a quantised or scaled-fp8 layer get the
    true (dequantised) weight in the input's dtype, as its mixed-precision layers give them; the
    stored fp8 weight is left as it was."""
    model, _clip, _vae = load_checkpoint(files["flux"][form], output_vae=False, output_clip=False)
    layer = model.model.get_submodule(LAYER["flux"])
    x = torch.randn(3, layer.in_features, generator=torch.Generator().manual_seed(2))
    if form == "comfy_quant":
        true_weight = layer.dequantize_weight()
    else:
        true_weight = layer.weight.float() * layer.scale_weight.float()
    stored = layer.weight.clone()
    seen = []
    layer.weight_function.append(lambda w: (seen.append((w.dtype, tuple(w.shape))), w * 2)[1])
    layer.bias_function.append(lambda b: b + 1)
    out = layer(x)
    assert seen == [(torch.float32, tuple(true_weight.shape))]
    torch.testing.assert_close(out, torch.nn.functional.linear(x, 2 * true_weight, layer.bias.float() + 1),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(layer.weight.view(torch.uint8), stored.view(torch.uint8))
