"""comfy.model_base / supported_models / latent_formats / model_detection / conds / hooks: the
classes packs check MODEL against answer as ComfyUI's would for our families."""
from __future__ import annotations

import pytest
import torch

from tests.compat.test_compat_model_patcher import pack  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def models(tiny_sd1_ckpt, tiny_sdxl_ckpt):
    from comfy_core.loading import load_checkpoint

    return {name: load_checkpoint(path, output_clip=False, output_vae=False)[0]
            for name, path in (("sd1", tiny_sd1_ckpt), ("sdxl", tiny_sdxl_ckpt))}


def test_model_kind_checks(pack, models) -> None:  # noqa: F811
    kind = pack.PatcherPackModelKind()
    assert kind.kind(models["sd1"])[0] == "patcher,base,cfg_sd15,eps"
    assert kind.kind(models["sdxl"])[0] == "patcher,base,sdxl,cfg_sdxl,eps"


def test_model_attributes_packs_read(session, models) -> None:
    import comfy.latent_formats
    import comfy.model_base
    import comfy.supported_models
    import comfy.supported_models_base

    dm = models["sdxl"].model
    assert isinstance(dm.model_config, comfy.supported_models_base.BASE)
    assert dm.model_config.unet_config["context_dim"] == dm.diffusion_model.config.context_dim
    assert dm.model_config.unet_config["adm_in_channels"] == dm.adm_channels
    assert isinstance(dm.latent_format, comfy.latent_formats.SDXL)
    assert comfy.latent_formats.SDXL() == dm.latent_format and comfy.latent_formats.SD15().scale_factor == 0.18215
    assert dm.model_config.sampling_settings["linear_start"] == 0.00085
    assert not isinstance(models["sd1"].model, comfy.model_base.SDXLRefiner)
    assert dm.memory_required([2, 4, 8, 8]) == 2 * 64 * 4 * 0.01 * 0.8 * 1024 * 1024
    # `device`: where the weights are (RES4LYF's samplers place their tensors on it)
    assert dm.device == next(dm.diffusion_model.parameters()).device == torch.device("cpu")
    with pytest.raises(comfy.model_base.ModelClassError, match="loaders"):
        comfy.model_base.BaseModel(dm.model_config)

    class PackModel(comfy.model_base.BaseModel):  # a pack's subclass is a plain class
        pass

    assert not isinstance(dm, PackModel)


def test_model_base_model_sampling_matches_ours(session, models) -> None:
    import comfy.model_base

    ms = comfy.model_base.model_sampling(models["sd1"].model.model_config, comfy.model_base.ModelType.V_PREDICTION)
    ours = models["sd1"].model_sampling
    assert ms.prediction == "v" and torch.equal(ms.sigmas, ours.sigmas)
    x, out, sigma = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2), torch.tensor([3.0])
    assert not torch.equal(ms.calculate_denoised(sigma, out, x), ours.calculate_denoised(sigma, out, x))


def test_model_detection_of_sd_unets(session, tiny_sd1_ckpt, tiny_sdxl_ckpt) -> None:
    import comfy.model_detection
    import comfy.supported_models
    from safetensors.torch import load_file

    for path, cls in ((tiny_sd1_ckpt, comfy.supported_models.SD15), (tiny_sdxl_ckpt, comfy.supported_models.SDXL)):
        sd = load_file(str(path))
        prefix = comfy.model_detection.unet_prefix_from_state_dict(sd)
        assert prefix == "model.diffusion_model."
        config = comfy.model_detection.model_config_from_unet(sd, prefix)
        assert type(config) is cls
        levels = len(config.unet_config["channel_mult"])
        blocks = 1 + levels * config.unet_config["num_res_blocks"][0] + (levels - 1)  # conv_in, res, downsamples
        assert comfy.model_detection.count_blocks(sd.keys(), prefix + "input_blocks.{}.") == blocks
        assert comfy.model_detection.detect_unet_config(sd, prefix)["context_dim"] == config.unet_config["context_dim"]
    from compat.mp_detection import DetectionError

    with pytest.raises(DetectionError, match="diffusers"):
        comfy.model_detection.unet_config_from_diffusers_unet({})


def test_conds_batch_as_comfyui(session) -> None:
    import comfy.conds

    a = comfy.conds.CONDCrossAttn(torch.ones(1, 77, 8))
    b = comfy.conds.CONDCrossAttn(torch.zeros(1, 154, 8))
    assert a.can_concat(b) and a.concat([b]).shape == (2, 154, 8)
    assert not a.can_concat(comfy.conds.CONDCrossAttn(torch.zeros(1, 77 * 5, 8)))
    n = comfy.conds.CONDNoiseShape(torch.arange(16.0).reshape(1, 1, 4, 4))
    cut = n.process_cond(2, area=(2, 2, 1, 1)).cond
    assert cut.shape == (2, 1, 2, 2) and cut[0, 0, 0, 0] == 5.0
    assert comfy.conds.CONDConstant(3).can_concat(comfy.conds.CONDConstant(3))
    assert comfy.conds.CONDRegular(torch.ones(1, 2)).process_cond(3).cond.shape == (3, 2)


def test_hooks_surface_is_ours(session) -> None:
    import comfy.hooks

    from comfy_core.hooks import HookGroup

    # ComfyUI's hook classes are ours (compat/hooks_api.py subclasses), so what a pack builds is
    # a value our nodes and sampler take.
    assert issubclass(comfy.hooks.HookGroup, HookGroup)
    assert comfy.hooks.EnumHookMode.MinVram != comfy.hooks.EnumHookMode.MaxSpeed
    cond = [[torch.zeros(1, 77, 8), {}]]
    group = HookGroup()
    out = comfy.hooks.set_hooks_for_conditioning(cond, group)
    assert out[0][1]["hooks"] is group and "hooks" not in cond[0][1]


def test_each_supported_models_name_is_ours_or_a_placeholder_never_both() -> None:
    """A placeholder of the same name would hide our family's class from packs'
    `isinstance(config, comfy.supported_models.X)` (HiDream and LTXV once did)."""
    import compat.mp_supported_models as names

    assert not set(names.OTHER_CONFIG_NAMES) & set(names.OUR_CONFIG_TARGETS)
    for name in names.OUR_CONFIG_TARGETS:
        assert getattr(names, name, None) is None or getattr(names, name) is names.our_config_class(name)
