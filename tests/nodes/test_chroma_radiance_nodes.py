"""EmptyChromaRadianceLatentImage and ChromaRadianceOptions (today's ComfyUI,
comfy_extras/nodes_chroma_radiance.py) over a tiny Chroma Radiance file loaded by UNETLoader:
the pixel-space latent, the options reaching the network only inside the sigma range, the
preserved (or dropped) earlier wrapper, typed errors."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.chroma.radiance import ChromaRadiance
from graph.context import NodeContext, reset_current, set_current
from nodes import chroma_radiance as cr
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.loaders import unet_loader
from tests.fixtures.chroma_radiance_files import write_tiny_radiance


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    write_tiny_radiance(tmp_path / "models" / "diffusion_models" / "radiance.safetensors", seed=3)
    token = set_current(NodeContext("p", "1", "1", None, environment))
    yield environment
    reset_current(token)


def test_empty_latent_is_pixels_at_full_size():
    (latent,) = cr.empty_chroma_radiance_latent_image(48, 32, 2)
    assert latent["samples"].shape == (2, 3, 32, 48) and not latent["samples"].any()
    with pytest.raises(NodeInputError, match="width"):
        cr.empty_chroma_radiance_latent_image(8, 32, 1)
    with pytest.raises(NodeInputError, match="batch_size"):
        cr.empty_chroma_radiance_latent_image(32, 32, 0)


def test_unet_loader_gives_a_pixel_space_model(env):
    (model,) = unet_loader("radiance.safetensors", "default")
    assert isinstance(model.model.diffusion_model, ChromaRadiance)
    assert model.model.family.name == "chroma_radiance"
    assert model.model.latent_format.channels == 3 and model.model.latent_format.scale_factor == 1.0


class Recorder:
    """An apply_model that records the transformer options of each call."""

    def __init__(self) -> None:
        self.seen: list = []

    def __call__(self, x, t, **c):  # noqa: ANN001, ANN204
        self.seen.append(c.get("transformer_options", {}).get("chroma_radiance_options"))
        return x


def _args(sigma: float) -> dict:
    return {"input": torch.zeros(1, 3, 8, 8), "timestep": torch.tensor([sigma]),
            "c": {"transformer_options": {"other": 1}}, "cond_or_uncond": [0]}


def test_options_apply_inside_the_sigma_range_only(env):
    (model,) = unet_loader("radiance.safetensors", "default")
    (same,) = cr.chroma_radiance_options(model, True, 1.0, 0.0, -1)
    assert same is model  # nothing to set: the input itself, as ComfyUI
    (patched,) = cr.chroma_radiance_options(model, True, 0.8, 0.2, 4)
    assert patched is not model and "model_function_wrapper" not in model.model_options
    wrapper = patched.model_options["model_function_wrapper"]
    recorder = Recorder()
    args = _args(0.5)
    for sigma in (0.9, 0.5, 0.2, 0.1):
        wrapper(recorder, _args(sigma))
    assert recorder.seen == [None, {"nerf_tile_size": 4}, {"nerf_tile_size": 4}, None]
    wrapper(recorder, args)
    assert "chroma_radiance_options" not in args["c"]["transformer_options"]  # the caller's dict is not changed


def test_earlier_wrapper_is_preserved_or_dropped(env):
    (model,) = unet_loader("radiance.safetensors", "default")
    calls = []

    def earlier(apply_model, args):  # noqa: ANN001, ANN202
        calls.append(args["c"]["transformer_options"].get("chroma_radiance_options"))
        return apply_model(args["input"], args["timestep"], **args["c"])

    base = model.clone()
    base.set_option("model_function_wrapper", earlier)
    (kept,) = cr.chroma_radiance_options(base, True, 1.0, 0.0, 0)
    (dropped,) = cr.chroma_radiance_options(base, False, 1.0, 0.0, 0)
    recorder = Recorder()
    kept.model_options["model_function_wrapper"](recorder, _args(0.5))
    assert calls == [{"nerf_tile_size": 0}] and recorder.seen == [{"nerf_tile_size": 0}]
    dropped.model_options["model_function_wrapper"](recorder, _args(0.5))
    assert calls == [{"nerf_tile_size": 0}] and recorder.seen[-1] == {"nerf_tile_size": 0}


def test_the_network_reads_the_options(env):
    (model,) = unet_loader("radiance.safetensors", "default")
    (patched,) = cr.chroma_radiance_options(model, True, 1.0, 0.0, 1)
    wrapper = patched.model_options["model_function_wrapper"]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 3, 8, 12, generator=gen) * 2 - 1
    context = torch.randn(1, 3, 64, generator=gen)
    seen = []
    with torch.no_grad(), patched.applied() as dm:
        network = dm.diffusion_model
        original = network.forward_nerf

        def spy(img, hidden, config):  # noqa: ANN001, ANN202
            seen.append(config.nerf_tile_size)
            return original(img, hidden, config)

        network.forward_nerf = spy
        try:
            out = wrapper(lambda i, t, **c: network(i, t, **c),
                          {"input": x, "timestep": torch.tensor([0.5]),
                           "c": {"context": context, "guidance": torch.zeros(1), "transformer_options": {}}})
            plain = network(x, torch.tensor([0.5]), context=context, guidance=torch.zeros(1))
        finally:
            del network.forward_nerf
    assert seen == [1, 32]
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)  # tiles change memory, not the result


def test_options_typed_errors(env):
    (model,) = unet_loader("radiance.safetensors", "default")
    with pytest.raises(NodeInputError, match="nerf_tile_size"):
        cr.chroma_radiance_options(model, True, 1.0, 0.0, -2)
    with pytest.raises(NodeInputError, match="start_sigma"):
        cr.chroma_radiance_options(model, True, 1.5, 0.0, 4)
    with pytest.raises(NodeInputError, match="preserve_wrapper"):
        cr.chroma_radiance_options(model, "yes", 1.0, 0.0, 4)
    with pytest.raises(NodeInputError, match="MODEL"):
        cr.chroma_radiance_options("model", True, 1.0, 0.0, 4)


def test_ksampler_runs_in_pixel_space_and_tiling_keeps_the_batch_apart(env):
    """Two KSampler steps at CFG 2 (positive and negative batched together): the image keeps its
    pixel shape, and NeRF tiles of one patch give the result of no tiling (the rows of the two
    batched calls are not mixed)."""
    from nodes.sampling import ksampler

    (model,) = unet_loader("radiance.safetensors", "default")
    gen = torch.Generator().manual_seed(5)
    positive = [[torch.randn(1, 3, 64, generator=gen), {}]]
    negative = [[torch.randn(1, 3, 64, generator=gen), {}]]
    (latent,) = cr.empty_chroma_radiance_latent_image(16, 16, 1)
    results = []
    for tile in (0, 1):
        (patched,) = cr.chroma_radiance_options(model, True, 1.0, 0.0, tile)
        (out,) = ksampler(patched, 7, 2, 2.0, "euler", "simple", positive, negative, latent)
        results.append(out["samples"])
    assert results[0].shape == (1, 3, 16, 16) and torch.isfinite(results[0]).all()
    torch.testing.assert_close(results[1], results[0], atol=1e-4, rtol=1e-4)
