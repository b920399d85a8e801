"""Today's ComfyUI names the eighth pack survey's packs import (E4, E6, E7, E10, E11), called the
way those packs call them, checked against an independent computation or our own runtime:

- E4 `comfy.utils.model_trange` (ComfyUI-FunPack's hybrid Euler sampler's step loop);
- E6 `comfy.k_diffusion.deis` (comfyui_overly_complicated_sampling's "deis" step method):
  `get_deis_coeff_list` in both modes against scipy quadrature of the Lagrange basis;
- E7 `comfy.context_windows.IndexListCallbacks.RESIZE_COND_ITEM` (ComfyUI-WanVaceAdvanced): a
  callback registered as the pack does decides a model cond's window value; VACE's context is
  cut on its frame axis 3;
- E10 `comfy.bg_removal_model.BG_REMOVAL_MODELS` (Pixaroma's RemoveBackground model subclass);
- E11 `comfy.text_encoders.z_image` (ComfyUI-QwenImageWanBridge imports it).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from scipy import integrate, optimize


# --- E4: comfy.utils.model_trange ---------------------------------------------------------------------------


def _funpack_style_euler(model, x, sigmas, extra_args=None, callback=None, disable=None):
    """A pack sampler's loop as FunPack writes it: `for i in comfy.utils.model_trange(n, disable=disable)`."""
    import comfy.utils

    extra_args = {} if extra_args is None else extra_args
    s_in = x.new_ones([x.shape[0]])
    for i in comfy.utils.model_trange(len(sigmas) - 1, disable=disable):
        denoised = model(x, sigmas[i] * s_in, **extra_args)
        x = x + (sigmas[i + 1] - sigmas[i]) * (x - denoised) / sigmas[i]
    return x


def test_model_trange_drives_a_pack_samplers_steps(session, capsys):
    import comfy.utils
    from tqdm.auto import tqdm

    bar = comfy.utils.model_trange(3, disable=False, desc="steps")
    assert isinstance(bar, tqdm) and list(bar) == [0, 1, 2]
    assert "3/3" in capsys.readouterr().err  # a console bar, as ComfyUI's samplers show
    assert list(comfy.utils.model_trange(2, 7, 2, disable=True)) == [2, 4, 6]  # trange's arguments
    x = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0))
    sigmas = torch.tensor([10.0, 5.0, 2.0, 0.5])
    # independent: with a model denoising to 0, each Euler step scales x by sigma_next / sigma
    out = _funpack_style_euler(lambda x, s: torch.zeros_like(x), x, sigmas, disable=True)
    torch.testing.assert_close(out, x * 0.05)


# --- E6: comfy.k_diffusion.deis -----------------------------------------------------------------------------

SIGMAS = torch.tensor([14.6, 9.0, 5.5, 3.0, 1.6, 0.8, 0.35, 0.12])


def _vp_time(sigma: float, eps: float = 1e-3, smin: float = 0.002, smax: float = 80.0) -> tuple[float, float, float]:
    """Independent: the VP-SDE sigma(t) = sqrt(exp(bd t^2 / 2 + bm t) - 1) fitted so that
    sigma(1) = sigma_max and sigma(eps) = sigma_min; t of `sigma` by root finding, and (bd, bm)."""
    bd, bm = np.linalg.solve([[0.5, 1.0], [0.5 * eps ** 2, eps]], [math.log(smax ** 2 + 1), math.log(smin ** 2 + 1)])
    t = optimize.brentq(lambda u: math.sqrt(math.expm1(0.5 * bd * u * u + bm * u)) - sigma, eps, 1.0, xtol=1e-15)
    return t, bd, bm


def _lagrange(nodes: list[float], j: int, u: float) -> float:
    return math.prod((u - p) / (nodes[j] - p) for k, p in enumerate(nodes) if k != j)


def test_deis_tab_coefficients_match_quadrature(session):
    import comfy.k_diffusion
    import comfy.k_diffusion.sampling

    assert comfy.k_diffusion.deis is comfy.k_diffusion.sampling.deis  # ComfyUI's sampling imports it
    deis = comfy.k_diffusion.deis
    coeffs = deis.get_deis_coeff_list(SIGMAS, 3, deis_mode="tab")  # OCS: (sigmas, history_limit + 1, deis_mode=)
    ts = [_vp_time(float(s))[0] for s in SIGMAS]
    _, bd, bm = _vp_time(1.0)

    def dsigma_dt(u: float) -> float:
        g = 0.5 * bd * u * u + bm * u
        return (bd * u + bm) * math.exp(g) / (2 * math.sqrt(math.expm1(g)))

    assert len(coeffs) == len(SIGMAS) - 1 and coeffs[0] == []
    for i in range(1, len(SIGMAS) - 1):
        order = min(i + 1, 3)
        nodes = [ts[i - k] for k in range(order)]
        assert len(coeffs[i]) == order
        for j in range(order):
            expected, _ = integrate.quad(lambda u: dsigma_dt(u) * _lagrange(nodes, j, u), ts[i], ts[i + 1],
                                         epsabs=1e-12, epsrel=1e-10)
            assert float(coeffs[i][j]) == pytest.approx(expected, rel=2e-3, abs=1e-4), (i, j)
        # the basis sums to 1: the weights of a constant derivative give sigma_next - sigma
        assert float(sum(coeffs[i])) == pytest.approx(float(SIGMAS[i + 1] - SIGMAS[i]), rel=1e-3)
    t_steps, beta_0, beta_1 = deis.edm2t(SIGMAS)
    torch.testing.assert_close(t_steps, torch.tensor(ts, dtype=t_steps.dtype), rtol=1e-5, atol=1e-7)
    assert float(beta_1 - beta_0) == pytest.approx(bd, rel=1e-5) and float(beta_0) == pytest.approx(bm, rel=1e-5)
    taus = torch.tensor([0.05, 0.3, 0.7])
    expected = torch.tensor([dsigma_dt(float(u)) for u in taus], dtype=torch.float32)
    torch.testing.assert_close(deis.cal_intergrand(beta_0, beta_1, taus), expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(deis.t2alpha_fn(beta_0, beta_1, taus),
                               torch.exp(-(0.5 * bd * taus ** 2 + bm * taus)), rtol=1e-5, atol=1e-7)
    prev = torch.tensor([0.2, 0.5, 0.9])
    torch.testing.assert_close(deis.cal_poly(prev, 1, taus),
                               torch.tensor([_lagrange(prev.tolist(), 1, float(u)) for u in taus], dtype=torch.float32))


@pytest.mark.parametrize("max_order", [1, 2, 3, 4])
def test_deis_rhoab_coefficients_integrate_the_basis_in_sigma(session, max_order):
    import comfy.k_diffusion.deis as deis

    coeffs = deis.get_deis_coeff_list(SIGMAS, max_order, deis_mode="rhoab")
    s = [float(v) for v in SIGMAS]
    assert coeffs[0] == []
    for i in range(1, len(s) - 1):
        order = min(i, max_order)
        nodes = [s[i - k] for k in range(order + 1)]
        assert len(coeffs[i]) == order + 1
        for j in range(order + 1):
            expected, _ = integrate.quad(lambda u: _lagrange(nodes, j, u), s[i], s[i + 1], epsabs=1e-13)
            assert float(coeffs[i][j]) == pytest.approx(expected, rel=1e-6, abs=1e-9), (i, j)
    with pytest.raises(ValueError, match="deis_mode"):
        deis.get_deis_coeff_list(SIGMAS, 2, deis_mode="nope")


# --- E7: IndexListCallbacks.RESIZE_COND_ITEM -----------------------------------------------------------------


def test_resize_cond_item_callbacks_decide_a_model_conds_window(session):
    import comfy.context_windows as cw
    import comfy.patcher_extension
    import comfy.samplers

    assert cw.IndexListCallbacks.RESIZE_COND_ITEM == "resize_cond_item"
    handler = cw.IndexListContextHandler(context_schedule=cw.get_matching_context_schedule("standard_static"),
                                         fuse_method=cw.get_matching_fuse_method("flat"), context_length=4,
                                         context_overlap=1, dim=2)
    frames = 10
    vace = torch.randn(1, 2, 6, frames, 2, 2, generator=torch.Generator().manual_seed(1))  # [B, n, C, T, H, W]
    mine = torch.arange(frames, dtype=torch.float32)[None]  # [B, T]
    seen, windows = [], []

    # as ComfyUI-WanVaceAdvanced registers its callbacks (core/context_windows_hook.py)
    comfy.patcher_extension.add_callback_with_key(
        cw.IndexListCallbacks.EVALUATE_CONTEXT_WINDOWS, "tracker",
        lambda h, model, x, conds, t, mo, idx, window, *rest: windows.append(window), handler.callbacks)

    def resize(cond_key, cond_value, window, x_in, device, new_cond_item):
        seen.append((cond_key, type(cond_value.cond), sorted(new_cond_item)))
        if cond_key == "my_frames":  # a pack's own per-frame cond: the window's frames, doubled
            return cond_value._copy_with(cond_value.cond[:, window.index_list] * 2)
        return None

    comfy.patcher_extension.add_callback_with_key(cw.IndexListCallbacks.RESIZE_COND_ITEM, "my_pack", resize,
                                                  handler.callbacks)
    calls = []

    def apply_model(x, sigma, c_crossattn=None, transformer_options=None, vace_context=None, my_frames=None, **_):
        calls.append((x.shape[2], vace_context, my_frames))
        return x

    x = torch.randn(1, 3, frames, 2, 2)
    options = {"context_handler": handler, "transformer_options": {"sample_sigmas": torch.tensor([2.0, 0.0])}}
    conds = [[{"model_conds": {"c_crossattn": torch.zeros(1, 4, 8), "vace_context": vace, "my_frames": mine}}]]
    (out,) = comfy.samplers.calc_cond_batch(apply_model, conds, x, torch.tensor([2.0]), options)
    torch.testing.assert_close(out, x)
    assert [w.index_list for w in windows] == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert {key for key, _, _ in seen} == {"c_crossattn", "vace_context", "my_frames"}
    assert all(kind is torch.Tensor for _, kind, _ in seen)  # shown as ComfyUI's cond objects (.cond)
    assert all(keys == ["c_crossattn", "my_frames", "vace_context"] for _, _, keys in seen)
    for (length, vace_in, mine_in), window in zip(calls, windows):
        rows = ([window.causal_anchor_index] if window.causal_anchor_index is not None else []) + window.index_list
        assert length == len(rows)
        torch.testing.assert_close(vace_in, vace[:, :, :, rows])  # VACE's frames lie on its axis 3
        torch.testing.assert_close(mine_in, mine[:, window.index_list] * 2)  # the callback's value, plain


def test_vace_context_and_audio_embed_are_cut_on_their_own_frame_axis():
    """Without callbacks (the core WanVaceToVideo with WanContextWindowsManual, which failed with a
    size mismatch before): VACE's context on axis 3 with `cond_retain_index_list`, audio on axis 1."""
    from comfy_core.sampling.cond_batch import calc_cond_batch
    from comfy_core.sampling.context_windows import CONTEXT_WINDOW_OPTION, context_handler

    frames = 7
    handler = context_handler("standard_static", "flat", 3, 1, dim=2, cond_retain_index_list="0")
    t = torch.arange(frames, dtype=torch.float32)
    vace = t.reshape(1, 1, 1, frames, 1, 1).repeat(1, 2, 5, 1, 1, 1)  # [B, n, C, T, H, W], frame t holds t
    audio = t.reshape(1, frames, 1).repeat(1, 1, 3)  # [B, T, D]
    seen = []

    def apply_model(x, sigma, vace_context=None, audio_embed=None, transformer_options=None, **_):
        seen.append((transformer_options[CONTEXT_WINDOW_OPTION], vace_context, audio_embed))
        return x

    x = torch.zeros(1, 4, frames, 1, 1)
    options = {"context_handler": handler, "transformer_options": {"sample_sigmas": torch.tensor([2.0, 0.0])}}
    entry = {"model_conds": {"c_crossattn": torch.zeros(1, 2, 3), "vace_context": vace, "audio_embed": audio}}
    calc_cond_batch(apply_model, [[entry]], x, torch.tensor([2.0]), options)
    assert len(seen) == 3
    for window, vace_in, audio_in in seen:
        rows = ([window.causal_anchor_index] if window.causal_anchor_index is not None else []) + window.index_list
        kept = [0] + rows[1:]  # cond_retain_index_list "0": sub-position 0 holds frame 0
        assert vace_in.shape == (1, 2, 5, len(rows), 1, 1)
        assert vace_in[0, 0, 0, :, 0, 0].tolist() == [float(r) for r in kept]
        assert audio_in[0, :, 0].tolist() == [float(r) for r in rows]  # audio keeps no retained frame


# --- E10: comfy.bg_removal_model.BG_REMOVAL_MODELS -------------------------------------------------------------


def test_bg_removal_models_builds_comfyuis_swin_l_birefnet(session):
    import comfy.bg_removal_model
    import comfy.ops

    model_class = comfy.bg_removal_model.BG_REMOVAL_MODELS.get("birefnet")
    net = model_class({"model_type": "birefnet", "image_size": 1024}, torch.float16, torch.device("meta"),
                      comfy.ops.manual_cast)
    assert isinstance(net, torch.nn.Module)
    assert net.bb.patch_embed.proj.weight.shape == (192, 3, 4, 4)  # Swin-L, which Pixaroma checks for
    assert net.bb.patch_embed.proj.weight.dtype == torch.float16 and net.bb.patch_embed.proj.weight.is_meta
    blocks = [len(layer.blocks) for layer in net.bb.layers]
    assert blocks == [2, 2, 18, 2]


@pytest.fixture(scope="module")
def birefnet_file(tmp_path_factory):
    from tests.fixtures.template_models_bgremoval import WRITERS_BGREMOVAL

    path = tmp_path_factory.mktemp("bgr8") / "birefnet.safetensors"
    WRITERS_BGREMOVAL["birefnet"](path)
    return path


def test_a_pack_model_subclass_built_from_bg_removal_models(session, birefnet_file, monkeypatch, tmp_path):
    import comfy.bg_removal_model
    import comfy.model_management
    import comfy.model_patcher
    import comfy.ops
    import comfy.utils
    from comfy_core.models.birefnet.model import load_background_removal
    from comfy_core.models.birefnet.network import BiRefNet
    from tests.fixtures.template_models_bgremoval import tiny_birefnet_config

    # a network class under its model_type, as ComfyUI's table holds BiRefNet (the tiny file's widths)
    monkeypatch.setitem(comfy.bg_removal_model.BG_REMOVAL_MODELS, "tiny_birefnet",
                        lambda config, dtype, device, ops: BiRefNet(tiny_birefnet_config()).to(device, dtype))

    class PackBgModel(comfy.bg_removal_model.BackgroundRemovalModel):  # Pixaroma's _PixaromaBgModel
        def __init__(self, config):
            self.image_size = config.get("image_size", 1024)
            self.image_mean = config.get("image_mean", [0.0, 0.0, 0.0])
            self.image_std = config.get("image_std", [1.0, 1.0, 1.0])
            self.model_type = config.get("model_type", "birefnet")
            model_class = comfy.bg_removal_model.BG_REMOVAL_MODELS.get(self.model_type)
            self.load_device = torch.device("cpu")
            offload_device = torch.device("cpu")
            self.dtype = torch.float32
            self.model = model_class(config, self.dtype, offload_device, comfy.ops.manual_cast)
            self.model.eval()
            self.patcher = comfy.model_patcher.CoreModelPatcher(self.model, load_device=self.load_device,
                                                                offload_device=offload_device)

    config = {"model_type": "tiny_birefnet", "image_size": 64, "image_mean": [0.0, 0.0, 0.0],
              "image_std": [1.0, 1.0, 1.0]}
    model = PackBgModel(config)
    sd = comfy.utils.load_torch_file(str(birefnet_file))
    missing, unexpected = model.load_sd(sd)
    assert missing == []
    assert isinstance(model.patcher, comfy.model_patcher.ModelPatcher)
    image = torch.rand(2, 40, 52, 3, generator=torch.Generator().manual_seed(5))
    mask = model.encode_image(image)
    # independent of the subclass: our loader's model of the same file, with the pack's normalisation
    ours = load_background_removal(birefnet_file)
    ours.image_mean, ours.image_std = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    assert mask.shape == (2, 40, 52)
    torch.testing.assert_close(mask, ours.encode_image(image, image_size=64), rtol=1e-5, atol=1e-5)

    # ComfyUI's own constructor: a JSON config file
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(config))
    built = comfy.bg_removal_model.BackgroundRemovalModel(str(path))
    built.load_sd(sd)
    assert built.image_size == 64 and built.model_type == "tiny_birefnet"
    torch.testing.assert_close(built.encode_image(image), mask, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="model_type"):
        path.write_text(json.dumps({"model_type": "nope"}))
        comfy.bg_removal_model.BackgroundRemovalModel(str(path))


# --- E11: comfy.text_encoders.z_image ----------------------------------------------------------------------------


def test_z_image_module_names_our_zimage_encoder_classes(session, tmp_path):
    import comfy.text_encoders.z_image as z_image
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict, write_qwen3_file

    assert os.path.isfile(z_image.__file__)  # QwenImageWanBridge looks for a tokenizer folder beside it
    path = write_qwen3_file(tmp_path / "qwen_3_4b.safetensors", tiny_qwen3_state_dict(seed=2))
    clip = load_text_encoders([path], "lumina2")
    assert isinstance(clip.cond_stage_model, z_image.ZImageTEModel)
    assert isinstance(clip.tokenizer, z_image.ZImageTokenizer)
    assert isinstance(clip.cond_stage_model.qwen3_4b, z_image.Qwen3_4BModel)
    assert isinstance(clip.tokenizer.qwen3_4b, z_image.Qwen3Tokenizer)
    assert z_image.ZImageTokenizer.llama_template == "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    tokens = clip.tokenizer.tokenize_with_weights("a cat (sleeping:1.2)")["qwen3_4b"][0]
    ids = [t[0] for t in tokens]
    assert ids[0] == 151644 and ids.count(151645) == 1  # <|im_start|> ... <|im_end|>: the chat template
    assert {t[1] for t in tokens} == {1.0}  # weights disabled, as ComfyUI's ZImageTokenizer
    bare = clip.tokenizer.tokenize_with_weights("a cat", llama_template="{}")["qwen3_4b"][0]
    assert 151644 not in [t[0] for t in bare]
