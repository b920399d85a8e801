"""GGUF diffusion models loaded natively (comfy_core/weights/quant_gguf.py through UNETLoader's path):
the quantised linear weights stay ggml blocks (views of the file), the model computes what the same
network with gguf-py's dequantised weights computes, and a LoRA reaches the quantised layers.

The file is the tiny Z-Image in ComfyUI's names as city96's ComfyUI-GGUF conversions store a
diffusion model: 2-D weights whose rows are whole blocks quantised (Q8_0 / Q4_0 / Q5_1, written by
gguf-py, the reference implementation), the rest F32."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from comfy_core.checkpoint.errors import CheckpointError  # noqa: E402
from comfy_core.lora import load_lora_for_models  # noqa: E402
from comfy_core.split.diffusion_model import load_diffusion_model  # noqa: E402
from comfy_core.models.quant_linear import QuantizedLinear  # noqa: E402
from tests.fixtures.dit_checkpoints import save  # noqa: E402
from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict  # noqa: E402

QKV = "diffusion_model.layers.0.attention.qkv"


def _write(path: Path, state: dict[str, torch.Tensor], qtype: str) -> dict[str, torch.Tensor]:
    """`state` as a GGUF file; returns the float32 state it stands for (gguf-py's dequantisation)."""
    writer = gguf.GGUFWriter(str(path), "lumina2")
    truth = {}
    for name, tensor in state.items():
        array = tensor.float().numpy()
        if name.endswith(".weight") and tensor.dim() == 2 and tensor.shape[1] % 32 == 0:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            blocks = gguf.quants.quantize(array, kind)
            writer.add_tensor(name, blocks, raw_dtype=kind)
            truth[name] = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(blocks, kind))).float()
        else:
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
            truth[name] = tensor.float()
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return truth


def _denoise(model) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    x, sigma, cond = torch.randn(1, 16, 8, 8, generator=gen), torch.tensor([0.6]), torch.randn(1, 7, CAP_WIDTH, generator=gen)
    with model.applied() as dm, torch.no_grad():
        return dm.apply_model(x, sigma, c_crossattn=cond)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q5_1"])
def test_a_gguf_diffusion_model_keeps_ggml_blocks_and_computes_the_dequantized_model(tmp_path, qtype):
    state = tiny_zimage_state_dict(seed=5)
    path = tmp_path / f"z_image_{qtype}.gguf"
    truth = _write(path, state, qtype)
    model = load_diffusion_model(path)
    layer = model.model.get_submodule(QKV)
    assert isinstance(layer, QuantizedLinear) and layer.quant_format == "gguf"
    block = {"Q8_0": 34, "Q4_0": 18, "Q5_1": 24}[qtype]
    assert layer.weight.dtype == torch.uint8 and tuple(layer.weight.shape) == (192, 64 // 32 * block)
    assert layer.weight.untyped_storage().nbytes() == path.stat().st_size  # a view of the file mapping
    assert not isinstance(model.model.get_submodule("diffusion_model.layers.0.feed_forward.w2"), QuantizedLinear)
    reference = load_diffusion_model(save(truth, tmp_path / "truth.safetensors"))
    assert _rel(_denoise(model), _denoise(reference)) < 1e-5
    float_model = load_diffusion_model(save(state, tmp_path / "float.safetensors"))
    assert _rel(_denoise(model), _denoise(float_model)) < {"Q8_0": 0.02, "Q4_0": 0.2, "Q5_1": 0.1}[qtype]


def test_lora_on_a_gguf_layer_matches_the_dequantized_model(tmp_path):
    state = tiny_zimage_state_dict(seed=6)
    path = tmp_path / "z_image_q8.gguf"
    truth = _write(path, state, "Q8_0")
    gen = torch.Generator().manual_seed(1)
    lora = {f"{QKV}.lora_down.weight": 0.3 * torch.randn(4, 64, generator=gen),
            f"{QKV}.lora_up.weight": 0.3 * torch.randn(192, 4, generator=gen)}
    outs = []
    for model in (load_diffusion_model(path), load_diffusion_model(save(truth, tmp_path / "t.safetensors"))):
        patched, _, report = load_lora_for_models(model, None, lora, 1.0, 0.0)
        assert report.skipped == [] and report.model_keys == 1
        outs.append(_denoise(patched))
    assert _rel(outs[0], outs[1]) < 1e-5


def test_a_damaged_gguf_file_is_a_typed_error(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF\x09\x00\x00\x00")
    with pytest.raises(CheckpointError, match="version"):
        load_diffusion_model(path)
