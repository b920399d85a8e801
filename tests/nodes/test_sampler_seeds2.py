"""SamplerSEEDS2 (ComfyUI's nodes_custom_sampler.py, 2026): the seeds_2 sampler with the node's
options, and SamplerCustom with it giving what `sample_seeds_2` gives when called directly on the
same denoiser, noise and sigmas."""
from __future__ import annotations

import pytest
import torch

from comfy_core.sampling.guider import SamplerObject
from comfy_core.sampling.samplers import registry
from comfy_core.sampling.samplers.stochastic_ei import sample_seeds_2
from nodes.custom_sampling import sampler_custom
from nodes.errors import NodeInputError
from nodes.sampler_seeds import sampler_seeds2
from tests.nodes.test_custom_sampling import _c, _d, _toy_model
from tests.nodes.workflow_2026 import Runner, node

SIGMAS = torch.tensor([3.0, 1.5, 0.6, 0.2, 0.0])  # below the toy model's sigma_max: plain noise scaling
SCALE_FACTOR = 0.18215  # the toy model's latent format: sampler output / scale = the LATENT


def test_the_node_picks_seeds_2_with_its_options():
    (sampler,) = sampler_seeds2("phi_2", 0.3, 0.7, 1.0)
    assert isinstance(sampler, SamplerObject)
    assert sampler.sampler_function is registry.sampler_function("seeds_2")
    assert sampler.extra_options == {"eta": 0.3, "s_noise": 0.7, "r": 1.0, "solver_type": "phi_2"}
    with pytest.raises(NodeInputError, match="solver_type"):
        sampler_seeds2("phi_3", 1.0, 1.0, 0.5)
    with pytest.raises(NodeInputError, match="r"):
        sampler_seeds2("phi_1", 1.0, 1.0, 0.0)


def _direct(seed: int, effective_cond: float, **options) -> torch.Tensor:
    """sample_seeds_2 on the toy model's ideal denoiser, from seeded CPU noise at sigma_0."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn((1, 4, 8, 8), generator=generator)

    def denoiser(x, sigma, **_):
        return _d(x, sigma.view(-1, 1, 1, 1), effective_cond)

    out = sample_seeds_2(denoiser, noise * SIGMAS[0], SIGMAS, extra_args={"seed": seed}, **options)
    return out / SCALE_FACTOR


@pytest.mark.parametrize("options", [
    {"solver_type": "phi_1", "eta": 1.0, "s_noise": 1.0, "r": 0.5},   # seeds_2
    {"solver_type": "phi_2", "eta": 0.0, "s_noise": 1.0, "r": 1.0},   # exp_heun_2_x0
    {"solver_type": "phi_2", "eta": 1.0, "s_noise": 1.0, "r": 1.0},   # exp_heun_2_x0_sde
    {"solver_type": "phi_1", "eta": 0.6, "s_noise": 0.4, "r": 0.3},
])
def test_sampler_custom_with_seeds2_is_sample_seeds_2(options):
    model = _toy_model()
    positive, negative, cfg, seed = _c(0.7), _c(-0.2), 2.0, 11
    (sampler,) = sampler_seeds2(options["solver_type"], options["eta"], options["s_noise"], options["r"])
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    out, _ = sampler_custom(model, True, seed, cfg, positive, negative, sampler, SIGMAS, latent)
    # CFG on the toy denoiser is linear in the conditioning value: neg + cfg (pos - neg).
    expected = _direct(seed, -0.2 + cfg * (0.7 - -0.2), **options)
    assert torch.allclose(out["samples"], expected, atol=1e-4, rtol=1e-4)


def test_the_options_reach_the_sampler():
    model = _toy_model()
    latent = {"samples": torch.zeros(1, 4, 8, 8)}

    def run(*args):
        return sampler_custom(model, True, 3, 1.0, _c(0.5), _c(0.0), sampler_seeds2(*args)[0], SIGMAS,
                              latent)[0]["samples"]

    base = run("phi_1", 1.0, 1.0, 0.5)
    assert torch.equal(base, run("phi_1", 1.0, 1.0, 0.5))  # seeded: repeatable
    for changed in (("phi_2", 1.0, 1.0, 0.5), ("phi_1", 0.0, 1.0, 0.5), ("phi_1", 1.0, 0.5, 0.5),
                    ("phi_1", 1.0, 1.0, 0.8)):
        assert not torch.allclose(base, run(*changed)), changed


async def test_seeds2_in_a_prompt_is_validated_against_its_solver_types(tmp_path):
    runner = Runner(tmp_path)
    checked = await runner.validate({
        "s": node("SamplerSEEDS2", solver_type="phi_2", eta=0.0, s_noise=1.0, r=1.0),
        "bad": node("SamplerSEEDS2", solver_type="phi_9", eta=0.0, s_noise=1.0, r=1.0),
        "p": node("PreviewAny", source=["s", 0]), "q": node("PreviewAny", source=["bad", 0])})
    # Only the output fed by the unknown solver type is dropped, as ComfyUI reports it.
    assert checked.outputs == ["p"] and set(checked.node_errors) == {"bad"}
    assert checked.node_errors["bad"]["errors"][0]["type"] == "value_not_in_list"


def test_packs_call_it_as_comfyuis_v3_class(comfy_nodes):
    from comfy_extras.nodes_custom_sampler import SamplerSEEDS2

    sampler = SamplerSEEDS2.execute("phi_2", 0.0, 1.0, 1.0).result[0]
    assert sampler.sampler_function is registry.sampler_function("seeds_2")
    assert sampler.extra_options == {"eta": 0.0, "s_noise": 1.0, "r": 1.0, "solver_type": "phi_2"}
