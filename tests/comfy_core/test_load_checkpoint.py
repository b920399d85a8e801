"""`load_checkpoint`: tiny checkpoints -> working (MODEL, CLIP, VAE) patchers; typed errors."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from comfy_core.checkpoint.dtype import DeviceFacts, DtypePolicy, DtypePolicyError
from comfy_core.checkpoint.errors import MissingComponentError, ShapeMismatchError
from comfy_core.families.errors import UnknownFamilyError
from comfy_core.loading import LoadOptions, load_checkpoint, load_vae
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.vae import VaePatcher


def test_public_name_is_lazy_and_import_is_torch_free():
    code = ("import sys, comfy_core; assert 'torch' not in sys.modules; "
            "from comfy_core import load_checkpoint; assert callable(load_checkpoint); "
            "assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    return load_checkpoint(tiny_sd1_ckpt)


def test_sd1_components_hold_the_file_weights(sd1, tiny_sd1_ckpt):
    model, clip, vae = sd1
    assert isinstance(model, ModelPatcher) and isinstance(vae, VaePatcher)
    state = load_file(str(tiny_sd1_ckpt))
    unet = model.model.diffusion_model
    assert torch.equal(unet.input_blocks[1][1].proj_in.weight, state["model.diffusion_model.input_blocks.1.1.proj_in.weight"])
    assert torch.equal(vae.model.decoder.conv_out.bias, state["first_stage_model.decoder.conv_out.bias"])
    assert unet.out[2].weight.dtype == torch.float32
    assert model.model.family.name == "sd1" and model.model.latent_format.scale_factor == 0.18215
    assert clip is not None


def test_apply_model_is_comfyui_base_model_math(sd1):
    model = sd1[0].model
    sampling = model.model_sampling
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=gen)
    sigma = torch.tensor([14.6, 0.5])
    ctx = torch.randn(2, 77, 64, generator=gen)
    with torch.no_grad():
        denoised = model.apply_model(x, sigma, ctx)
        eps = model.diffusion_model(x / (sigma[:, None, None, None] ** 2 + 1) ** 0.5, sampling.timestep(sigma).float(), ctx)
    assert torch.allclose(denoised, x - eps * sigma[:, None, None, None], atol=1e-5)
    with pytest.raises(ValueError, match="expects 64"):
        model.apply_model(x, sigma, torch.zeros(2, 77, 32))


def test_vae_round_trip_shapes(sd1):
    vae = sd1[2]
    image = vae.decode(torch.randn(1, 4, 8, 8))
    assert image.shape == (1, 64, 64, 3) and 0 <= image.min() and image.max() <= 1
    assert vae.encode(image).shape == (1, 4, 8, 8)


def test_sd2_v_and_sdxl(tiny_sd2v_ckpt, tiny_sdxl_ckpt):
    model, _, _ = load_checkpoint(tiny_sd2v_ckpt, output_clip=False, output_vae=False)
    assert model.model.model_sampling.prediction == "v"
    model, _, vae = load_checkpoint(tiny_sdxl_ckpt, output_clip=False)
    assert model.model.latent_format.scale_factor == 0.13025
    y = model.model.encode_adm(pooled_output=torch.zeros(1, 64), width=64, height=64)
    assert y.shape == (1, 64 + 6 * 256)
    with torch.no_grad():
        out = model.model.apply_model(torch.randn(1, 4, 8, 8), torch.tensor([1.0]), torch.randn(1, 77, 128), y=y)
    assert out.shape == (1, 4, 8, 8) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="pooled_output"):
        model.model.encode_adm(width=64)


def test_dtype_policy(tiny_sd1_ckpt):
    policy = DtypePolicy(unet=torch.float16)
    model, _, vae = load_checkpoint(tiny_sd1_ckpt, LoadOptions(dtype_policy=policy, output_clip=False))
    assert model.model.get_dtype() == torch.float16
    assert vae.model.quant_conv.weight.dtype == torch.float32
    assert DtypePolicy.from_flags(bf16_unet=True).dtype_for("unet") == torch.bfloat16
    assert DtypePolicy().dtype_for("text") == torch.float16
    ampere = DeviceFacts(kind="cuda", capability=(8, 6), name="NVIDIA RTX A4000", bf16_supported=True)
    assert DtypePolicy(device="cuda", device_facts=ampere).dtype_for("unet") == torch.float16
    with pytest.raises(DtypePolicyError):
        DtypePolicy(unet=torch.int8)


def _rewrite(src, dst, drop=(), change=None):
    state = load_file(str(src))
    state = {k: v for k, v in state.items() if not k.startswith(drop)}
    if change:
        state.update(change)
    save_file(state, str(dst))
    return dst


def test_missing_vae_is_a_typed_error(tmp_path, tiny_sd1_ckpt):
    path = _rewrite(tiny_sd1_ckpt, tmp_path / "novae.safetensors", drop=("first_stage_model.",))
    with pytest.raises(MissingComponentError, match="novae.safetensors"):
        load_checkpoint(path)
    model, _, vae = load_checkpoint(path, output_vae=False)
    assert vae is None and model is not None


def test_shape_mismatch_names_file_and_key(tmp_path, tiny_sd1_ckpt):
    key = "model.diffusion_model.input_blocks.1.0.emb_layers.1.bias"
    path = _rewrite(tiny_sd1_ckpt, tmp_path / "bad.safetensors", change={key: torch.zeros(31)})
    with pytest.raises(ShapeMismatchError) as err:
        load_checkpoint(path, output_clip=False)
    assert "bad.safetensors" in str(err.value) and key in str(err.value)


def test_missing_unet_tensor_is_a_typed_error(tmp_path, tiny_sd1_ckpt):
    path = _rewrite(tiny_sd1_ckpt, tmp_path / "hole.safetensors",
                    drop=("model.diffusion_model.middle_block.2.out_layers.3.",))
    with pytest.raises(ShapeMismatchError, match="missing"):
        load_checkpoint(path, output_clip=False)


def test_unknown_file(tmp_path):
    path = tmp_path / "random.safetensors"
    save_file({"a": torch.zeros(3)}, str(path))
    with pytest.raises(UnknownFamilyError, match="random.safetensors"):
        load_checkpoint(path)


def test_pickled_checkpoint_loads_the_same(tmp_path, tiny_sd1_ckpt, sd1):
    path = tmp_path / "tiny.ckpt"
    torch.save({"state_dict": load_file(str(tiny_sd1_ckpt))}, path)
    model, _, _ = load_checkpoint(path, output_clip=False, output_vae=False)
    a = dict(model.model.diffusion_model.named_parameters())
    b = dict(sd1[0].model.diffusion_model.named_parameters())
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_standalone_vae_file_with_linear_attention(tmp_path, tiny_sd1_ckpt):
    state = {k[len("first_stage_model."):]: v for k, v in load_file(str(tiny_sd1_ckpt)).items()
             if k.startswith("first_stage_model.")}
    state["decoder.mid.attn_1.q.weight"] = state["decoder.mid.attn_1.q.weight"][:, :, 0, 0].clone()
    path = tmp_path / "vae.safetensors"
    save_file(state, str(path))
    vae = load_vae(path)
    assert vae.model.decoder.mid.attn_1.q.weight.shape == (64, 64, 1, 1)
    assert torch.equal(vae.model.decoder.mid.attn_1.q.weight[:, :, 0, 0], state["decoder.mid.attn_1.q.weight"])


def test_truncated_checkpoint_is_refused_before_building_anything(tmp_path, tiny_sd1_ckpt):
    from comfy_core.checkpoint.errors import CorruptCheckpointError

    path = tmp_path / "cut.safetensors"
    path.write_bytes(tiny_sd1_ckpt.read_bytes()[:-4096])
    with pytest.raises(CorruptCheckpointError, match="cut.safetensors"):
        load_checkpoint(path)


def test_sdxl_v_prediction_and_zsnr_markers(tmp_path, tiny_sdxl_ckpt):
    path = _rewrite(tiny_sdxl_ckpt, tmp_path / "vpred.safetensors",
                    change={"v_pred": torch.tensor([]), "ztsnr": torch.tensor([])})
    model, _, _ = load_checkpoint(path, output_clip=False, output_vae=False)
    sampling = model.model.model_sampling
    assert sampling.prediction == "v"
    plain, _, _ = load_checkpoint(tiny_sdxl_ckpt, output_clip=False, output_vae=False)
    assert plain.model.model_sampling.prediction == "eps"
    # Zero terminal SNR makes the last sigma huge compared with the plain schedule's ~14.6.
    assert float(sampling.sigmas[-1]) > 100 * float(plain.model.model_sampling.sigmas[-1])


def test_a_bf16_unet_on_a_cpu_without_native_bf16_is_warned_about(monkeypatch, caplog):
    import comfy_core.loading as loading

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level("WARNING", logger="comfy_core.loading"):
        assert loading.warn_if_emulated_bf16(torch.bfloat16, "cpu")
    assert "emulated" in caplog.text
    assert not loading.warn_if_emulated_bf16(torch.float32, "cpu")
    assert not loading.warn_if_emulated_bf16(torch.bfloat16, "cuda")
    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda: True)
    assert not loading.warn_if_emulated_bf16(torch.bfloat16, "cpu")
