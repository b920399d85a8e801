"""AnimateDiff-Evolved's use of ComfyUI's API on our runtime, through a fixture pack
(tests/compat/api_packs/kosinkadink_pack) that loads a motion module with the real key layout,
injects it into the UNet by a `PatcherInjection` on a MODEL clone, runs it by a
`forward_timestep_embed_patch`, wraps the sample (OUTER_SAMPLE, CALC_COND_BATCH, a replaced
`comfy.samplers.sampling_function`) and installs AnimateDiff's LCM and beta-schedule samplings
built from `comfy_extras.nodes_model_advanced`."""
from __future__ import annotations


import pytest
import torch

from tests.compat.api_pack_support import constant_cond, import_api_pack, load_sd1_model
from tests.fixtures.motion_modules import motion_module_shapes, write_motion_module

TINY_CHANNELS = (32, 64, 64, 64)  # the tiny SD1 UNet's level widths (tests/fixtures/checkpoints.py)
FRAMES = 4


@pytest.fixture
def pack(session):
    yield from import_api_pack("kosinkadink_pack")


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    return load_sd1_model(tiny_sd1_ckpt)


def _cond(model, value: float):
    return constant_cond(model, value)


def _sample(model, latent: torch.Tensor, steps: int = 2) -> torch.Tensor:
    # KSampler's path (the KSampler node calls this driver)
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    return sample(model, prepare_noise(latent, 5), steps, 3.0, "euler", "normal", _cond(model, 0.3),
                  _cond(model, -0.2), latent, seed=5)


def _latent() -> torch.Tensor:
    return torch.zeros(FRAMES, 4, 8, 8)


def _temporal_count(unet) -> int:
    return sum(type(c).__name__ == "VanillaTemporalModule" for blocks in (unet.input_blocks, unet.output_blocks)
               for block in blocks for c in block) + sum(type(c).__name__ == "VanillaTemporalModule"
                                                         for c in unet.middle_block)


def test_motion_module_fixture_has_the_mm_sd_v15_v2_layout() -> None:
    shapes = motion_module_shapes()
    assert shapes["down_blocks.0.motion_modules.0.temporal_transformer.proj_in.weight"] == (320, 320)
    assert shapes["down_blocks.3.motion_modules.1.temporal_transformer.transformer_blocks.0."
                  "attention_blocks.1.pos_encoder.pe"] == (1, 32, 1280)
    assert shapes["up_blocks.3.motion_modules.2.temporal_transformer.proj_out.weight"] == (320, 320)
    assert shapes["mid_block.motion_modules.0.temporal_transformer.transformer_blocks.0.ff.net.0.proj.weight"] \
        == (8 * 1280, 1280)
    assert not any(k.startswith("up_blocks.4") or k.startswith("down_blocks.4") for k in shapes)
    assert sum(k.endswith("proj_in.weight") for k in shapes) == 8 + 12 + 1


def test_zero_initialised_motion_module_reproduces_the_unpatched_frames_bit_exactly(pack, sd1, tmp_path) -> None:
    path = write_motion_module(tmp_path / "mm_zero.safetensors", TINY_CHANNELS, zero_out=True)
    motion = pack.KKLoadMotionModule().load(str(path))[0]
    animated = pack.KKApplyMotionModel().apply(sd1, motion)[0]
    base = _sample(sd1, _latent())
    out = _sample(animated, _latent())
    assert torch.equal(out, base)
    # The modules were in the UNet while it ran (21 injections, as for mm_sd_v15_v2) and are gone after.
    assert pack.EVENTS.count("inject") >= 1 and pack.EVENTS.count("eject") == pack.EVENTS.count("inject")
    assert _temporal_count(sd1.model.diffusion_model) == 0


def test_motion_module_mixes_frames_only_while_injected(pack, sd1, tmp_path) -> None:
    path = write_motion_module(tmp_path / "mm.safetensors", TINY_CHANNELS, seed=3)
    motion = pack.KKLoadMotionModule().load(str(path))[0]
    animated = pack.KKApplyMotionModel().apply(sd1, motion)[0]
    latent = _latent()
    changed = latent.clone()
    changed[FRAMES - 1] += 0.5  # only the last frame differs
    base, base_changed = _sample(sd1, latent), _sample(sd1, changed)
    # Without motion, frames are independent: frame 0 ignores frame 3's change.
    assert torch.equal(base[0], base_changed[0])
    out, out_changed = _sample(animated, latent), _sample(animated, changed)
    assert not torch.equal(out, base)
    assert not torch.allclose(out[0], out_changed[0], atol=1e-6)  # temporal attention carries it over
    # Inside the UNet while sampling: the injected modules were counted where AnimateDiff puts them.
    with animated.applied() as dm:
        assert _temporal_count(dm.diffusion_model) == 21
        kinds = [type(c).__name__ for c in dm.diffusion_model.input_blocks[1]]
        assert kinds == ["ResBlock", "SpatialTransformer", "VanillaTemporalModule"]
        kinds = [type(c).__name__ for c in dm.diffusion_model.input_blocks[10]]
        assert kinds == ["ResBlock", "VanillaTemporalModule"]
    assert _temporal_count(sd1.model.diffusion_model) == 0
    assert torch.equal(_sample(sd1, latent), base)


def test_sample_wrappers_callbacks_and_sampling_function_replacement_run(pack, sd1, tmp_path) -> None:
    import comfy.samplers

    original = comfy.samplers.sampling_function
    path = write_motion_module(tmp_path / "mm_zero.safetensors", TINY_CHANNELS, zero_out=True)
    motion = pack.KKLoadMotionModule().load(str(path))[0]
    animated = pack.KKApplyMotionModel().apply(sd1, motion)[0]
    _sample(animated, _latent(), steps=2)
    outer = [e for e in pack.EVENTS if isinstance(e, tuple) and e[0] == "outer_sample"]
    assert outer == [("outer_sample", (FRAMES, 4, 8, 8), "CFGGuider")]
    calls = [e for e in pack.EVENTS if isinstance(e, tuple) and e[0] == "sampling_function"]
    assert calls == [("sampling_function", (FRAMES, 4, 8, 8))] * 2  # the pack's replacement, once a step
    batches = [e for e in pack.EVENTS if isinstance(e, tuple) and e[0] == "calc_cond_batch"]
    assert len(batches) == 2 and all(b[1] == 2 for b in batches)
    assert comfy.samplers.sampling_function is original
    assert [e for e in pack.EVENTS if isinstance(e, tuple) and e[0] == "prepare_sampling"] == \
        [("prepare_sampling", (FRAMES, 4, 8, 8))]
    attached = animated.get_additional_models_with_key(pack.KEY)[0]
    attachment = attached.get_attachment(pack.KEY)
    assert attachment.pre_runs == 1 and attachment.cleanups == 1
    assert not sd1.get_additional_models_with_key(pack.KEY)


def _reference_sigmas(betas: torch.Tensor) -> torch.Tensor:
    alphas_cumprod = torch.cumprod(1 - betas, dim=0)
    return (((1 - alphas_cumprod) / alphas_cumprod) ** 0.5).float()


def test_animatediff_beta_schedule_and_lcm_samplings(pack, sd1) -> None:
    import comfy_extras.nodes_model_advanced as nma

    ms = pack.evolved_model_sampling(pack.ModelSamplingConfig("sqrt_linear"))
    expected = _reference_sigmas(torch.linspace(0.00085, 0.012, 1000, dtype=torch.float64))
    assert torch.equal(ms.sigmas, expected)
    assert ms.num_timesteps == 1000 and not hasattr(ms, "original_timesteps")
    linear = pack.evolved_model_sampling(pack.ModelSamplingConfig("linear"))
    assert torch.equal(linear.sigmas, sd1.model_sampling.sigmas)
    assert ms.cache_signature() != linear.cache_signature()

    lcm = pack.evolved_model_sampling(pack.ModelSamplingConfig("linear"), 50)
    assert isinstance(lcm, nma.ModelSamplingDiscreteDistilled) and isinstance(lcm, nma.LCM)
    full = sd1.model_sampling.sigmas
    assert torch.equal(lcm.sigmas, full[torch.arange(19, 1000, 20)])  # every 20th from the last
    assert lcm.timestep(lcm.sigmas[:1]).item() == 19 and lcm.timestep(lcm.sigmas[-1:]).item() == 999
    lcm25 = pack.evolved_model_sampling(pack.ModelSamplingConfig("linear"), 25)
    assert lcm25.original_timesteps == 25 and torch.equal(lcm25.sigmas, full[torch.arange(39, 1000, 40)])
    # LCM's boundary condition: c_skip * x + c_out * (x - sigma * eps) at the scaled timestep.
    x, eps, sigma = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2), lcm.sigmas[10:11]
    t = lcm.timestep(sigma).float() * 10.0
    c_skip, c_out = 0.25 / (t ** 2 + 0.25), t / (t ** 2 + 0.25) ** 0.5
    assert torch.allclose(lcm.calculate_denoised(sigma, eps, x), c_out * (x - eps * sigma) + c_skip * x)

    zsnr = nma.rescale_zero_terminal_snr_sigmas(ms.sigmas.double())
    assert zsnr.shape == (1000,) and zsnr[-1] > 4000  # terminal SNR ~0


def test_lcm_sampling_installed_by_the_node_drives_the_sampler(pack, sd1, tmp_path) -> None:
    from comfy_core.sampling.schedulers import calculate_sigmas

    path = write_motion_module(tmp_path / "mm_zero.safetensors", TINY_CHANNELS, zero_out=True)
    motion = pack.KKLoadMotionModule().load(str(path))[0]
    lcm_model = pack.KKApplyMotionModel().apply(sd1, motion, "lcm")[0]
    sqrt_model = pack.KKApplyMotionModel().apply(sd1, motion, "sqrt_linear")[0]
    assert len(lcm_model.model_sampling.sigmas) == 50
    sig_lcm = calculate_sigmas(lcm_model.model_sampling, "normal", 4)
    sig_base = calculate_sigmas(sd1.model_sampling, "normal", 4)
    assert not torch.equal(sig_lcm, sig_base)
    # AnimateDiff's sqrt_linear betas end higher: sigma_max 25.1 against SD1's 14.6.
    expected = _reference_sigmas(torch.linspace(0.00085, 0.012, 1000, dtype=torch.float64))
    assert torch.equal(sqrt_model.model_sampling.sigmas, expected)
    assert float(sqrt_model.model_sampling.sigma_max) > float(sd1.model_sampling.sigma_max)
    out_lcm, out_sqrt, out_base = (_sample(m, _latent(), steps=2) for m in (lcm_model, sqrt_model, sd1))
    assert not torch.equal(out_lcm, out_base) and not torch.equal(out_sqrt, out_base)


def test_motion_model_weight_patches_apply_only_while_sampling(pack, sd1, tmp_path) -> None:
    path = write_motion_module(tmp_path / "mm_zero.safetensors", TINY_CHANNELS, zero_out=True)
    motion = pack.KKLoadMotionModule().load(str(path))[0]
    base = _sample(sd1, _latent())
    patched = pack.KKApplyMotionModel().apply(sd1, motion, "use existing", 0.1)[0]
    out = _sample(patched, _latent())
    assert not torch.equal(out, base)  # the additional model's patch was on during the run
    key = "down_blocks.0.motion_modules.0.temporal_transformer.proj_out.bias"
    assert torch.count_nonzero(motion.get_model_object(key)) == 0  # and is off again
    assert torch.equal(_sample(pack.KKApplyMotionModel().apply(sd1, motion)[0], _latent()), base)
