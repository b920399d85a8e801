"""Default dtypes on GPUs (comfy_core.checkpoint.dtype), decided from made-up device facts: fp16
UNets where the family allows and the card runs fp16 well, bf16 first for Flux/Chroma, fp32 on
old cards, bf16 VAEs from Ampere; the CPU defaults unchanged; explicit flags win."""
from __future__ import annotations

import pytest
import torch

from comfy_core.checkpoint.dtype import (TEXT, UNET, VAE, DeviceFacts, DtypePolicy, default_unet_dtype,
                                         default_vae_dtype, fp16_runs_well, unet_compute_dtype)
from comfy_core.families import default_registry

H200 = DeviceFacts(kind="cuda", capability=(9, 0), name="NVIDIA H200", bf16_supported=True)
RTX3090 = DeviceFacts(kind="cuda", capability=(8, 6), name="NVIDIA GeForce RTX 3090", bf16_supported=True)
T4 = DeviceFacts(kind="cuda", capability=(7, 5), name="Tesla T4")
GTX1660 = DeviceFacts(kind="cuda", capability=(7, 5), name="NVIDIA GeForce GTX 1660 SUPER")
GTX1080 = DeviceFacts(kind="cuda", capability=(6, 1), name="NVIDIA GeForce GTX 1080")
P100 = DeviceFacts(kind="cuda", capability=(6, 0), name="Tesla P100-PCIE-16GB")
K80 = DeviceFacts(kind="cuda", capability=(3, 7), name="Tesla K80")
MI250 = DeviceFacts(kind="cuda", capability=(9, 0), name="AMD Instinct MI250X", hip=True)
FLUX = ("bf16", "fp16", "fp32")


@pytest.mark.parametrize(("facts", "sd", "flux", "vae"), [
    (H200, torch.float16, torch.bfloat16, torch.bfloat16),
    (RTX3090, torch.float16, torch.bfloat16, torch.bfloat16),
    (T4, torch.float16, torch.float16, torch.float32),  # Turing: no fast bf16, fp16 for Flux too
    (GTX1660, torch.float32, torch.float32, torch.float32),  # broken fp16
    (GTX1080, torch.float16, torch.float16, torch.float32),  # Pascal: fp16 stored, computed by casting
    (K80, torch.float32, torch.float32, torch.float32),
    (MI250, torch.float16, torch.bfloat16, torch.bfloat16),
])
def test_unet_and_vae_defaults_per_card(facts, sd, flux, vae):
    assert default_unet_dtype(facts) == sd
    assert default_unet_dtype(facts, FLUX) == flux
    assert default_vae_dtype(facts) == vae


def test_pascal_computes_fp16_weights_in_fp32_and_windows_uses_fp16():
    assert not fp16_runs_well(GTX1080) and fp16_runs_well(GTX1080, manual_cast=True)
    assert unet_compute_dtype(torch.float16, GTX1080) == torch.float32
    assert unet_compute_dtype(torch.float16, H200) is None
    assert unet_compute_dtype(torch.bfloat16, T4) == torch.float16
    assert unet_compute_dtype(torch.float32, K80) is None
    windows = DeviceFacts(kind="cuda", capability=(6, 1), name="NVIDIA GeForce GTX 1080", windows=True)
    assert fp16_runs_well(windows)
    assert not fp16_runs_well(P100) and default_unet_dtype(P100) == torch.float16  # P100 via manual cast


def test_fp16_files_stay_fp16_where_the_family_allows_it():
    assert default_unet_dtype(H200, FLUX, weight_dtype=torch.float16) == torch.float16
    assert default_unet_dtype(H200, ("bf16", "fp32"), weight_dtype=torch.float16) == torch.bfloat16


def test_policy_on_cuda_reads_the_family_preference_and_flags_win():
    policy = DtypePolicy(device="cuda", device_facts=H200)
    assert policy.dtype_for(UNET) == torch.float16
    assert policy.dtype_for(UNET, supported=FLUX) == torch.bfloat16
    assert policy.dtype_for(VAE) == torch.bfloat16
    assert policy.dtype_for(TEXT) == torch.float16
    old = DtypePolicy(device="cuda", device_facts=K80)
    assert (old.dtype_for(UNET), old.dtype_for(VAE)) == (torch.float32, torch.float32)
    forced = DtypePolicy.from_flags("cuda", fp32_vae=True, bf16_unet=True)
    forced = DtypePolicy(device="cuda", unet=forced.unet, vae=forced.vae, device_facts=H200)
    assert forced.dtype_for(UNET, supported=("fp16",)) == torch.bfloat16 and forced.dtype_for(VAE) == torch.float32


def test_cpu_defaults_are_unchanged():
    policy = DtypePolicy()
    assert (policy.dtype_for(UNET), policy.dtype_for(VAE), policy.dtype_for(TEXT)) == \
        (torch.float32, torch.float32, torch.float16)
    assert policy.dtype_for(UNET, supported=FLUX) == torch.float32
    assert DeviceFacts.probe("cpu") == DeviceFacts(kind="cpu")


def test_families_declare_comfyuis_inference_dtypes():
    families = {f.name: f for f in default_registry()}
    assert families["flux"].inference_dtypes[0] == "bf16" and families["chroma"].inference_dtypes[0] == "bf16"
    assert families["flux_schnell"].inference_dtypes[0] == "bf16"
    assert families["sd1"].inference_dtypes[0] == "fp16" and families["sdxl"].inference_dtypes[0] == "fp16"
    assert families["sd3"].inference_dtypes[0] == "fp16"  # ComfyUI's SD3 keeps the BASE order


@pytest.mark.cuda
def test_probed_facts_of_the_real_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    facts = DeviceFacts.probe("cuda")
    assert facts.kind == "cuda" and facts.capability[0] > 0 and facts.name
    dtype = DtypePolicy(device="cuda").dtype_for(UNET)
    assert dtype in (torch.float16, torch.float32)
    x = torch.ones(4, 4, device="cuda", dtype=dtype)
    assert (x @ x).dtype == dtype


def test_the_loader_s_unet_dtype_follows_the_family_and_the_file_on_each_device():
    from types import SimpleNamespace

    from comfy_core.loading import family_unet_dtype

    registry = default_registry()
    ampere = DeviceFacts(kind="cuda", capability=(8, 6), name="NVIDIA RTX A4000", bf16_supported=True)
    bf16_file = {"model.diffusion_model.x.weight": SimpleNamespace(dtype="BF16", shape=(2,))}
    fp16_file = {"model.diffusion_model.x.weight": SimpleNamespace(dtype="F16", shape=(2,))}
    on_gpu = DtypePolicy(device="cuda", device_facts=ampere)
    assert family_unet_dtype(on_gpu, registry.get("flux"), bf16_file) == torch.bfloat16
    assert family_unet_dtype(on_gpu, registry.get("sd1"), bf16_file) == torch.float16
    assert family_unet_dtype(on_gpu, registry.get("flux"), fp16_file) == torch.float16  # ComfyUI: the file's fp16 first
    assert family_unet_dtype(DtypePolicy(), registry.get("flux"), bf16_file) == torch.float32  # the CPU: float32
