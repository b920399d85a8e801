"""CFG and conditioning batching: formula, one batched forward, cfg=1 skip, areas, masks, strength,
start/end percent, composable weights (AND), SDXL label conditioning, ComfyUI's model_options hooks."""
from __future__ import annotations


import pytest
import torch

from comfy_core.sampling.guider import CFGGuider, InpaintDenoiser
from comfy_core.sampling.conditioning import ConditioningError, convert_cond, prepare_conds
from comfy_core.models.model_sampling import ModelSampling

S = 0.5


class FakeModel:
    """A Gaussian denoiser whose data mean is the mean of its text context (one scalar per row)."""

    def __init__(self, adm: bool = False) -> None:
        self.model_sampling = ModelSampling()
        self.calls: list[dict] = []
        self.adm = adm
        self.adm_args: list[dict] = []

    def apply_model(self, x, sigma, c_crossattn, y=None, transformer_options=None):
        self.calls.append({"batch": x.shape[0], "shape": tuple(x.shape), "ctx": tuple(c_crossattn.shape),
                           "y": y, "cond_or_uncond": (transformer_options or {}).get("cond_or_uncond")})
        mu = c_crossattn.mean(dim=(1, 2)).view(-1, 1, 1, 1)
        if y is not None:
            mu = mu + y[:, :1].view(-1, 1, 1, 1)
        sg = sigma.view(-1, 1, 1, 1)
        return (S * S * x + sg * sg * mu) / (S * S + sg * sg)

    def encode_adm(self, **kw):
        if not self.adm:
            return None
        self.adm_args.append(kw)
        return torch.tensor([[float(kw["width"]) / 1000.0, float(kw["height"])]])


def cond(value: float, tokens: int = 77, **options) -> list:
    return [[torch.full((1, tokens, 8), value), options]]


def ideal(x: torch.Tensor, sigma: float, mu: float) -> torch.Tensor:
    return (S * S * x + sigma * sigma * mu) / (S * S + sigma * sigma)


def prepared(model, positive, negative, latent):
    conds = {"positive": convert_cond(positive, "positive"), "negative": convert_cond(negative, "negative")}
    return prepare_conds(conds, latent, model.model_sampling, model.encode_adm)


def denoiser(model, prepared_conds, cfg, model_options=None, latent_image=None, noise=None) -> InpaintDenoiser:
    """The denoiser a sampler gets (guider.py's path), its conds prepared as a run prepares them."""
    guider = CFGGuider(None)
    guider.inner_model, guider.conds, guider.cfg = model, prepared_conds, cfg
    guider.model_options = {} if model_options is None else model_options
    return InpaintDenoiser(guider, torch.ones(1), latent_image=latent_image, noise=noise)


def run(model, positive, negative, cfg, x, sigma=2.0, model_options=None):
    den = denoiser(model, prepared(model, positive, negative, x), cfg, model_options)
    return den(x, torch.full((x.shape[0],), sigma), model_options=model_options)


X = torch.randn(2, 4, 16, 16, generator=torch.Generator().manual_seed(0))


def test_cfg_formula_and_one_batched_forward() -> None:
    m = FakeModel()
    out = run(m, cond(1.0), cond(-1.0), 7.0, X)
    c, u = ideal(X, 2.0, 1.0), ideal(X, 2.0, -1.0)
    torch.testing.assert_close(out, u + (c - u) * 7.0)
    assert len(m.calls) == 1 and m.calls[0]["batch"] == 4
    assert m.calls[0]["cond_or_uncond"] == [1, 0]  # ComfyUI's order: uncond rows first


def test_cfg_one_skips_the_negative_pass() -> None:
    m = FakeModel()
    out = run(m, cond(1.0), cond(-1.0), 1.0, X)
    torch.testing.assert_close(out, ideal(X, 2.0, 1.0))
    assert [c["batch"] for c in m.calls] == [2]
    m2 = FakeModel()
    run(m2, cond(1.0), cond(-1.0), 1.0, X, model_options={"disable_cfg1_optimization": True})
    assert [c["batch"] for c in m2.calls] == [4]


def test_single_full_entry_returns_the_model_output_exactly() -> None:
    m = FakeModel()
    out = run(m, cond(0.25), cond(0.0), 1.0, X)
    assert torch.equal(out, ideal(X, 2.0, 0.25).to(out.dtype)) or torch.allclose(out, ideal(X, 2.0, 0.25), rtol=0, atol=1e-7)


def test_several_entries_are_averaged_by_strength() -> None:
    m = FakeModel()
    positive = cond(1.0) + cond(3.0, strength=3.0)
    out = run(m, positive, cond(0.0), 1.0, X)
    expected = (ideal(X, 2.0, 1.0) * 1 + ideal(X, 2.0, 3.0) * 3) / 4
    torch.testing.assert_close(out, expected)
    assert len(m.calls) == 1 and m.calls[0]["batch"] == 4


def test_context_lengths_repeat_to_lcm_or_split() -> None:
    m = FakeModel()
    run(m, cond(1.0, tokens=154), cond(0.0, tokens=77), 5.0, X)
    assert len(m.calls) == 1 and m.calls[0]["ctx"] == (4, 154, 8)
    m2 = FakeModel()
    run(m2, cond(1.0, tokens=77 * 5), cond(0.0, tokens=77), 5.0, X)  # LCM 5x the shorter: separate
    assert sorted(c["ctx"][1] for c in m2.calls) == [77, 385]


def test_area_entry_only_touches_its_area_and_gets_a_negative_twin() -> None:
    m = FakeModel()
    positive = cond(1.0) + cond(5.0, area=(8, 8, 0, 0))  # (h, w, y, x) in latent pixels
    out = run(m, positive, cond(0.0), 1.0, X)
    base, area = ideal(X, 2.0, 1.0), ideal(X, 2.0, 5.0)
    torch.testing.assert_close(out[:, :, 10:, :], base[:, :, 10:, :])
    torch.testing.assert_close(out[:, :, :, 10:], base[:, :, :, 10:])
    torch.testing.assert_close(out[:, :, 0, 0], ((base + area) / 2)[:, :, 0, 0])  # on the border: no feather
    # the inner edge is feathered: row 7 has weight 1/2 (min(8, 8//4) = 2 rows of ramp)
    torch.testing.assert_close(out[:, :, 7, 0], ((base + 0.5 * area) / 1.5)[:, :, 7, 0])
    shapes = sorted(c["shape"][2] for c in m.calls)
    assert shapes == [8, 16]  # full-size batch and the 8x8 crop batch
    m2 = FakeModel()
    run(m2, positive, cond(0.0), 3.0, X)
    crop_call = [c for c in m2.calls if c["shape"][2] == 8][0]
    assert crop_call["batch"] == 4  # the negative got a same-area twin, batched with it


def test_percentage_area_and_mask() -> None:
    m = FakeModel()
    positive = cond(1.0) + cond(5.0, area=("percentage", 0.5, 0.5, 0.0, 0.0))
    out = run(m, positive, cond(0.0), 1.0, X)
    torch.testing.assert_close(out[:, :, 12:, 12:], ideal(X, 2.0, 1.0)[:, :, 12:, 12:])
    mask = torch.zeros(1, 32, 32)
    mask[:, :, :16] = 1.0  # left half, given at twice the latent size: resized
    m2 = FakeModel()
    out2 = run(m2, cond(1.0) + cond(5.0, mask=mask, mask_strength=1.0), cond(0.0), 1.0, X)
    torch.testing.assert_close(out2[:, :, :, 12:], ideal(X, 2.0, 1.0)[:, :, :, 12:])
    torch.testing.assert_close(out2[:, :, :, :6], ((ideal(X, 2.0, 1.0) + ideal(X, 2.0, 5.0)) / 2)[:, :, :, :6])


def test_set_area_to_bounds_crops_to_the_mask() -> None:
    m = FakeModel()
    mask = torch.zeros(1, 16, 16)
    mask[:, 2:12, 3:13] = 1.0
    run(m, cond(1.0) + cond(5.0, mask=mask, set_area_to_bounds=True), cond(0.0), 1.0, X)
    assert sorted(c["shape"][2:] for c in m.calls) == [(10, 10), (16, 16)]


def test_start_end_percent_switch_entries_by_sigma() -> None:
    ms = ModelSampling()
    early = cond(5.0, start_percent=0.0, end_percent=0.5)
    late = cond(-5.0, start_percent=0.5, end_percent=1.0)
    hi = float(ms.percent_to_sigma(0.2))
    lo = float(ms.percent_to_sigma(0.8))
    out_hi = run(FakeModel(), early + late, cond(0.0), 1.0, X, sigma=hi)
    out_lo = run(FakeModel(), early + late, cond(0.0), 1.0, X, sigma=lo)
    torch.testing.assert_close(out_hi, ideal(X, hi, 5.0))
    torch.testing.assert_close(out_lo, ideal(X, lo, -5.0))


def test_composable_weights_follow_automatic1111() -> None:
    m = FakeModel()
    positive = cond(1.0, composable_weight=0.5) + cond(3.0, composable_weight=1.2)
    out = run(m, positive, cond(-1.0), 7.0, X)
    u = ideal(X, 2.0, -1.0)
    expected = u + 7.0 * (0.5 * (ideal(X, 2.0, 1.0) - u) + 1.2 * (ideal(X, 2.0, 3.0) - u))
    torch.testing.assert_close(out, expected)
    assert len(m.calls) == 1 and m.calls[0]["batch"] == 6  # still one batched forward
    # at cfg 1 the negative is still needed for the sum
    out1 = run(FakeModel(), positive, cond(-1.0), 1.0, X)
    torch.testing.assert_close(out1, u + 0.5 * (ideal(X, 2.0, 1.0) - u) + 1.2 * (ideal(X, 2.0, 3.0) - u))


def test_sdxl_label_embedding_gets_size_defaults_and_options() -> None:
    m = FakeModel(adm=True)
    run(m, cond(1.0, width=1024, height=768), cond(0.0), 2.0, X)
    assert m.adm_args[0]["width"] == 1024 and m.adm_args[0]["height"] == 768  # positive
    assert m.calls[0]["y"].shape == (4, 2)
    m2 = FakeModel(adm=True)
    run(m2, cond(1.0), cond(0.0), 2.0, X)
    assert m2.adm_args[0]["width"] == 16 * 8 and m2.adm_args[0]["height"] == 16 * 8  # latent x 8


def test_model_options_hooks() -> None:
    seen = {}

    def cfg_fn(args):
        seen["cfg"] = args
        return args["uncond"]  # noise-space: result = x - uncond_noise = uncond_denoised

    def pre(args):
        seen["pre"] = True
        return args["conds_out"]

    def post(args):
        seen["post"] = args["denoised"]
        return args["denoised"] * 2

    opts = {"sampler_cfg_function": cfg_fn, "sampler_pre_cfg_function": [pre], "sampler_post_cfg_function": [post]}
    out = run(FakeModel(), cond(1.0), cond(-1.0), 7.0, X, model_options=opts)
    u = ideal(X, 2.0, -1.0)
    torch.testing.assert_close(seen["post"], u)
    torch.testing.assert_close(out, 2 * u)
    assert seen["pre"] and seen["cfg"]["cond_scale"] == 7.0
    torch.testing.assert_close(seen["cfg"]["cond_denoised"], ideal(X, 2.0, 1.0))


def test_model_function_wrapper_is_called_with_comfyui_args() -> None:
    seen = []

    def wrapper(apply_model, args):
        seen.append(sorted(args))
        assert set(args["c"]) >= {"c_crossattn", "transformer_options"}
        return apply_model(args["input"], args["timestep"], **args["c"])

    out = run(FakeModel(), cond(1.0), cond(-1.0), 3.0, X, model_options={"model_function_wrapper": wrapper})
    assert seen == [["c", "cond_or_uncond", "input", "timestep"]]
    c, u = ideal(X, 2.0, 1.0), ideal(X, 2.0, -1.0)
    torch.testing.assert_close(out, u + (c - u) * 3.0)


def test_denoise_mask_keeps_the_unmasked_latent() -> None:
    m = FakeModel()
    p = prepared(m, cond(1.0), cond(0.0), X)
    latent = torch.full_like(X, 0.7)
    den = denoiser(m, p, 1.0, latent_image=latent, noise=torch.zeros_like(X))
    mask = torch.zeros_like(X)
    mask[:, :, :, :8] = 1.0
    out = den(X, torch.full((2,), 2.0), denoise_mask=mask)
    torch.testing.assert_close(out[:, :, :, 8:], latent[:, :, :, 8:])
    torch.testing.assert_close(out[:, :, :, :8], ideal(X, 2.0, 1.0)[:, :, :, :8])


def test_a_model_that_keeps_the_unmasked_latent_clean_is_asked_as_in_comfyui() -> None:
    # ComfyUI's KSamplerX0Inpaint sets the kept region to `model.scale_latent_inpaint(...)` (Wan 2.2
    # TI2V keeps its first frame clean); the model's input there is the latent, not re-noised.
    class CleanKeeping(FakeModel):
        def scale_latent_inpaint(self, x, sigma, noise, latent_image, **kwargs):
            return latent_image

    m = CleanKeeping()
    p = prepared(m, cond(1.0), cond(0.0), X)
    latent = torch.full_like(X, 0.7)
    seen = []
    den = denoiser(m, p, 1.0, latent_image=latent, noise=torch.ones_like(X),
                   model_options={"model_function_wrapper": lambda f, a: seen.append(a["input"]) or f(a["input"], a["timestep"], **a["c"])})
    mask = torch.zeros_like(X)
    mask[:, :, :, :8] = 1.0
    den(X, torch.full((2,), 2.0), denoise_mask=mask, model_options=den.inner_model.model_options)
    assert torch.equal(seen[0][:, :, :, 8:], latent[:, :, :, 8:])  # clean, not latent + 2 * noise


def test_bad_conditioning_raises_typed_errors() -> None:
    with pytest.raises(ConditioningError, match="positive"):
        convert_cond("not a list", "positive")
    with pytest.raises(ConditioningError, match=r"negative\[0\]"):
        convert_cond([torch.zeros(1, 77, 8)], "negative")
    with pytest.raises(ConditioningError, match="tokens"):
        convert_cond([[torch.zeros(77, 8), {}]], "positive")
    with pytest.raises(ConditioningError, match="area"):
        prepared(FakeModel(), cond(1.0, area=(1, 2)), cond(0.0), X)


def test_calc_cond_batch_function_replaces_the_batching() -> None:
    seen = {}

    def custom(args):
        seen.update(args)
        x = args["input"]
        return [torch.full_like(x, 2.0), torch.full_like(x, 1.0)]

    m = FakeModel()
    out = run(m, cond(1.0), cond(-1.0), 3.0, X, model_options={"sampler_calc_cond_batch_function": custom})
    torch.testing.assert_close(out, torch.full_like(X, 1.0 + 3.0))
    assert m.calls == [] and set(seen) == {"model", "conds", "input", "sigma", "model_options"}
