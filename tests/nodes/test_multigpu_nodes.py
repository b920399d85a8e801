"""The nodes of ComfyUI's comfy_extras/nodes_multigpu.py (2026) on this one-device runtime: the
device combos and names as ComfyUI's model_management resolves them on a single-device machine,
each Select node's clone routed as ComfyUI routes it (the input never changed; "default"
restoring the loader's devices; "cpu" pinning both devices and computing in float32), unknown
devices passing through, MultiGPU_WorkUnits returning a clone, and a prompt with a device this
machine lacks passing validation."""
from __future__ import annotations

import shutil

import pytest
import torch

import nodes.multigpu_nodes as multigpu
from comfy_core.checkpoint.dtype import DtypePolicy
from comfy_core.loading import load_checkpoint
from nodes.conditioning import clip_text_encode
from nodes.errors import NodeInputError
from nodes.multigpu_nodes import (device_options, device_options_no_cpu, multigpu_work_units,
                                  resolve_device_option, select_clip_device, select_model_device,
                                  select_vae_device)
from tests.nodes.node_context import running_node
from tests.nodes.workflow_2026 import Runner, node

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
CUDA1 = torch.device("cuda", 1)


@pytest.fixture(scope="module")
def loaded(tiny_sd1_ckpt):
    return load_checkpoint(tiny_sd1_ckpt)


def routed(patcher, load, offload):
    """A clone of `patcher` as a loader would hand it out for (load, offload) devices (the
    devices are only recorded here, nothing is moved)."""
    patcher = patcher.clone()
    patcher.load_device, patcher.offload_device = load, offload
    return patcher


# -- device names ----------------------------------------------------------------------------------

def test_one_device_offers_default_and_cpu_only():
    assert device_options() == ["default", "cpu"]
    assert device_options_no_cpu() == ["default"]


def test_several_devices_would_add_gpu_entries():
    assert device_options(device_count=2) == ["default", "cpu", "gpu:0", "gpu:1"]
    assert device_options_no_cpu(device_count=2) == ["default", "gpu:0", "gpu:1"]


@pytest.mark.parametrize("name, expected", [("default", None), (None, None), ("cpu", CPU), ("gpu:0", CUDA0),
                                            ("gpu:1", None), ("gpu:bad", None), ("cuda:0", None), (3, None)])
def test_names_resolve_against_the_one_gpu(monkeypatch, name, expected):
    monkeypatch.setattr(multigpu, "runtime_devices", lambda: [CUDA0])
    assert resolve_device_option(name) == expected


def test_gpu_0_on_a_cpu_only_machine_is_unavailable(monkeypatch):
    monkeypatch.setattr(multigpu, "runtime_devices", lambda: [CPU])
    assert resolve_device_option("gpu:0") is None
    assert resolve_device_option("cpu") == CPU


# -- SelectModelDevice -----------------------------------------------------------------------------

def test_cpu_pins_both_devices_and_default_restores_the_loaders(loaded):
    model = routed(loaded[0], CUDA0, CUDA1)
    (pinned,) = select_model_device(model, "cpu")
    assert pinned is not model and pinned.model is model.model
    assert (pinned.load_device, pinned.offload_device) == (CPU, CPU)
    assert (model.load_device, model.offload_device) == (CUDA0, CUDA1)  # the input is untouched
    (restored,) = select_model_device(pinned, "default")
    assert (restored.load_device, restored.offload_device) == (CUDA0, CUDA1)
    assert (pinned.load_device, pinned.offload_device) == (CPU, CPU)


def test_gpu_0_loads_on_the_gpu_and_offloads_to_the_loaders_device(loaded, monkeypatch):
    monkeypatch.setattr(multigpu, "runtime_devices", lambda: [CUDA0])
    (pinned,) = select_model_device(routed(loaded[0], CUDA0, CPU), "cpu")
    (back,) = select_model_device(pinned, "gpu:0")
    assert (back.load_device, back.offload_device) == (CUDA0, CPU)


@pytest.mark.parametrize("device", ["gpu:3", "cuda:1", "something"])
def test_an_unavailable_device_passes_a_clone_through(loaded, device):
    model = routed(loaded[0], CUDA0, CPU)
    (out,) = select_model_device(model, device)
    assert out is not model and out.model is model.model
    assert (out.load_device, out.offload_device) == (CUDA0, CPU)
    assert out.object_patches == model.object_patches


def denoised(patcher, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, 8, 8, generator=generator)
    context = torch.randn(1, 77, patcher.model._context_width(), generator=generator)
    with torch.no_grad(), patcher.applied() as m:
        return m.apply_model(x, torch.tensor([1.5]), c_crossattn=context)


def test_cpu_computes_fp8_weights_in_float32(tiny_sd1_ckpt):
    fp8, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False,
                                dtype_policy=DtypePolicy(unet=torch.float8_e4m3fn))
    on_gpu = fp8.clone()
    on_gpu.add_object_patch("manual_cast_dtype", torch.bfloat16)  # as loaded for a GPU computing in bf16
    (pinned,) = select_model_device(on_gpu, "cpu")
    assert pinned.object_patches["manual_cast_dtype"] == torch.float32
    assert on_gpu.object_patches["manual_cast_dtype"] == torch.bfloat16
    # reference: float32 weights holding the same (fp8-rounded) values, computed in float32
    reference, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
    with torch.no_grad():
        for p in reference.model.parameters():
            p.copy_(p.to(torch.float8_e4m3fn).float())
    want = denoised(reference)
    assert torch.allclose(denoised(pinned), want, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(denoised(on_gpu), want, atol=1e-4, rtol=1e-4)  # bf16 compute differs


def test_plain_half_precision_layers_keep_their_dtype_on_cpu(tiny_sd1_ckpt):
    half, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False,
                                 dtype_policy=DtypePolicy(unet=torch.bfloat16))
    (pinned,) = select_model_device(half, "cpu")
    assert "manual_cast_dtype" not in pinned.object_patches
    assert torch.equal(denoised(pinned), denoised(half))


def test_float32_weights_get_no_compute_dtype_patch(loaded):
    (pinned,) = select_model_device(loaded[0], "cpu")
    assert "manual_cast_dtype" not in pinned.object_patches


# -- SelectCLIPDevice / SelectVAEDevice ------------------------------------------------------------

def test_select_clip_device_routes_a_clone_that_still_encodes(loaded):
    clip = loaded[1].clone()
    clip.patcher = routed(clip.patcher, CUDA0, CUDA1)
    (pinned,) = select_clip_device(clip, "cpu")
    assert (pinned.patcher.load_device, pinned.patcher.offload_device) == (CPU, CPU)
    assert (clip.patcher.load_device, clip.patcher.offload_device) == (CUDA0, CUDA1)
    (restored,) = select_clip_device(pinned, "default")
    assert (restored.patcher.load_device, restored.patcher.offload_device) == (CUDA0, CUDA1)
    (unknown,) = select_clip_device(clip, "gpu:7")
    assert unknown is not clip and unknown.patcher.load_device == CUDA0
    # the pinned CLIP encodes as the loader's CLIP does
    want = clip_text_encode("a red cube", loaded[1])[0][0][0]
    got = clip_text_encode("a red cube", pinned)[0][0][0]
    assert torch.equal(got, want)


def test_select_vae_device_refuses_cpu_and_restores_default(loaded, monkeypatch):
    vae = routed(loaded[2], CUDA0, CPU)
    (out,) = select_vae_device(vae, "cpu")
    assert out is not vae and (out.load_device, out.offload_device) == (CUDA0, CPU)
    (first,) = select_vae_device(vae, "default")  # records the loader's devices on its chain
    assert (first.device, first.offload_device) == (CUDA0, CPU)
    moved = routed(first, CPU, CPU)  # later moved by something else on the same chain
    (restored,) = select_vae_device(moved, "default")
    assert (restored.device, restored.offload_device) == (CUDA0, CPU)
    assert (moved.load_device, moved.offload_device) == (CPU, CPU)
    monkeypatch.setattr(multigpu, "runtime_devices", lambda: [CUDA0])
    (again,) = select_vae_device(moved, "gpu:0")
    assert (again.load_device, again.device, again.offload_device) == (CUDA0, CUDA0, CPU)
    (unknown,) = select_vae_device(moved, "gpu:1")
    assert unknown is not moved and (unknown.load_device, unknown.offload_device) == (CPU, CPU)


def test_a_wrong_value_is_an_input_error(loaded):
    with running_node("SelectModelDevice"), pytest.raises(NodeInputError, match="model"):
        select_model_device("not a model", "cpu")
    with running_node("SelectVAEDevice"), pytest.raises(NodeInputError, match="device"):
        select_vae_device(loaded[2], ["cpu"])


# -- MultiGPU_WorkUnits ----------------------------------------------------------------------------

@pytest.mark.parametrize("max_gpus", [1, 2, 8])
def test_work_units_on_one_device_return_a_clone(loaded, max_gpus):
    model = routed(loaded[0], CPU, CPU)
    (out,) = multigpu_work_units(model, max_gpus)
    assert out is not model and out.model is model.model
    assert (out.load_device, out.offload_device) == (CPU, CPU)
    assert out.patches == model.patches and out.object_patches == model.object_patches
    with running_node("MultiGPU_WorkUnits"), pytest.raises(NodeInputError, match="max_gpus"):
        multigpu_work_units(model, 0)


# -- through the validator -------------------------------------------------------------------------

async def test_a_device_this_machine_lacks_passes_validation(tmp_path, tiny_sd1_ckpt):
    runner = Runner(tmp_path)
    checkpoints = tmp_path / "models" / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, checkpoints / "tiny.safetensors")
    prompt = {
        "ckpt": node("CheckpointLoaderSimple", ckpt_name="tiny.safetensors"),
        "model": node("SelectModelDevice", model=["ckpt", 0], device="gpu:5"),
        "clip": node("SelectCLIPDevice", clip=["ckpt", 1], device="gpu:2"),
        "vae": node("SelectVAEDevice", vae=["ckpt", 2], device="cpu"),
        "split": node("MultiGPU_WorkUnits", model=["model", 0], max_gpus=4),
        "enc": node("CLIPTextEncode", clip=["clip", 0], text="a cube"),
        "latent": node("EmptyLatentImage", width=64, height=64, batch_size=1),
        "sample": node("KSampler", model=["split", 0], seed=1, steps=1, cfg=1.0, sampler_name="euler",
                       scheduler="normal", positive=["enc", 0], negative=["enc", 0], latent_image=["latent", 0],
                       denoise=1.0),
        "decode": node("VAEDecode", samples=["sample", 0], vae=["vae", 0]),
        "save": node("PreviewImage", images=["decode", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert {"model", "clip", "vae", "split", "sample"} <= set(runner.ran)
