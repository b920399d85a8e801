"""ComfyUI's Flux / SD3 Python API on our runtime, through a fixture pack that uses it as real
packs do (tests/compat/api_packs/dit_pack): the classes packs import are the ones our loaded
models are made of, model kinds and configs answer ComfyUI's checks, `comfy.model_detection` and
the `comfy.utils` key maps build working modules from diffusers files, and block, object and
attention patches reach our Flux and MMDiT exactly as they say."""
from __future__ import annotations

import pytest
import torch

from tests.compat.api_pack_support import import_api_pack
from tests.fixtures.dit_checkpoints import flux_state_dict, save, sd3_state_dict


@pytest.fixture
def dit_pack(session):  # noqa: ANN001, ANN201
    yield from import_api_pack("dit_pack")


def _load(state: dict, path) -> object:  # noqa: ANN001
    from comfy_core.loading import load_checkpoint

    model, _, _ = load_checkpoint(save(state, path), output_clip=False, output_vae=False)
    return model


@pytest.fixture(scope="module")
def flux(tmp_path_factory):  # noqa: ANN001, ANN201
    return _load(flux_state_dict(), tmp_path_factory.mktemp("flux") / "flux.safetensors")


@pytest.fixture(scope="module")
def schnell(tmp_path_factory):  # noqa: ANN001, ANN201
    return _load(flux_state_dict(schnell=True), tmp_path_factory.mktemp("schnell") / "schnell.safetensors")


@pytest.fixture(scope="module")
def sd3(tmp_path_factory):  # noqa: ANN001, ANN201
    return _load(sd3_state_dict(with_t5=False), tmp_path_factory.mktemp("sd3") / "sd3.safetensors")


def flux_output(patcher, seed: int = 0) -> torch.Tensor:  # noqa: ANN001
    """The Flux network's output for seeded inputs, with the patcher's options, inside its patches."""
    dm = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, 8, 8, generator=gen)
    context = torch.randn(1, 5, dm.config.context_in_dim, generator=gen)
    y = torch.randn(1, dm.config.vec_in_dim, generator=gen)
    options = dict(patcher.model_options.get("transformer_options", {}))
    with torch.no_grad(), patcher.applied():
        return dm(x, torch.tensor([0.7]), context, y=y, guidance=torch.tensor([3.5]), transformer_options=options)


def sd3_output(patcher, seed: int = 0) -> torch.Tensor:  # noqa: ANN001
    dm = patcher.model.diffusion_model
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, 8, 8, generator=gen)
    context = torch.randn(1, 5, dm.config.context_in_features, generator=gen)
    y = torch.randn(1, dm.config.adm_in_channels, generator=gen)
    options = dict(patcher.model_options.get("transformer_options", {}))
    with torch.no_grad(), patcher.applied():
        return dm(x, torch.tensor([700.0]), context=context, y=y, transformer_options=options)


# --- names -----------------------------------------------------------------------------------------

def test_surface_names_are_our_modules(dit_pack) -> None:  # noqa: ANN001
    import comfy.cldm.mmdit
    import comfy.ldm.common_dit as common_dit
    import comfy.ldm.flux.layers as layers
    import comfy.ldm.flux.model as flux_model
    import comfy.ldm.modules.diffusionmodules.mmdit as mmdit
    import comfy.utils
    from comfy_core.controlnet import mmdit_controlnet
    from comfy_core.families.flux import blocks as flux_blocks, dit as flux, keys as flux_keys, math as flux_math
    from comfy_core.families.sd3 import keys as mmdit_keys, mmdit as our_mmdit, mmdit_blocks

    assert mmdit.MMDiT is our_mmdit.MMDiT and mmdit.OpenAISignatureMMDITWrapper is our_mmdit.OpenAISignatureMMDITWrapper
    for name in ("JointBlock", "DismantledBlock", "PatchEmbed", "TimestepEmbedder", "VectorEmbedder", "RMSNorm",
                 "FinalLayer", "block_mixing", "SelfAttention", "Mlp"):
        assert getattr(mmdit, name) is getattr(mmdit_blocks, name), name
    assert dit_pack.JointBlock is mmdit_blocks.JointBlock and dit_pack.RMSNorm is mmdit_blocks.RMSNorm
    assert comfy.cldm.mmdit.ControlNet is mmdit_controlnet.MMDiTControlNet
    assert issubclass(dit_pack.controlnet_class(), mmdit.MMDiT)
    assert flux_model.Flux is flux.FluxTransformer and flux_model.FluxParams is flux.FluxConfig
    assert dit_pack.DoubleStreamBlock is flux_blocks.DoubleStreamBlock
    assert dit_pack.SingleStreamBlock is flux_blocks.SingleStreamBlock
    assert layers.attention is flux_math.attention and layers.EmbedND is flux_blocks.EmbedND
    assert comfy.utils.flux_to_diffusers is flux_keys.flux_to_diffusers
    assert comfy.utils.mmdit_to_diffusers is mmdit_keys.mmdit_to_diffusers
    assert common_dit.pad_to_patch_size is mmdit_blocks.pad_to_patch_size


def test_loaded_models_are_comfy_classes_and_configs(dit_pack, flux, schnell, sd3) -> None:  # noqa: ANN001
    import comfy.latent_formats
    import comfy.model_base
    import comfy.supported_models

    assert type(flux.model) is comfy.model_base.Flux and type(schnell.model) is comfy.model_base.Flux
    assert type(sd3.model) is comfy.model_base.SD3
    assert isinstance(sd3.model, comfy.model_base.BaseModel) and not isinstance(sd3.model, comfy.model_base.Flux)
    assert not isinstance(flux.model, comfy.model_base.Chroma) and issubclass(comfy.model_base.Chroma,
                                                                                comfy.model_base.Flux)
    # the pack's isinstance chain walks SD3 -> HunyuanDiT -> Flux -> GenmoMochi as Easy-Use's does
    assert [dit_pack.sd_version(m) for m in (flux, schnell, sd3)] == ["flux", "flux_schnell", "sd3"]
    assert isinstance(schnell.model.model_config, comfy.supported_models.Flux)
    assert not isinstance(flux.model.model_config, comfy.supported_models.FluxSchnell)
    assert isinstance(flux.model.latent_format, comfy.latent_formats.Flux)
    assert isinstance(dit_pack.latent_format_for("sd3"), comfy.latent_formats.SD3)
    assert sd3.model.model_config.sampling_settings["shift"] == 3.0
    assert schnell.model.model_config.sampling_settings == {"multiplier": 1.0, "shift": 1.0}


def test_unet_config_is_comfyuis_dict(flux, sd3) -> None:  # noqa: ANN001
    unet = flux.model.model_config.unet_config
    config = flux.model.diffusion_model.config
    assert unet["image_model"] == "flux" and unet["guidance_embed"] is True
    assert (unet["hidden_size"], unet["depth"], unet["depth_single_blocks"]) == (config.hidden_size, config.depth,
                                                                                   config.depth_single_blocks)
    assert unet["axes_dim"] == list(config.axes_dim)
    unet = sd3.model.model_config.unet_config
    assert unet["in_channels"] == 16 and "pos_embed_scaling_factor" in unet and unet["pos_embed_scaling_factor"] is None
    assert unet["context_embedder_config"]["params"]["in_features"] == sd3.model.diffusion_model.config.context_in_features
    assert unet["x_block_self_attn_layers"] == []


def test_isinstance_sees_the_loaded_blocks(dit_pack, flux, sd3) -> None:  # noqa: ANN001
    flux_modules = list(flux.model.diffusion_model.modules())
    assert any(isinstance(m, dit_pack.DoubleStreamBlock) for m in flux_modules)
    assert any(isinstance(m, dit_pack.SingleStreamBlock) for m in flux_modules)
    assert isinstance(flux.model.diffusion_model, dit_pack.comfy.ldm.flux.model.Flux)
    joint = [m for m in sd3.model.diffusion_model.modules() if isinstance(m, dit_pack.JointBlock)]
    assert len(joint) == len(sd3.model.diffusion_model.joint_blocks)


# --- detection and key maps --------------------------------------------------------------------------

def test_detect_unet_config_and_model_config_from_unet(session, flux, schnell, sd3) -> None:  # noqa: ANN001
    import comfy.model_detection
    import comfy.supported_models

    for model, state, cls in ((flux, flux_state_dict(), comfy.supported_models.Flux),
                              (schnell, flux_state_dict(schnell=True), comfy.supported_models.FluxSchnell),
                              (sd3, sd3_state_dict(with_t5=False), comfy.supported_models.SD3)):
        prefix = comfy.model_detection.unet_prefix_from_state_dict(state)
        assert prefix == "model.diffusion_model."
        assert comfy.model_detection.detect_unet_config(state, prefix) == model.model.model_config.unet_config
        config = comfy.model_detection.model_config_from_unet(state, prefix)
        assert type(config) is cls
    unet = comfy.model_detection.detect_unet_config(flux_state_dict(), "model.diffusion_model.")
    assert type(comfy.model_detection.model_config_from_unet_config(unet)) is comfy.supported_models.Flux


def test_broken_dit_header_is_a_typed_error(session) -> None:  # noqa: ANN001
    import comfy.model_detection
    from comfy_core.families.flux.dit import FluxConfigError
    from comfy_core.families.sd3.mmdit import MMDiTConfigError

    state = flux_state_dict()
    del state["model.diffusion_model.txt_in.weight"]
    with pytest.raises(FluxConfigError, match="txt_in"):
        comfy.model_detection.detect_unet_config(state, "model.diffusion_model.")
    state = sd3_state_dict(with_t5=False)
    state["model.diffusion_model.pos_embed"] = torch.zeros(1, 10, 128)
    with pytest.raises(MMDiTConfigError, match="pos_embed"):
        comfy.model_detection.detect_unet_config(state, "model.diffusion_model.")


def test_pack_converts_a_diffusers_flux_with_the_comfy_utils_map(dit_pack) -> None:  # noqa: ANN001
    import comfy.model_detection
    from tests.fixtures.flux_files import tiny_flux_diffusers_state_dict, tiny_flux_state_dict

    converted = dit_pack.flux_from_diffusers(tiny_flux_diffusers_state_dict(seed=2))
    expected = tiny_flux_state_dict(seed=2)
    assert sorted(converted) == sorted(expected)
    assert all(torch.equal(converted[k], expected[k]) for k in expected)
    library = comfy.model_detection.convert_diffusers_mmdit(tiny_flux_diffusers_state_dict(seed=2), "x.")
    assert sorted(library) == sorted("x." + k for k in expected)
    assert all(torch.equal(library["x." + k], expected[k]) for k in expected)
    module, unet_config = dit_pack.build_diffusion_model(converted)
    assert unet_config["image_model"] == "flux" and type(module).__name__ == "Flux"


def test_pack_built_mmdit_from_a_diffusers_file_matches_diffusers(dit_pack) -> None:  # noqa: ANN001
    diffusers = pytest.importorskip("diffusers")
    import comfy.model_detection
    from tests.comfy_core.test_mmdit_parity import diffusers_kwargs
    from tests.fixtures.mmdit_files import tiny_diffusers_mmdit_state_dict

    state = tiny_diffusers_mmdit_state_dict("sd35", seed=4)
    converted = dit_pack.mmdit_from_diffusers(state)
    library = comfy.model_detection.convert_diffusers_mmdit(state)
    assert sorted(library) == sorted(converted) and all(torch.equal(library[k], converted[k]) for k in converted)
    ours, unet_config = dit_pack.build_diffusion_model(converted)
    assert type(ours).__name__ == "OpenAISignatureMMDITWrapper" and unet_config["qk_norm"] == "rms"
    theirs = diffusers.SD3Transformer2DModel(**diffusers_kwargs("sd35"))
    theirs.load_state_dict(state, strict=True)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 16, 8, 6, generator=gen)
    context = torch.randn(1, 5, 64, generator=gen)
    y = torch.randn(1, 64, generator=gen)
    t = torch.tensor([412.0])
    with torch.no_grad():
        a = ours(x, t, context=context, y=y)
        b = theirs.eval()(hidden_states=x, encoder_hidden_states=context, pooled_projections=y, timestep=t).sample
    assert a.abs().max() > 0.1 and (a - b).abs().max() < 1e-4


# --- patches -----------------------------------------------------------------------------------------

def test_sd3_joint_block_replacement_reaches_our_mmdit(dit_pack, sd3) -> None:  # noqa: ANN001
    reference = sd3_output(sd3)
    same, wrappers = dit_pack.patch_joint_blocks(sd3, 1.0)
    assert torch.equal(sd3_output(same), reference)
    assert [w.calls for w in wrappers] == [1] * len(wrappers)
    muted, _ = dit_pack.patch_joint_blocks(sd3, 0.0)
    assert not torch.allclose(sd3_output(muted), reference)
    assert torch.equal(sd3_output(sd3), reference)  # the clone's patches never touch the original


def test_flux_block_object_patch_and_forward_orig_replacement(dit_pack, flux) -> None:  # noqa: ANN001
    reference = flux_output(flux)
    wrapped, wrappers = dit_pack.wrap_double_blocks(flux)
    assert torch.equal(flux_output(wrapped), reference)
    assert [w.calls for w in wrappers] == [1] * len(flux.model.diffusion_model.double_blocks)
    dropped, _ = dit_pack.wrap_double_blocks(flux, keep_image_update=False)
    assert not torch.allclose(flux_output(dropped), reference)
    # a pack's own token-level forward, written on ComfyUI's attribute names, gives the same result
    by_hand = dit_pack.patch_forward_orig(flux)
    assert (flux_output(by_hand) - reference).abs().max() < 1e-6
    assert dit_pack.EVENTS == ["forward_orig"]
    assert torch.equal(flux_output(flux), reference)


def test_flux_layers_attention_replacement_is_used_by_our_blocks(dit_pack, flux) -> None:  # noqa: ANN001
    import comfy.ldm.flux.layers as layers
    from comfy_core import extension_points

    reference = flux_output(flux)
    counting = dit_pack.CountingFluxAttention(layers.attention)
    layers.attention = counting
    try:
        assert extension_points.current().flux_attention is counting
        out = flux_output(flux)
    finally:
        layers.attention = counting.previous
    assert extension_points.current().flux_attention is counting.previous
    dm = flux.model.diffusion_model
    assert counting.calls == len(dm.double_blocks) + len(dm.single_blocks)
    assert torch.equal(out, reference)


def test_apply_rope_and_attention_compose_like_flux_attention(dit_pack, flux) -> None:  # noqa: ANN001
    import comfy.ldm.flux.math as flux_math

    dm = flux.model.diffusion_model
    gen = torch.Generator().manual_seed(5)
    heads, head_dim, length = dm.num_heads, dm.config.head_dim, 6
    q, k, v = (torch.randn(1, heads, length, head_dim, generator=gen) for _ in range(3))
    ids = torch.randint(0, 4, (1, length, 3)).float()
    pe = dm.pe_embedder(ids)
    expected = flux_math.attention(q, k, v, pe)
    assert (dit_pack.rope_attention(q, k, v, pe) - expected).abs().max() < 1e-5
    assert not torch.allclose(flux_math.attention(q, k, v, None), expected)
