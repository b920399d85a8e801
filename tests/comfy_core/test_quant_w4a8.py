"""ComfyUI's int4 `asym_w4a8_int8` layers (comfy_core/weights/quant_w4a8.py): the packing, the two
scales, the codebook and the asymmetric zero points decoded as comfy-kitchen's layout defines them,
checked against an independent quantiser written here (dense block-diagonal Hadamard matrices,
float64, explicit nibbles); comfy-kitchen's W4A8 product (int8 activations); the registry's
typed refusals; a tiny Qwen3.5 file in the format (Flux 3's prompt upsampler's) and a tiny Z-Image
diffusion model with a LoRA on its int4 layers."""
from __future__ import annotations

import json
import math

import pytest
import torch

from comfy_core.models.quant_linear import QuantizedLinear
from comfy_core.weights import quant_w4a8
from comfy_core.weights.quant_registry import FORMATS, QuantFormatError, QuantizedLayer, dequantize_stored, parse_conf
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

H4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]], dtype=torch.float64)
FMT = "asym_w4a8_int8"


def _block_hadamard(width: int, group: int) -> torch.Tensor:
    """The dense `[width, width]` block-diagonal matrix of the normalised regular Hadamard of order `group`."""
    h = H4
    while h.shape[0] < group:
        h = torch.kron(h, H4)
    return torch.block_diag(*[h / math.sqrt(group)] * (width // group))


def _fp8(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn).to(torch.float64)


def independent_asymmetric(w: torch.Tensor, group: int, convrot: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The asymmetric uniform W4A8 layout of `w` ([N, K]) quantised here without the module: per group
    of the rotated weight, 16 uniform levels from its minimum (`u * s_g + min`), stored as `u - 8` on
    the int8 grid with `s_rel = s_g / s_channel` in fp8 and the zero point `8 * s_g + min` as the
    correction. Returns (the file's tensors, the float64 weight those tensors decode to, worked out
    element by element from the layout's definition)."""
    n, k = w.shape
    h = _block_hadamard(k, convrot)
    rot = w.double() @ h  # W_rot = W @ H (H symmetric)
    codes = torch.zeros(n, k, dtype=torch.long)
    s_g = torch.zeros(n, k // group, dtype=torch.float64)
    lo = torch.zeros(n, k // group, dtype=torch.float64)
    for r in range(n):
        for g in range(k // group):
            vals = rot[r, g * group:(g + 1) * group]
            lo[r, g], s_g[r, g] = vals.min(), max((vals.max() - vals.min()).item() / 15, 1e-8)
            codes[r, g * group:(g + 1) * group] = ((vals - lo[r, g]) / s_g[r, g]).round().clamp(0, 15).long()
    s_channel = ((codes.double() - 8).abs().reshape(n, k // group, group) * s_g[..., None]).amax(dim=(1, 2)) / 127
    s_rel = (s_g / s_channel[:, None]).to(torch.float8_e4m3fn)
    correction = (8 * s_g + lo).t().contiguous()  # [K / group, N]
    packed = torch.zeros(n, k // 2, dtype=torch.uint8)
    for r in range(n):
        for c in range(0, k, 2):
            packed[r, c // 2] = int(codes[r, c]) | (int(codes[r, c + 1]) << 4)  # even column: low nibble
    decoded = torch.zeros(n, k, dtype=torch.float64)
    for r in range(n):
        for c in range(k):
            g = c // group
            grid = max(-127.0, min(127.0, round((int(codes[r, c]) - 8) * float(_fp8(s_rel[r, g])))))
            decoded[r, c] = grid * float(s_channel[r].float()) + float(correction[g, r])
    tensors = {"weight": packed.view(torch.int8), "weight_s_rel": s_rel.view(torch.uint8),  # U8 bytes, as some files
               "weight_s_channel": s_channel.float(), "weight_correction": correction.float()}
    return tensors, decoded @ h  # rotated back: W = W_rot @ H


def _conf(group: int = 16, convrot: int = 64) -> dict:
    return {"format": FMT, "group_size": group, "convrot_groupsize": convrot}


def _dequantize(tensors: dict[str, torch.Tensor], conf: dict, shape: tuple[int, int]) -> torch.Tensor:
    return dequantize_stored(QuantizedLayer("l", FORMATS[FMT], conf), lambda name: tensors[name.split(".", 1)[1]],
                             shape)


def test_uniform_codes_decode_by_hand_low_nibble_first():
    # One row of 16 inputs, ConvRot 4, one group: byte 0x3A holds code 10 (column 0) and 3 (column 1).
    conf = _conf(group=16, convrot=4)
    codes = torch.tensor([10, 3] + [8] * 14)
    packed = (codes[0::2] | (codes[1::2] << 4)).to(torch.uint8).view(torch.int8).reshape(1, 8)
    s_rel, s_channel = torch.tensor([[2.0]]), torch.tensor([0.5])
    w = quant_w4a8.dequantize_w4a8(packed, s_rel, s_channel, None, None, conf, (1, 16))
    rotated = torch.zeros(1, 16, dtype=torch.float64)
    rotated[0, 0], rotated[0, 1] = (10 - 8) * 2.0 * 0.5, (3 - 8) * 2.0 * 0.5  # (code - 8) * s_rel, then * s_channel
    assert torch.allclose(w.double(), rotated @ _block_hadamard(16, 4), atol=1e-6)
    # A codebook replaces `code - 8`; each level times s_rel is rounded to the int8 grid first.
    book = torch.linspace(-1, 1, 16)
    w = quant_w4a8.dequantize_w4a8(packed, torch.tensor([[100.0]]), s_channel, book, None, conf, (1, 16))
    grid = (book[codes].double() * 100).round()
    assert torch.allclose(w.double(), (grid * 0.5).reshape(1, 16) @ _block_hadamard(16, 4), atol=1e-5)


def test_an_independently_quantised_asymmetric_layer_decodes_to_its_reference_within_the_formats_error():
    w = torch.randn(6, 64, generator=torch.Generator().manual_seed(4))
    conf = _conf(16, 64)
    tensors, reference = independent_asymmetric(w, 16, 64)
    ours = _dequantize(tensors, conf, (6, 64))
    assert torch.allclose(ours.double(), reference, atol=1e-5)
    # Within the format's error of the float weight: in the rotated basis each value is off by at most
    # half a uniform step, the fp8 rounding of s_rel (<= 2^-4 of up to 8 steps) and half an int8 grid step.
    h = _block_hadamard(64, 64)
    err = ((ours.double() - w.double()) @ h).abs()
    s_g = tensors["weight_s_rel"].view(torch.float8_e4m3fn).double() * tensors["weight_s_channel"].double()[:, None]
    bound = s_g.repeat_interleave(16, dim=1) + tensors["weight_s_channel"].double()[:, None] / 2 + 1e-6
    assert (err <= bound).all()
    assert 0 < float((ours - w).norm() / w.norm()) < 0.15


def test_the_codebook_quantiser_stays_within_four_bit_error():
    w = torch.randn(8, 128, generator=torch.Generator().manual_seed(5))
    conf = _conf(16, 64)
    stored = FORMATS[FMT].quantize(w, conf)
    assert stored["weight"].dtype == torch.int8 and stored["weight"].shape == (8, 64)
    assert stored["weight_s_rel"].shape == (8, 8) and stored["weight_s_channel"].shape == (8,)
    assert 0 < float((_dequantize(stored, conf, (8, 128)) - w).norm() / w.norm()) < 0.1


def test_the_w4a8_product_is_comfy_kitchens_int8_activation_product():
    gen = torch.Generator().manual_seed(6)
    w, x = torch.randn(12, 64, generator=gen), torch.randn(2, 3, 64, generator=gen)
    bias = torch.randn(12, generator=gen)
    conf = _conf(16, 16)
    s = FORMATS[FMT].quantize(w, conf)
    out = quant_w4a8.w4a8_linear(x, s["weight"], s["weight_s_rel"], s["weight_s_channel"], s["weight_codebook"], None,
                                 bias, conf)
    # By hand: rotate the input per 16, round it to int8 per row (amax / 127), exact integer products.
    grid = quant_w4a8.int8_weight(s["weight"], s["weight_s_rel"], s["weight_codebook"], 16).double()
    rows = x.reshape(6, 64).double() @ _block_hadamard(64, 16)
    a_scale = rows.abs().amax(dim=-1, keepdim=True) / 127
    a = (rows / a_scale).round()
    expected = (a @ grid.t()) * a_scale * s["weight_s_channel"].double() + bias.double()
    assert torch.allclose(out.reshape(6, 12).double(), expected, rtol=1e-5, atol=1e-5)
    exact = torch.nn.functional.linear(x, _dequantize(s, conf, (12, 64)), bias)
    assert 0 < float((out - exact).norm() / exact.norm()) < 0.02  # activation rounding only


@pytest.mark.parametrize("conf, message", [
    ({"format": FMT, "group_size": 8 * 3}, "group_size"),
    ({"format": FMT, "group_size": 2}, "group_size"),
    ({"format": FMT, "convrot_groupsize": 32}, "power of 4"),
    ({"format": FMT, "params": {"group_size": "x"}}, "integers"),
])
def test_bad_descriptions_are_typed_errors(conf, message):
    with pytest.raises(QuantFormatError, match=message):
        parse_conf(json.dumps(conf), "layer.comfy_quant")
    assert quant_w4a8.groups_of({"format": FMT, "params": {"group_size": 32, "convrot_groupsize": 64}}) == (32, 64)


def test_layers_that_do_not_fit_their_description_are_refused_when_attached():
    from torch import nn

    from comfy_core.models.quant_linear import attach_quantized

    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(7))
    conf = _conf(16, 64)
    stored = {f"lin.{k}": v for k, v in FORMATS[FMT].quantize(w, conf).items()}
    layer = QuantizedLayer("lin", FORMATS[FMT], conf)

    def attach(tensors: dict[str, torch.Tensor], width: int = 64) -> nn.Module:
        module = nn.Module()
        module.lin = nn.Linear(width, 4, bias=False)
        attach_quantized(module, {"lin": layer}, set(tensors), tensors.__getitem__, "", torch.float32)
        return module

    dense = _dequantize({k.split(".", 1)[1]: v for k, v in stored.items()}, conf, (4, 64))
    lin = attach(stored).lin
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(8))
    assert torch.allclose(lin(torch.eye(64)).t(), dense, atol=1e-6)  # by default: the dequantised weight
    lin.int8_matmul = True  # comfy-kitchen's W4A8 product (the input rounded to int8)
    s = {k.split(".", 1)[1]: v for k, v in stored.items()}
    assert torch.equal(lin(x), quant_w4a8.w4a8_linear(x, s["weight"], s["weight_s_rel"], s["weight_s_channel"],
                                                      s["weight_codebook"], None, None, conf))
    assert not torch.equal(lin(x), x @ dense.t())
    with pytest.raises(QuantFormatError, match="weight_s_rel has shape"):
        attach({**stored, "lin.weight_s_rel": stored["lin.weight_s_rel"][:, :2]})
    with pytest.raises(QuantFormatError, match="weight_codebook has shape"):
        attach({**stored, "lin.weight_codebook": torch.zeros(8)})
    narrow = {**stored, "lin.weight": stored["lin.weight"][:, :16].contiguous(),
              "lin.weight_s_rel": stored["lin.weight_s_rel"][:, :2].contiguous()}
    with pytest.raises(QuantFormatError, match="convrot_groupsize"):
        attach(narrow, width=32)  # 64 (ConvRot) does not divide 32


# --- a Qwen3.5 file in the format (Flux 3's prompt upsampler) -----------------------------------------

IDS = torch.tensor([[5, 77, 301, 12, 9, 440, 3, 18]])


@pytest.fixture(scope="module")
def qwen35_pair():
    """(the tiny Qwen3.5 with every block linear layer asym_w4a8_int8, its dequantised float32 twin)."""
    from comfy_core.text_encoders.qwen35 import Qwen35Config
    from comfy_core.text_encoders.qwen35_load import build_qwen35_encoder
    from tests.fixtures.qwen35_files import tiny_state_dict
    from tests.fixtures.t5_files import header_of
    from tests.fixtures.template_models_quant import quantize_state, true_state

    state = tiny_state_dict(seed=3, vocab=512, tie=False, visual=False)
    tensors, metadata = quantize_state(state, FMT, convrot=True, float_dtype=torch.float32,
                                       select=lambda layer: ".layers." in layer)
    shapes = {n: tuple(v.shape) for n, v in state.items() if v.dim() == 2}
    twin = true_state(tensors, metadata, shapes)
    config = Qwen35Config.detect_from_weights(header_of(state), "")
    return build_qwen35_encoder(config, tensors), build_qwen35_encoder(config, twin)


def test_a_qwen35_w4a8_file_stays_packed_and_generates_as_its_dequantised_twin(qwen35_pair):
    from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens

    tower, twin = qwen35_pair
    qkv = tower.transformer.model.layers[0].linear_attn.in_proj_qkv
    assert isinstance(qkv, QuantizedLinear) and qkv.quant_format == FMT
    assert qkv.weight.dtype == torch.int8 and qkv.weight.shape[1] * 2 == qkv.in_features  # two codes a byte
    assert isinstance(tower.transformer.model.layers[3].self_attn.o_proj, QuantizedLinear)
    with torch.no_grad():
        assert torch.allclose(tower.encode_ids(IDS, layer_idx=-2), twin.encode_ids(IDS, layer_idx=-2), atol=1e-5)
        ours = generate_tokens(tower, tower.embed_ids(IDS), 6, SamplingOptions(do_sample=False))
        assert ours == generate_tokens(twin, twin.embed_ids(IDS), 6, SamplingOptions(do_sample=False))


# --- a LoRA on int4 layers (UNETLoader's path) ----------------------------------------------------------

def test_lora_on_w4a8_layers_adds_to_the_dequantized_weight_and_restores_the_packed_one(tmp_path):
    from comfy_core.lora import load_lora_for_models
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import write_quantized
    from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict

    qkv = "diffusion_model.layers.0.attention.qkv"
    quantized, truth = write_quantized(tmp_path / "z_w4a8.safetensors", tiny_zimage_state_dict(seed=1), FMT,
                                       convrot=True, float_dtype=torch.float32, in_metadata=True,
                                       select=lambda layer: layer.startswith(("layers.", "noise_refiner.")))
    model = load_diffusion_model(quantized)
    layer = model.model.get_submodule(qkv)
    assert isinstance(layer, QuantizedLinear) and layer.quant_format == FMT and layer.weight.dtype == torch.int8
    gen = torch.Generator().manual_seed(5)
    lora = {f"{qkv}.lora_down.weight": 0.3 * torch.randn(4, layer.in_features, generator=gen),
            f"{qkv}.lora_up.weight": 0.3 * torch.randn(layer.out_features, 4, generator=gen)}
    patched, _, report = load_lora_for_models(model, None, lora, 0.8, 0.0)
    assert report.skipped == [] and report.model_keys == 1  # the packed weight fits by its true shape
    stored, bits = layer.weight, layer.weight.detach().clone()
    dequantized = layer.dequantize_weight()
    x = torch.randn(1, 16, 8, 8, generator=gen), torch.tensor([0.6]), torch.randn(1, 7, CAP_WIDTH, generator=gen)
    with patched.applied() as dm, torch.no_grad():
        held = layer.weight.detach().clone()
        out = dm.apply_model(x[0], x[1], c_crossattn=x[2])
    delta = 0.8 * lora[f"{qkv}.lora_up.weight"] @ lora[f"{qkv}.lora_down.weight"]
    assert held.dtype == torch.float32 and torch.allclose(held, dequantized + delta, atol=1e-5)
    assert layer.weight is stored and torch.equal(stored, bits)
    true_patched, _, _ = load_lora_for_models(load_diffusion_model(truth), None, lora, 0.8, 0.0)
    with true_patched.applied() as dm, torch.no_grad():
        expected = dm.apply_model(x[0], x[1], c_crossattn=x[2])
    assert float((out - expected).norm() / expected.norm()) < 1e-5
