"""FLUX 3 Image: detection from names and shapes (BFL / ComfyUI and diffusers layouts), the network
against diffusers' `Flux3Transformer2DModel` (base and flow map, with reference images), int8
ConvRot files, the flow-map target from the run's sigmas, the family's sampling policy and
ComfyUI's classes for packs; a two-step KSampler run of the distilled model with a reference."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.flux3.dit import (Flux3Config, Flux3ConfigError, flow_map_target, flux3_image_tokens,
                                           flux3_text_ids)
from comfy_core.families.flux3.keys import convert_bfl_state_dict_to_diffusers, convert_diffusers_state_dict
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.flux3_files import save_single_file, tiny_flux3_state_dict

CONTEXT = 24
CHANNELS = 128


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


def _diffusers_kwargs(flow_map: bool, cond: bool = True) -> dict:
    return dict(in_channels=CHANNELS, cond_in_channels=CHANNELS, num_layers=1, num_single_layers=1,
                attention_head_dim=16, num_attention_heads=2, joint_attention_dim=CONTEXT, axes_dims_rope=(4, 4, 4, 4),
                flow_map=flow_map)


# --- detection ---------------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes():
    config = Flux3Config.detect_from_weights(_header(tiny_flux3_state_dict(context=CONTEXT)))
    assert (config.hidden_size, config.num_heads, config.depth, config.depth_single_blocks) == (32, 2, 1, 1)
    assert (config.in_channels, config.cond_in_channels, config.context_in_dim) == (CHANNELS, CHANNELS, CONTEXT)
    assert config.axes_dim == (4, 4, 4, 4) and config.mlp_hidden == 96 and not config.flow_map
    assert Flux3Config.detect_from_weights(_header(tiny_flux3_state_dict(flow_map=True))).flow_map
    assert Flux3Config.detect_from_weights(_header(tiny_flux3_state_dict(cond_channels=None))).cond_in_channels is None


def test_inconsistent_weights_are_typed_errors():
    state = tiny_flux3_state_dict()
    wrong = dict(state, **{"txt_in.weight": torch.zeros(16, CONTEXT)})
    with pytest.raises(Flux3ConfigError, match="txt_in"):
        Flux3Config.detect_from_weights(_header(wrong))
    missing_mode = {k: v for k, v in state.items() if not k.startswith("content_mode_blocks.image_cond.")}
    with pytest.raises(Flux3ConfigError, match="image_cond"):
        Flux3Config.detect_from_weights(_header(missing_mode))
    no_marker = {k: v for k, v in state.items() if not k.startswith("early_stream_modulations.image.")}
    with pytest.raises(Flux3ConfigError, match="early_stream_modulations"):
        Flux3Config.detect_from_weights(_header(no_marker))
    with pytest.raises(Flux3ConfigError, match="flow-map"):
        flow_map_target(torch.tensor([0.5]), None)


def test_single_and_split_files_are_detected(tmp_path):
    registry = default_registry()
    state = tiny_flux3_state_dict()
    prefixed = {f"model.diffusion_model.{k}": v for k, v in state.items()}
    assert registry.detect(_header(prefixed), "f.safetensors").family.name == "flux3"
    found = registry.detect_diffusion_model(_header(prefixed))
    assert found.family.name == "flux3" and found.config.hidden_size == 32


# --- numerics against diffusers ------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[False, True], ids=["base", "flow_map"])
def pair(request, tmp_path_factory):
    pytest.importorskip("diffusers")
    from diffusers import Flux3Transformer2DModel
    from comfy_core.split.diffusion_model import load_diffusion_model

    flow_map = request.param
    state = tiny_flux3_state_dict(seed=1, context=CONTEXT, flow_map=flow_map)
    config = Flux3Config.detect_from_weights(state)
    reference = Flux3Transformer2DModel(**_diffusers_kwargs(flow_map))
    reference.load_state_dict(convert_bfl_state_dict_to_diffusers(state, config), strict=True)
    path = save(state, tmp_path_factory.mktemp("flux3") / "diffusion_models" / "flux3_tiny.safetensors")
    return reference.eval(), load_diffusion_model(path), flow_map


def _reference_out(reference, x, t, context, refs, target):
    img, img_ids = flux3_image_tokens(x)
    kwargs = {}
    if refs:
        pieces = [flux3_image_tokens(r, -float(k)) for k, r in enumerate(refs, start=1)]
        kwargs = dict(image_cond_hidden_states=torch.cat([p[0] for p in pieces], 1),
                      image_cond_ids=torch.cat([p[1][0] for p in pieces], 0))
    out = reference(hidden_states=img, encoder_hidden_states=context, timestep=t, img_ids=img_ids[0],
                    txt_ids=flux3_text_ids(1, context.shape[1], "cpu")[0], target_timestep=target,
                    return_dict=False, **kwargs)[0]
    b, _, h, w = x.shape
    return out.transpose(1, 2).reshape(b, -1, h, w)


@pytest.mark.parametrize("refs", [0, 2], ids=["t2i", "two_references"])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(pair, refs):
    reference, loaded, flow_map = pair
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, CHANNELS, 3, 4, generator=gen)
    context = torch.randn(2, 5, CONTEXT, generator=gen)
    references = [torch.randn(2, CHANNELS, 2 + k, 3, generator=gen) for k in range(refs)]
    t = torch.tensor([0.8, 0.35])
    target = torch.tensor([0.6, 0.1]) if flow_map else None
    with torch.no_grad():
        ours = loaded.model.diffusion_model(x, t, context, ref_latents=references or None, target_timestep=target)
        theirs = _reference_out(reference, x, t, context, references, target)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4


def test_bfl_names_are_what_diffusers_single_file_converter_reads():
    pytest.importorskip("diffusers")
    from diffusers.loaders.single_file_utils import convert_flux3_transformer_checkpoint_to_diffusers

    state = tiny_flux3_state_dict(seed=2, flow_map=True)
    ours = convert_bfl_state_dict_to_diffusers(state, Flux3Config.detect_from_weights(state))
    theirs = convert_flux3_transformer_checkpoint_to_diffusers(dict(state))
    assert set(ours) == set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    back = convert_diffusers_state_dict(ours)
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)


def test_diffusers_layout_file_loads_and_computes_alike(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_flux3_state_dict(seed=3)
    diffusers_state = convert_bfl_state_dict_to_diffusers(state, Flux3Config.detect_from_weights(state))
    comfy = load_diffusion_model(save(state, tmp_path / "a" / "f.safetensors"))
    diffusers = load_diffusion_model(save(diffusers_state, tmp_path / "b" / "f.safetensors"))
    gen = torch.Generator().manual_seed(1)
    x, ctx = torch.randn(1, CHANNELS, 2, 2, generator=gen), torch.randn(1, 3, CONTEXT, generator=gen)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx) for m in (comfy, diffusers))
    assert (a - b).abs().max() < 1e-6  # the same weights (summation order may differ with the storage layout)


def test_int8_convrot_file_stays_int8_and_computes_like_its_dequantised_weights(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import quantize_state, true_state

    state = tiny_flux3_state_dict(seed=4, hidden=64, heads=4, flow_map=True)
    blocks = ("content_mode_blocks.", "txt_mode_blocks.", "single_blocks.")
    tensors, metadata = quantize_state(state, "int8_tensorwise", convrot=True, float_dtype=torch.float32,
                                       select=lambda layer: layer.startswith(blocks))
    assert tensors["single_blocks.0.q_proj.weight"].dtype == torch.int8
    path = tmp_path / "int8" / "flux3-image-klein-int8-convrot.safetensors"
    path.parent.mkdir()
    save_file(tensors, str(path))
    shapes = {k: tuple(v.shape) for k, v in state.items() if k.endswith(".weight")}
    dequantised = true_state(tensors, metadata, shapes)
    quantised = load_diffusion_model(path)
    plain = load_diffusion_model(save(dequantised, tmp_path / "fp32" / "f.safetensors"))
    network = quantised.model.diffusion_model
    assert network.single_blocks[0].q_proj.weight.dtype == torch.int8
    gen = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, CHANNELS, 2, 3, generator=gen), torch.randn(1, 4, CONTEXT, generator=gen)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx, target_timestep=torch.tensor([0.25]))
                for m in (quantised, plain))
    assert (a - b).abs().max() < 1e-4


def test_lora_spellings_reach_bfls_layers(pair):
    from comfy_core.lora.dit_keymap import dit_key_map

    _, loaded, _ = pair
    key_map = dit_key_map(loaded.model)
    q = "diffusion_model.single_blocks.0.q_proj.weight"
    for spelling in ("transformer.single_transformer_blocks.0.attn.to_q", "diffusion_model.single_blocks.0.q_proj",
                     "lora_unet_single_blocks_0_q_proj", "lycoris_single_transformer_blocks_0_attn_to_q"):
        assert key_map[spelling] == q, spelling
    assert (key_map["transformer.mode_blocks.image_cond.0.ff.linear_in"]
            == "diffusion_model.content_mode_blocks.image_cond.0.mlp_in.weight")
    assert (key_map["transformer.early_stream_modulations.txt.linear"]
            == "diffusion_model.early_stream_modulations.txt.lin.weight")


# --- the flow map, the family's policy, sampling --------------------------------------------------------

def test_flow_map_target_is_the_next_lower_sigma_of_the_run(pair):
    _, loaded, flow_map = pair
    gen = torch.Generator().manual_seed(6)
    x, ctx = torch.randn(1, CHANNELS, 2, 2, generator=gen), torch.randn(1, 3, CONTEXT, generator=gen)
    network = loaded.model.diffusion_model
    if not flow_map:  # the base model takes no target
        with pytest.raises(Flux3ConfigError, match="only by, a flow-map"):
            network.forward_orig(*flux3_image_tokens(x), ctx, flux3_text_ids(1, 3, "cpu"), torch.tensor([0.8]),
                                 target_timesteps=torch.tensor([0.35]))
        return
    sigmas = torch.tensor([1.0, 0.8, 0.35, 0.0])
    assert flow_map_target(torch.tensor([0.8, 0.35, 0.0]), sigmas).tolist() == pytest.approx([0.35, 0.0, 0.0])
    assert flow_map_target(torch.tensor([0.5]), sigmas).tolist() == pytest.approx([0.35])  # between steps
    with torch.no_grad():
        from_run = network(x, torch.tensor([0.8]), ctx, transformer_options={"sample_sigmas": sigmas})
        explicit = network(x, torch.tensor([0.8]), ctx, target_timestep=torch.tensor([0.35]))
        other = network(x, torch.tensor([0.8]), ctx, target_timestep=torch.tensor([0.0]))
    assert torch.equal(from_run, explicit) and not torch.allclose(from_run, other)
    with pytest.raises(Flux3ConfigError, match="target"):
        network(x, torch.tensor([0.8]), ctx)


def test_family_policy_and_comfyuis_classes(pair):
    from comfy_core.families.flux2.latent_format import Flux2LatentFormat
    from comfy_core.models.model_sampling import FlowModelSampling
    from compat.mp_model_base import CLASS_OF_FAMILY, Flux3
    from compat.mp_supported_models import our_config_class

    _, loaded, _ = pair
    model = loaded.model
    sampling = model.model_sampling
    assert isinstance(sampling, FlowModelSampling)
    assert (sampling.shift, sampling.multiplier) == (pytest.approx(6.93), 1.0)
    # BFL's recipe: the shifted sigma of t is 6.93 t / (1 + 5.93 t)
    assert float(sampling.sigma(torch.tensor(0.5))) == pytest.approx(6.93 * 0.5 / (1 + 5.93 * 0.5), rel=1e-5)
    assert isinstance(model.latent_format, Flux2LatentFormat) and model.latent_format.channels == 128
    assert type(model.model_config).__name__ == "Flux3" and model.model_config.unet_config["image_model"] == "flux3"
    assert CLASS_OF_FAMILY["flux3"] is Flux3 and our_config_class("Flux3") is type(model.model_config)


def test_whole_sample_matches_diffusers_loop_from_the_same_noise(pair):
    # diffusers' FLUX.3 recipe: FlowMatchEulerDiscreteScheduler with shift 6.93 over linspace(1, 1/n, n), the
    # transformer at t / 1000 (and, for the flow map, the next timestep as its target); ours: KSampler euler /
    # simple on the family's sampling (the same sigmas), the target read from the run's sigmas
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    from comfy_core.sampling.ksampler import sample

    reference, loaded, flow_map = pair
    steps, (h, w) = 4, (2, 3)  # 4 steps: "simple" picks t = 1, 0.75, 0.5, 0.25 of the table, as linspace
    gen = torch.Generator().manual_seed(11)
    context = torch.randn(1, 4, CONTEXT, generator=gen)
    noise = torch.randn(1, CHANNELS, h, w, generator=gen)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=6.93)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps))
    latents, img_ids = flux3_image_tokens(noise)
    timesteps = scheduler.timesteps
    with torch.no_grad():
        for i, t in enumerate(timesteps):
            target = (timesteps[i + 1] if i + 1 < len(timesteps) else torch.zeros(())) / 1000 if flow_map else None
            velocity = reference(hidden_states=latents, encoder_hidden_states=context, timestep=(t / 1000)[None],
                                 img_ids=img_ids[0], txt_ids=flux3_text_ids(1, 4, "cpu")[0],
                                 target_timestep=None if target is None else target[None], return_dict=False)[0]
            latents = scheduler.step(velocity, t, latents, return_dict=False)[0]
    theirs = latents.transpose(1, 2).reshape(1, CHANNELS, h, w)
    ours = sample(loaded, noise, steps, 1.0, "euler", "simple", [[context, {}]], [[context, {}]],
                  torch.zeros(1, CHANNELS, h, w))
    assert (ours - theirs).abs().max() < 1e-4


def test_distilled_model_samples_two_steps_with_a_reference_latent(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_flux3_state_dict(seed=7, flow_map=True, channels=128, cond_channels=128)
    model = load_diffusion_model(save(state, tmp_path / "diffusion_models" / "f.safetensors"))
    gen = torch.Generator().manual_seed(7)
    reference = torch.randn(1, 128, 2, 3, generator=gen)
    positive = [[torch.randn(1, 6, CONTEXT, generator=gen), {"reference_latents": [reference]}]]
    negative = [[torch.randn(1, 3, CONTEXT, generator=gen), {"reference_latents": [reference]}]]
    noise = torch.randn(1, 128, 2, 3, generator=torch.Generator().manual_seed(0))
    out = sample(model, noise, 2, 2.0, "euler", "simple", positive, negative, torch.zeros(1, 128, 2, 3))
    assert out.shape == (1, 128, 2, 3) and torch.isfinite(out).all()
    without = sample(model, noise, 2, 2.0, "euler", "simple", [[positive[0][0], {}]], [[negative[0][0], {}]],
                     torch.zeros(1, 128, 2, 3))
    assert not torch.allclose(out, without)  # the reference reaches the network


def test_single_file_is_detected_and_asks_for_a_vae(tmp_path):
    from comfy_core.checkpoint.errors import MissingComponentError
    from comfy_core.loading import load_checkpoint

    path = save_single_file(tiny_flux3_state_dict(seed=8), tmp_path / "flux3.safetensors")
    with pytest.raises(MissingComponentError, match="VAELoader"):  # detected as FLUX 3, then the VAE is missing
        load_checkpoint(path)
