"""ComfyUI's quantised diffusion-model files through UNETLoader's path (comfy_core/split/diffusion_model.py
with comfy_core/models/quant_linear.py): each format stays quantised in memory (a view of the file),
computes what the dequantised float32 model computes, stays within its format's error of the float
original, takes a LoRA on its quantised layers, and refuses malformed files with typed errors.

The files are the tiny Z-Image (tests/fixtures/zimage_files.py) with its block linear layers
quantised as ComfyUI's quantisers do (tests/fixtures/template_models_quant.py); the reference for
each is the same file with every quantised weight dequantised to float32 (`<stem>_true`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.lora import load_lora_for_models
from comfy_core.saving import save_checkpoint
from comfy_core.split.diffusion_model import load_diffusion_model
from comfy_core.models.quant_linear import QuantizedLinear
from comfy_core.weights.quant_registry import COMFY_QUANT, FORMATS, METADATA_KEY
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_quant import quantize_state, write_quantized
from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict

BLOCKS = ("layers.", "noise_refiner.", "context_refiner.")
QKV = "diffusion_model.layers.0.attention.qkv"  # a quantised layer (module name under the model)

# (format, quantiser options, the largest relative error (norm) of the output vs the float original).
# A broken dequantisation is off by ~100%; int8 rounds to 1/254 of a row's range, fp8 e4m3 / e5m2 and
# MXFP8 keep 3 / 2 / 3 mantissa bits, NVFP4 one (E2M1 under fp8 block scales).
VARIANTS = {
    "int8_convrot": ("int8_tensorwise", {"convrot": True}, 0.02),
    "int8_tensorwise": ("int8_tensorwise", {}, 0.03),
    "int8_rowwise": ("int8_tensorwise", {"per_row": True}, 0.02),
    "fp8_e4m3": ("float8_e4m3fn", {}, 0.06),
    "fp8_e5m2": ("float8_e5m2", {}, 0.1),
    "mxfp8": ("mxfp8", {}, 0.06),
    "nvfp4": ("nvfp4", {"in_metadata": True}, 0.2),
}


def _select(layer: str) -> bool:
    return layer.startswith(BLOCKS)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("quant")
    state = tiny_zimage_state_dict(seed=1)
    out = {"float": (save(state, root / "z_float.safetensors"),) * 2}
    for name, (fmt, options, _bound) in VARIANTS.items():
        out[name] = write_quantized(root / f"z_{name}.safetensors", state, fmt, select=_select,
                                    float_dtype=torch.float32, **options)
    return out


def _inputs():
    gen = torch.Generator().manual_seed(3)
    return torch.randn(1, 16, 8, 8, generator=gen), torch.tensor([0.6]), torch.randn(1, 7, CAP_WIDTH, generator=gen)


def _denoise(model) -> torch.Tensor:
    x, sigma, cond = _inputs()
    with model.applied() as dm, torch.no_grad():
        return dm.apply_model(x, sigma, c_crossattn=cond)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_format_stays_quantized_and_computes_the_dequantized_model(files, variant):
    quantized_path, true_path = files[variant]
    fmt = FORMATS[VARIANTS[variant][0]]
    model = load_diffusion_model(quantized_path)
    layer = model.model.get_submodule(QKV)
    assert isinstance(layer, QuantizedLinear) and layer.quant_format == fmt.name
    assert layer.weight.dtype in fmt.storage and tuple(layer.weight.shape) == fmt.stored_shape(192, 64)
    # File-backed: the stored weight is a view of the file's mapping, not a copy.
    assert layer.weight.untyped_storage().nbytes() == quantized_path.stat().st_size
    assert set(fmt.scales) <= {name for name, _ in layer.named_buffers()}
    quantized_layers = [m for m in model.model.modules() if isinstance(m, QuantizedLinear)]
    assert len(quantized_layers) == len(_described(quantized_path)) > 10
    if variant == "int8_convrot":  # w2's 170 inputs: no power of 4 divides them, the layer stays float
        assert not isinstance(model.model.get_submodule("diffusion_model.layers.0.feed_forward.w2"), QuantizedLinear)
    before = {k: (v.dtype, v.data_ptr()) for k, v in model.model.state_dict().items()}
    out = _denoise(model)
    assert {k: (v.dtype, v.data_ptr()) for k, v in model.model.state_dict().items()} == before  # nothing dequantised kept
    assert _rel(out, _denoise(load_diffusion_model(true_path))) < 1e-5
    assert _rel(out, _denoise(load_diffusion_model(files["float"][0]))) < VARIANTS[variant][2]


def _described(path: Path) -> set[str]:
    """The layers a file describes as quantised (per-layer tensors or metadata)."""
    with safe_open(str(path), "pt") as f:
        layers = {k[:-len(COMFY_QUANT) - 1] for k in f.keys() if k.endswith(COMFY_QUANT)}
        metadata = f.metadata() or {}
    return layers | set(json.loads(metadata.get(METADATA_KEY, '{"layers": {}}'))["layers"])


def _lora(gen_seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(gen_seed)
    tensors = {}
    for module, out in (("attention.qkv", 192), ("attention.out", 64)):
        tensors[f"diffusion_model.layers.0.{module}.lora_down.weight"] = 0.3 * torch.randn(4, 64, generator=gen)
        tensors[f"diffusion_model.layers.0.{module}.lora_up.weight"] = 0.3 * torch.randn(out, 4, generator=gen)
    return tensors


@pytest.mark.parametrize("variant", ["int8_convrot", "nvfp4", "fp8_e4m3"])
def test_lora_on_quantized_layers_adds_to_the_dequantized_weight_and_restores_the_stored_one(files, variant):
    quantized_path, true_path = files[variant]
    model, true = load_diffusion_model(quantized_path), load_diffusion_model(true_path)
    lora = _lora(5)
    patched, _, report = load_lora_for_models(model, None, lora, 0.8, 0.0)
    assert report.skipped == [] and report.model_keys == 2  # NVFP4's packed weight fits by its true shape
    true_patched, _, _ = load_lora_for_models(true, None, lora, 0.8, 0.0)
    layer = model.model.get_submodule(QKV)
    stored, bits = layer.weight, layer.weight.detach().reshape(-1).view(torch.uint8).clone()
    dequantized = layer.dequantize_weight()
    with patched.applied():
        held = layer.weight.detach().clone()
        assert held.dtype == torch.float32 and held.shape == (192, 64)
        delta = 0.8 * lora[f"{QKV}.lora_up.weight"] @ lora[f"{QKV}.lora_down.weight"]
        assert torch.allclose(held, dequantized + delta, atol=1e-5)
    assert layer.weight is stored and torch.equal(stored.detach().reshape(-1).view(torch.uint8), bits)
    assert _rel(_denoise(patched), _denoise(true_patched)) < 1e-5
    assert _rel(_denoise(patched), _denoise(model)) > 1e-3  # the LoRA changed the output


def test_int8_matrix_product_mode_stays_within_activation_rounding(files):
    model = load_diffusion_model(files["int8_convrot"][0])
    exact = _denoise(model)
    for layer in model.model.modules():
        if isinstance(layer, QuantizedLinear):
            layer.int8_matmul = True
    w8a8 = _denoise(model)
    assert 0 < _rel(w8a8, exact) < 0.02


def test_a_checkpoint_layout_file_with_prefixed_metadata_names(tmp_path):
    state = tiny_zimage_state_dict(seed=2, prefix="model.diffusion_model.")
    tensors, metadata = quantize_state(state, "nvfp4", select=lambda n: ".attention." in n, in_metadata=True)
    layers = json.loads(metadata[METADATA_KEY])["layers"]
    assert all(name.startswith("model.diffusion_model.") for name in layers)
    save_file(tensors, str(tmp_path / "ckpt.safetensors"), metadata=metadata)
    model = load_diffusion_model(tmp_path / "ckpt.safetensors")
    assert isinstance(model.model.get_submodule(QKV), QuantizedLinear)
    assert torch.isfinite(_denoise(model)).all()


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
def test_a_padded_block_format_layer_takes_its_true_shape_from_the_architecture(tmp_path, fmt):
    """ComfyUI's quantisers pad block formats to multiples of 16 (NVFP4) / 32 (MXFP8); the layer's
    true shape comes from the architecture (here w1's 170 outputs) and the padding is cut off."""
    state = tiny_zimage_state_dict(seed=4)
    w2 = "layers.0.feed_forward.w2"  # [64, 170]
    path, true_path = write_quantized(tmp_path / f"padded_{fmt}.safetensors", state, fmt, select=lambda n: n == w2,
                                      float_dtype=torch.float32)
    with safe_open(str(path), "pt") as f:
        assert f.get_slice(w2 + ".weight").get_shape() == list(FORMATS[fmt].stored_shape(64, 170))
        assert FORMATS[fmt].stored_shape(64, 170) != (64, 170 // FORMATS[fmt].pack)
    model = load_diffusion_model(path)
    layer = model.model.get_submodule("diffusion_model." + w2)
    assert isinstance(layer, QuantizedLinear) and layer.in_features == 170
    assert layer.dequantize_weight().shape == (64, 170)
    assert _rel(_denoise(model), _denoise(load_diffusion_model(true_path))) < 1e-5


def test_saving_writes_comfyuis_quantized_layout_and_loads_back(files, tmp_path):
    model = load_diffusion_model(files["int8_convrot"][0])
    path = save_checkpoint(tmp_path / "saved.safetensors", model)
    with safe_open(str(path), "pt") as saved, safe_open(str(files["int8_convrot"][0]), "pt") as source:
        for key in source.keys():
            ours = saved.get_tensor("model.diffusion_model." + key)
            theirs = source.get_tensor(key)
            if key.endswith((".weight", ".weight_scale", "." + COMFY_QUANT)) and theirs.dtype != torch.float32:
                assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), key
        conf = json.loads(bytes(saved.get_tensor(f"model.{QKV}.{COMFY_QUANT}").tolist()))
        assert conf == {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 64}
    assert torch.equal(_denoise(load_diffusion_model(path)), _denoise(model))


def _broken(tmp_path: Path, change) -> Path:
    state = tiny_zimage_state_dict(seed=3)
    tensors, metadata = quantize_state(state, "int8_tensorwise", convrot=True, select=_select)
    change(tensors)
    save_file(tensors, str(tmp_path / "broken.safetensors"), metadata=metadata or None)
    return tmp_path / "broken.safetensors"


def _describe(conf: dict) -> torch.Tensor:
    return torch.tensor(list(json.dumps(conf).encode()), dtype=torch.uint8)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.__setitem__("layers.0.attention.qkv.comfy_quant", _describe({"format": "int3"})),
     "unknown quantisation format 'int3'"),
    (lambda t: t.__setitem__("layers.0.attention.qkv.comfy_quant", _describe({"format": "awq_w4a16"})),
     "not supported here"),
    (lambda t: t.pop("layers.0.attention.qkv.weight_scale"), "missing \\['model.diffusion_model.layers.0.attention.qkv.weight_scale'\\]"),
    (lambda t: t.__setitem__("layers.0.attention.qkv.weight_scale", torch.ones(7)), "weight_scale has 7 values"),
    (lambda t: t.__setitem__("cap_embedder.0.comfy_quant", _describe({"format": "float8_e4m3fn"})),
     "missing"),
    (lambda t: (t.__setitem__("cap_embedder.0.weight", torch.zeros(4, 4, dtype=torch.float8_e4m3fn)),
                t.__setitem__("cap_embedder.0.weight_scale", torch.ones(())),
                t.__setitem__("cap_embedder.0.comfy_quant", _describe({"format": "float8_e4m3fn"}))),
     "not a linear layer|shape"),
])
def test_malformed_quantized_files_are_typed_errors_naming_the_layer(tmp_path, change, message):
    with pytest.raises(CheckpointError, match=message):
        load_diffusion_model(_broken(tmp_path, change))
