"""LTX-2 registered as a family: detection of its single and split files (told apart from LTX-Video
0.9, the file's `config` metadata read), ComfyUI's LTXAV policy (flow shift 2.37 inherited from
LTXV, bf16 / fp32, memory factor 0.077, the LTXAV latent format, the "LTXAV" model class for
packs), and UNETLoader's / the checkpoint loader's MODEL running the joint network on ComfyUI's
packed [video, audio] latent."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.ltx2.latent import pack_latents, unpack_latents
from comfy_core.families.ltxv.supported_models import LTXV
from tests.fixtures.ltx2_files import CAPTION, IN_CHANNELS, PREFIX, tiny_ltx2_state_dict, write_tiny_ltx2_unet
from tests.fixtures.ltx2_text_files import write_tiny_ltx2_checkpoint

F_, H_, W_, T_AUDIO = 2, 2, 3, 5


@pytest.mark.parametrize("variant", ["2.0", "2.3"])
def test_split_file_is_ltx2_with_its_metadata(tmp_path, variant):
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_tiny_ltx2_unet(tmp_path / "u.safetensors", variant))
    assert model.model.family.name == "ltxav"
    config = model.model.diffusion_model.config
    # What only the metadata says (the tiny file's `config`): without it these are ComfyUI's defaults.
    assert (config.rope_type, config.frequencies_precision) == ("split", "float64")
    assert config.use_middle_indices_grid is True
    assert config.av_ca_timestep_scale_multiplier == 1000.0
    assert config.connector["connector_num_attention_heads"] == 2
    assert config.cross_attention_adaln == (variant == "2.3")


def test_detection_reads_metadata_and_tells_ltx2_from_ltxv():
    registry = default_registry()
    state = tiny_ltx2_state_dict("2.0", PREFIX)
    from comfy_core.checkpoint.reader import CheckpointFile
    from tests.fixtures.ltx2_files import tiny_ltx2_metadata

    with CheckpointFile(state, metadata=tiny_ltx2_metadata("2.0")) as file:
        detection = registry.detect(file.tensors, file.path, file.metadata)
        alone = registry.detect_diffusion_model(file.tensors, file.path, file.metadata)
    assert detection.family.name == alone.family.name == "ltxav"
    assert detection.unet_config.rope_type == "split"
    # The connectors' head count is only in the metadata: without it the tiny file does not read,
    # and LTX-Video 0.9's network, which has the same block names, does not take it either.
    from comfy_core.families.registry import UnknownFamilyError

    with pytest.raises(UnknownFamilyError, match="heads") as refused:
        registry.detect_diffusion_model(state)
    assert "LTX-2's network, not LTX-Video" in str(refused.value)


def test_family_policy_is_comfyuis_ltxav():
    family = default_registry().get("ltxav")
    assert (family.sampling.prediction, family.sampling.schedule) == ("flow", "flux")
    assert (family.sampling.shift, family.sampling.multiplier) == (2.37, 1.0)
    assert family.inference_dtypes == ("bf16", "fp32")
    assert family.comfy_model_class == "LTXAV"
    latent = family.latent_format
    assert (latent.name, latent.channels, latent.latent_dimensions) == ("LTXAV", 128, 3)
    assert len(latent.latent_rgb_factors) == 128 and latent.latent_rgb_factors[0] == (0.001135, -0.010555, -0.004925)
    assert latent.latent_rgb_factors_bias == (-0.347892, -0.363814, -0.370287)
    config = family.supported_model({"image_model": "ltxav", "cross_attention_dim": 4096})
    assert isinstance(config, LTXV)  # ComfyUI's LTXAV subclasses LTXV
    assert config.memory_usage_factor == 0.077  # not LTXV's width rule (11.0 at 4096)
    assert config.sampling_settings == {"shift": 2.37}


def test_packs_see_comfyuis_names():
    from compat.mp_model_base import CLASS_OF_FAMILY
    from compat.mp_supported_models import our_config_class
    from comfy_core.families.ltx2.latent_format import LTXAV as OurFormat
    from comfy_core.families.ltx2.supported_models import LTXAV as OurConfig

    assert CLASS_OF_FAMILY["ltxav"].__name__ == "LTXAV"
    assert our_config_class("LTXAV") is OurConfig
    import importlib

    formats = importlib.import_module("compat.comfy_surface.comfy.latent_formats")
    assert formats.LTXAV is OurFormat


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    video = torch.randn(1, IN_CHANNELS, F_, H_, W_, generator=g)
    audio = torch.randn(1, 8, T_AUDIO, 16, generator=g)
    context = torch.randn(1, 4, 2 * CAPTION, generator=g)
    return video, audio, context


def test_unet_loader_model_runs_the_joint_network_on_a_packed_latent(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    patcher = load_diffusion_model(write_tiny_ltx2_unet(tmp_path / "u.safetensors", "2.0"))
    model = patcher.model
    video, audio, context = _inputs(3)
    packed, shapes = pack_latents([video, audio])
    sigma = torch.tensor([0.7])
    extra = model.extra_inputs(latent_shapes=shapes, frame_rate=24)
    with torch.no_grad():
        denoised = model.apply_model(packed, sigma, c_crossattn=context, **extra)
        v_vel, a_vel = model.diffusion_model([video, audio], sigma, context, frame_rate=24)
    assert type(model.model_config).__name__ == "LTXAV" and model.memory_usage_factor == 0.077
    got_video, got_audio = unpack_latents(denoised, shapes)
    # Rectified flow: denoised = x - sigma * velocity (multiplier 1: the network scales sigma itself).
    assert torch.allclose(got_video, video - 0.7 * v_vel, atol=1e-5)
    assert torch.allclose(got_audio, audio - 0.7 * a_vel, atol=1e-5)
    with pytest.raises(Exception, match="wide"):
        model.apply_model(packed, sigma, c_crossattn=context[..., :CAPTION], **extra)


def test_single_file_loads_without_clip(tmp_path):
    """A whole LTX-2 checkpoint carries no text encoder (ComfyUI's loader warns and gives none):
    the checkpoint loader returns the model and no CLIP."""
    from comfy_core.loading import load_checkpoint

    path = write_tiny_ltx2_checkpoint(tmp_path / "c.safetensors")
    model, clip, vae = load_checkpoint(path, output_vae=False)
    assert clip is None and vae is None
    assert model.model.family.name == "ltxav"
    assert model.model.diffusion_model.config.rope_type == "split"


def test_single_file_with_its_video_vae(tmp_path):
    """The checkpoint loader builds the video VAE under `vae.` as LTX-Video's (the family's
    components), at the LTXAV latent's 128 channels; still no CLIP."""
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.ltxv_files import tiny_ltxv_vae_state_dict

    path = write_tiny_ltx2_checkpoint(tmp_path / "c.safetensors", in_channels=128,
                                      extra=tiny_ltxv_vae_state_dict(prefix="vae."))
    model, clip, vae = load_checkpoint(path)
    assert clip is None and type(vae.model).__name__ == "LTXVVAE"
    assert model.model.diffusion_model.config.in_channels == 128
