"""SkipLayerGuidanceDiT, SkipLayerGuidanceDiTSimple and SkipLayerGuidanceSD3: the hook each puts on
a clone, and what the hook does inside the real CFG path (comfy_core.sampling.cfg) on a tiny
DiT-like model that honours `patches_replace["dit"]` as ComfyUI's Flux and MMDiT do. Expected
values come from the same model run with the blocks left out directly (no patch mechanism)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from comfy_core.model_patches.skip_layer_guidance import (SkipLayerGuidance, SkipLayerUncond, parse_layers,
                                                          skip_block, with_skipped_blocks)
from comfy_core.patching.model import ModelPatcher
from comfy_core.sampling.cfg import sampling_function
from comfy_core.models.model_sampling import FlowModelSampling
from graph.native import spec_of
from graph.object_info import node_info
from nodes import skip_layer_guidance as slg
from nodes.errors import NodeInputError
from nodes.sd3_nodes import skip_layer_guidance_sd3
from tests.fixtures.object_info_parity import comfyui_object_info, node_differences

CHANNELS, WIDTH = 4, 8
SHIFT = 3.0  # SD3's flow shift: percent 0.01 -> sigma ~0.9966, 0.15 -> ~0.9444


class TinyDiT(nn.Module):
    """Double blocks update image and text tokens, single blocks the image tokens; a block with a
    `patches_replace["dit"]` entry is called through it (ComfyUI's calling convention)."""

    def __init__(self, n_double: int = 3, n_single: int = 2) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.img_in = nn.Parameter(torch.randn(CHANNELS, WIDTH, generator=g) * 0.5)
        self.txt_in = nn.Parameter(torch.randn(WIDTH, WIDTH, generator=g) * 0.5)
        self.double_img = nn.Parameter(torch.randn(n_double, WIDTH, WIDTH, generator=g) * 0.5)
        self.double_txt = nn.Parameter(torch.randn(n_double, WIDTH, WIDTH, generator=g) * 0.5)
        self.single = nn.Parameter(torch.randn(n_single, WIDTH, WIDTH, generator=g) * 0.5)
        self.out = nn.Parameter(torch.randn(WIDTH, CHANNELS, generator=g) * 0.5)
        self.model_sampling = FlowModelSampling(SHIFT)

    def _double(self, i: int, img: torch.Tensor, txt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # img [B, N, W], txt [B, T, W]
        img = img + torch.tanh(img @ self.double_img[i] + txt.mean(1, keepdim=True))
        txt = txt + torch.tanh(txt @ self.double_txt[i] + img.mean(1, keepdim=True))
        return img, txt

    def _single(self, i: int, img: torch.Tensor) -> torch.Tensor:
        return img + torch.tanh(img @ self.single[i])

    def _embed(self, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor) -> tuple:
        b, c, h, w = x.shape
        img = x.flatten(2).transpose(1, 2) @ self.img_in + sigma.view(b, 1, 1)  # [B, h*w, W]
        return img, context @ self.txt_in, (b, c, h, w)

    def _unembed(self, img: torch.Tensor, shape: tuple) -> torch.Tensor:
        b, c, h, w = shape
        return (img @ self.out).transpose(1, 2).reshape(b, c, h, w)

    def apply_model(self, x: torch.Tensor, sigma: torch.Tensor, c_crossattn: torch.Tensor,
                    transformer_options: dict | None = None, **_: object) -> torch.Tensor:
        replace = ((transformer_options or {}).get("patches_replace") or {}).get("dit", {})
        img, txt, shape = self._embed(x, sigma, c_crossattn)
        for i in range(self.double_img.shape[0]):
            if ("double_block", i) in replace:
                def original(args: dict, i: int = i) -> dict:
                    out_img, out_txt = self._double(i, args["img"], args["txt"])
                    return {"img": out_img, "txt": out_txt}
                out = replace[("double_block", i)]({"img": img, "txt": txt}, {"original_block": original})
                img, txt = out["img"], out["txt"]
            else:
                img, txt = self._double(i, img, txt)
        img = torch.cat([txt, img], dim=1)  # single blocks see text and image tokens, as Flux's
        n_txt = txt.shape[1]
        for i in range(self.single.shape[0]):
            if ("single_block", i) in replace:
                img = replace[("single_block", i)]({"img": img}, {"original_block": None})["img"]
            else:
                img = self._single(i, img)
        return self._unembed(img[:, n_txt:], shape)

    def reference(self, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor,
                  skip_double: tuple = (), skip_single: tuple = ()) -> torch.Tensor:
        """The same network with blocks left out by index (what skipping them means)."""
        img, txt, shape = self._embed(x, sigma, context)
        for i in range(self.double_img.shape[0]):
            if i not in skip_double:
                img, txt = self._double(i, img, txt)
        img = torch.cat([txt, img], dim=1)
        for i in range(self.single.shape[0]):
            if i not in skip_single:
                img = self._single(i, img)
        return self._unembed(img[:, txt.shape[1]:], shape)


@pytest.fixture(scope="module")
def dit():
    return TinyDiT().requires_grad_(False)


@pytest.fixture()
def model(dit):
    return ModelPatcher(dit)


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, CHANNELS, 4, 4, generator=g)
    positive = torch.randn(1, 5, WIDTH, generator=g)
    negative = torch.randn(1, 3, WIDTH, generator=g)
    return x, positive, negative


def _entries(context: torch.Tensor) -> list[dict]:
    return [{"model_conds": {"c_crossattn": context}}]


def _guided(model: ModelPatcher, inputs, sigma: float, cfg: float = 4.0) -> torch.Tensor:
    x, positive, negative = inputs
    return sampling_function(model.model, x, torch.tensor([sigma]), _entries(negative), _entries(positive), cfg,
                             model_options=model.model_options)


def _cfg(dit: TinyDiT, inputs, sigma: float, cfg: float = 4.0, skip_double=(), skip_single=(), uncond_skips=False):
    x, positive, negative = inputs
    s = torch.tensor([sigma])
    cond = dit.reference(x, s, positive)
    uncond = dit.reference(x, s, negative, skip_double, skip_single) if uncond_skips else dit.reference(x, s, negative)
    return cond, uncond, uncond + (cond - uncond) * cfg


def test_layers_are_every_run_of_digits():
    assert parse_layers("7, 8, 9") == (7, 8, 9)
    assert parse_layers("1;2 x3,-4") == (1, 2, 3, 4)
    assert parse_layers("") == () and parse_layers("none") == ()


def test_skipped_blocks_go_into_a_copy_of_the_options():
    options = {"transformer_options": {"patches_replace": {"dit": {("double_block", 0): print}}}}
    out = with_skipped_blocks(options, (1, 2), (3,))
    assert out["transformer_options"]["patches_replace"]["dit"] == {
        ("double_block", 0): print, ("double_block", 1): skip_block, ("double_block", 2): skip_block,
        ("single_block", 3): skip_block}
    assert options == {"transformer_options": {"patches_replace": {"dit": {("double_block", 0): print}}}}


def test_the_tiny_dit_honours_its_replacements_and_skipping_changes_it(dit, inputs):
    x, positive, _ = inputs
    s = torch.tensor([0.9])
    options = with_skipped_blocks({}, (1,), (0,))
    torch.testing.assert_close(dit.apply_model(x, s, positive, options["transformer_options"]),
                               dit.reference(x, s, positive, (1,), (0,)), rtol=0, atol=1e-6)
    assert not torch.allclose(dit.reference(x, s, positive, (1,)), dit.reference(x, s, positive), atol=1e-3)


def test_dit_node_adds_cond_minus_skipped_times_scale_inside_the_range(dit, model, inputs):
    before = repr(model.model_options)
    (patched,) = slg.skip_layer_guidance_dit(model, 2.5, 0.01, 0.15, double_layers="1", single_layers="0, 1")
    assert repr(model.model_options) == before and patched is not model
    ms = dit.model_sampling
    assert patched.model_options["sampler_post_cfg_function"] == [
        SkipLayerGuidance((1,), (0, 1), 2.5, ms.percent_to_sigma(0.01), ms.percent_to_sigma(0.15), 0.0)]
    x, positive, _ = inputs
    for sigma in (0.97, 0.95):  # inside [sigma(0.15) ~0.944, sigma(0.01) ~0.9966]
        cond, _, plain = _cfg(dit, inputs, sigma)
        skipped = dit.reference(x, torch.tensor([sigma]), positive, (1,), (0, 1))
        torch.testing.assert_close(_guided(patched, inputs, sigma), plain + (cond - skipped) * 2.5, rtol=0, atol=1e-5)
    for sigma in (0.999, 0.9, 0.5):  # outside: the plain CFG result
        torch.testing.assert_close(_guided(patched, inputs, sigma), _cfg(dit, inputs, sigma)[2], rtol=0, atol=1e-6)


def test_dit_node_rescales_towards_the_positive_spread(dit, model, inputs):
    (patched,) = slg.skip_layer_guidance_dit(model, 3.0, 0.0, 1.0, double_layers="0", single_layers="",
                                             rescaling_scale=0.7)
    x, positive, _ = inputs
    sigma = 0.6
    cond, _, plain = _cfg(dit, inputs, sigma)
    guided = plain + (cond - dit.reference(x, torch.tensor([sigma]), positive, (0,))) * 3.0
    expected = guided * (0.7 * cond.std() / guided.std() + 0.3)
    torch.testing.assert_close(_guided(patched, inputs, sigma), expected, rtol=0, atol=1e-5)


def test_dit_node_at_scale_zero_or_without_layers(dit, model, inputs):
    (zero,) = slg.skip_layer_guidance_dit(model, 0.0, 0.0, 1.0, double_layers="0")
    torch.testing.assert_close(_guided(zero, inputs, 0.6), _cfg(dit, inputs, 0.6)[2], rtol=0, atol=1e-6)
    assert slg.skip_layer_guidance_dit(model, 3.0, 0.0, 1.0, double_layers="", single_layers=" , ")[0] is model


def test_sd3_node_is_the_dit_node_on_double_blocks(dit, model):
    (patched,) = skip_layer_guidance_sd3(model, "7, 8, 9", 3.0, 0.01, 0.15)
    (hook,) = patched.model_options["sampler_post_cfg_function"]
    ms = dit.model_sampling
    assert hook == SkipLayerGuidance((7, 8, 9), (), 3.0, ms.percent_to_sigma(0.01), ms.percent_to_sigma(0.15), 0.0)
    assert hook.cache_signature() == skip_layer_guidance_sd3(model, "7,8,9", 3.0, 0.01, 0.15)[0] \
        .model_options["sampler_post_cfg_function"][0].cache_signature()


def test_simple_node_takes_the_negative_from_the_skipped_model_inside_the_range(dit, model, inputs):
    (patched,) = slg.skip_layer_guidance_dit_simple(model, 0.2, 0.6, double_layers="2", single_layers="1")
    ms = dit.model_sampling
    assert patched.model_options["sampler_calc_cond_batch_function"] == SkipLayerUncond(
        (2,), (1,), ms.percent_to_sigma(0.2), ms.percent_to_sigma(0.6))
    inside = 0.85  # sigma(0.2) ~0.923, sigma(0.6) ~0.667
    expected = _cfg(dit, inputs, inside, skip_double=(2,), skip_single=(1,), uncond_skips=True)[2]
    torch.testing.assert_close(_guided(patched, inputs, inside), expected, rtol=0, atol=1e-5)
    for outside in (0.95, 0.4):
        torch.testing.assert_close(_guided(patched, inputs, outside), _cfg(dit, inputs, outside)[2], rtol=0, atol=1e-6)
    # cfg 1 skips the negative: no negative, nothing to replace.
    x, positive, _ = inputs
    torch.testing.assert_close(_guided(patched, inputs, inside, cfg=1.0),
                               dit.reference(x, torch.tensor([inside]), positive), rtol=0, atol=1e-6)


def test_bad_inputs_are_typed_errors(model):
    with pytest.raises(NodeInputError, match="start_percent"):
        slg.skip_layer_guidance_dit(model, 3.0, 1.5, 0.15, double_layers="1")
    with pytest.raises(NodeInputError, match="double_layers"):
        slg.skip_layer_guidance_dit_simple(model, 0.0, 1.0, double_layers=7)
    with pytest.raises(NodeInputError, match="model"):
        slg.skip_layer_guidance_dit("a model", 3.0, 0.0, 1.0, double_layers="1")


@pytest.mark.parametrize("fn", [slg.skip_layer_guidance_dit, slg.skip_layer_guidance_dit_simple,
                                skip_layer_guidance_sd3])
def test_object_info_is_comfyuis(fn):
    spec = spec_of(fn)
    theirs = comfyui_object_info()[spec.node_id]
    ours = node_info(spec)
    assert node_differences(spec.node_id, ours, theirs) == []
    assert ours.get("experimental") is True and ours["description"] == theirs["description"]


def test_packs_call_comfyuis_execute_positionally(comfy_nodes, model):
    """`SkipLayerGuidanceDiT.execute(model, scale, start_percent, end_percent, double_layers, ...)`
    is ComfyUI's parameter order (not the sockets'), as packs call it."""
    from comfy_extras.nodes_sd3 import SkipLayerGuidanceSD3
    from comfy_extras.nodes_slg import SkipLayerGuidanceDiT, SkipLayerGuidanceDiTSimple

    out = SkipLayerGuidanceDiT.execute(model, 2.0, 0.0, 1.0, "3", "4", 0.5)
    (hook,) = out.result[0].model_options["sampler_post_cfg_function"]
    assert (hook.double_layers, hook.single_layers, hook.scale, hook.rescaling_scale) == ((3,), (4,), 2.0, 0.5)
    simple = SkipLayerGuidanceDiTSimple.execute(model, 0.0, 1.0, single_layers="1").result[0]
    assert simple.model_options["sampler_calc_cond_batch_function"].single_layers == (1,)
    sd3 = SkipLayerGuidanceSD3.execute(model=model, layers="5", scale=1.0, start_percent=0.0, end_percent=1.0)
    assert sd3.result[0].model_options["sampler_post_cfg_function"][0].double_layers == (5,)


def test_the_real_tiny_mmdit_takes_the_skips_the_hook_writes():
    """On the MMDiT of this engine (tiny SD3.5-medium weights): the hook's extra pass equals the
    model run with ComfyUI's skip entries written by hand."""
    from comfy_core.families.sd3.mmdit import MMDiT, MMDiTConfig
    from tests.fixtures.mmdit_files import tiny_mmdit_state_dict

    state = tiny_mmdit_state_dict("sd35_medium", seed=5, prefix="")
    with torch.device("meta"):
        mmdit = MMDiT.from_config(MMDiTConfig.detect_from_weights(state, prefix=""))
    mmdit.load_state_dict(state, strict=True, assign=True)
    mmdit.eval()
    g = torch.Generator().manual_seed(1)
    x, context = torch.randn(1, 16, 8, 8, generator=g), torch.randn(1, 6, 64, generator=g)
    y = torch.randn(1, 64, generator=g)

    class Wrapped:
        def apply_model(self, x, sigma, c_crossattn, transformer_options=None, **_):  # noqa: ANN001, ANN201
            return mmdit(x, sigma * 1000, context=c_crossattn, y=y, transformer_options=transformer_options or {})

    sigma = torch.tensor([0.5])
    entries = _entries(context)
    with torch.no_grad():
        cond = mmdit(x, sigma * 1000, context=context, y=y, transformer_options={})
        skipped = mmdit(x, sigma * 1000, context=context, y=y, transformer_options={
            "patches_replace": {"dit": {("double_block", 1): lambda args, extra: args}}})
        denoised = cond * 0.5
        out = SkipLayerGuidance((1,), (), 2.0, 1.0, 0.0)({
            "denoised": denoised, "cond": entries, "cond_denoised": cond, "input": x, "sigma": sigma,
            "model": Wrapped(), "model_options": {}})
    assert (cond - skipped).abs().max() > 1e-3
    torch.testing.assert_close(out, denoised + (cond - skipped) * 2.0, rtol=0, atol=1e-5)


def test_the_real_tiny_flux_takes_the_single_block_skips_of_the_simple_hook():
    """On the Flux of this engine (tiny weights): in range, the negative is Flux run with ComfyUI's
    single-block skip entry written by hand, the positive the plain run."""
    from comfy_core.families.flux.dit import FluxConfig, FluxTransformer as Flux
    from tests.fixtures.flux_files import tiny_flux_state_dict

    state = tiny_flux_state_dict(True, seed=5, depth=1, depth_single=2)
    with torch.device("meta"):
        flux = Flux.from_config(FluxConfig.detect_from_weights(state))
    flux.load_state_dict(state, strict=True, assign=True)
    flux.eval()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 16, 8, 6, generator=g), torch.randn(1, 24, generator=g)
    positive, negative = torch.randn(1, 4, 32, generator=g), torch.randn(1, 3, 32, generator=g)

    def run(context: torch.Tensor, sigma: torch.Tensor, options: dict) -> torch.Tensor:
        return flux(x, sigma, context=context, y=y, guidance=torch.tensor([3.0]), transformer_options=options)

    class Wrapped:
        def apply_model(self, x, sigma, c_crossattn, transformer_options=None, **_):  # noqa: ANN001, ANN201
            return run(c_crossattn, sigma, transformer_options or {})

    sigma = torch.tensor([0.6])
    hook = SkipLayerUncond((), (1,), 1.0, 0.0)
    with torch.no_grad():
        cond_out, uncond_out = hook({"model": Wrapped(), "conds": [_entries(positive), _entries(negative)], "input": x,
                                     "sigma": sigma, "model_options": {}})
        skipped = run(negative, sigma, {"patches_replace": {"dit": {("single_block", 1): lambda args, extra: args}}})
        plain_uncond = run(negative, sigma, {})
        torch.testing.assert_close(cond_out, run(positive, sigma, {}), rtol=0, atol=1e-5)
    assert (skipped - plain_uncond).abs().max() > 1e-3
    torch.testing.assert_close(uncond_out, skipped, rtol=0, atol=1e-5)
