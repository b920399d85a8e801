"""Which dtype a diffusion-model file is "stored in" is counted by elements (today's ComfyUI's
`comfy.utils.weight_dtype`), not by tensors: an fp8 file whose small biases and norms stay bf16
(Qwen-Image's, Z-Image's fp8 files) must load as fp8, its weights left in the file mapping and
cast per layer, not upcast to float32 at load (bench/llm_families.py measured 2x the file in
anonymous memory before)."""
from __future__ import annotations

import torch

from comfy_core.checkpoint.header import TensorInfo
from comfy_core.loading import stored_dtype
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.qwen_image_files import tiny_qwen_image_state_dict


def test_stored_dtype_counts_elements_not_tensors():
    header = {"w": TensorInfo("F8_E4M3", (64, 64)), "b1": TensorInfo("BF16", (64,)),
              "b2": TensorInfo("BF16", (64,)), "n": TensorInfo("BF16", (32,)), "other.w": TensorInfo("F32", (999, 99))}
    assert stored_dtype(header, "") == torch.float32
    assert stored_dtype(header, "w") == torch.float8_e4m3fn
    assert stored_dtype({k: v for k, v in header.items() if not k.startswith("other")}, "") == torch.float8_e4m3fn
    assert stored_dtype({}, "") is None


def _mapped(path) -> list[tuple[int, int]]:
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(str(path)):
                lo, hi = line.split()[0].split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def test_fp8_file_with_bf16_biases_stays_fp8_in_the_file_mapping(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = {k: v.to(torch.float8_e4m3fn if v.ndim >= 2 else torch.bfloat16)
             for k, v in tiny_qwen_image_state_dict(seed=2).items()}
    assert sum(v.dtype == torch.bfloat16 for v in state.values()) > sum(v.dtype != torch.bfloat16 for v in state.values())
    path = save(state, tmp_path / "qwen_image_fp8_e4m3fn.safetensors")
    model = load_diffusion_model(path)
    weight = model.model.diffusion_model.transformer_blocks[0].attn.to_q.weight
    assert weight.dtype == torch.float8_e4m3fn
    assert model.model.manual_cast_dtype == torch.float32  # cast per layer while it runs (CPU)
    assert any(lo <= weight.data_ptr() < hi for lo, hi in _mapped(path.resolve()))
    x = torch.randn(1, 16, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    context = torch.randn(1, 5, 48, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model.model.apply_model(x, torch.tensor([0.5]), c_crossattn=context)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
