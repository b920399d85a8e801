"""Style models (T2I-Adapter style, Flux Redux) against forwards written here on the raw file
tensors, and StyleModelApply's maths (multiply, attention-bias masks) against hand-built results."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from comfy_core.checkpoint.errors import ShapeMismatchError, UnsupportedFormatError
from comfy_core.style_models.apply import apply_style, extended_mask
from comfy_core.style_models.style_model import load_style_model
from tests.fixtures.clip_vision import style_model_state_dict, write_tiny_style_model
from tests.fixtures.clips import one_thread  # noqa: F401 (autouse fixture)


class _Output:
    def __init__(self, tokens: torch.Tensor) -> None:
        self.last_hidden_state = tokens


def _tokens(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _t2i_reference(t: dict, x: torch.Tensor, heads: int = 8) -> torch.Tensor:
    """The T2I style adapter on the raw tensors, sequence-first, as the original code runs it."""
    width = t["style_embedding"].shape[-1]
    tokens = t["style_embedding"].shape[1]
    x = torch.cat([x, t["style_embedding"].expand(x.shape[0], -1, -1)], dim=1)
    x = F.layer_norm(x, (width,), t["ln_pre.weight"], t["ln_pre.bias"]).transpose(0, 1)  # [L, B, W]
    layers = len({k.split(".")[1] for k in t if k.startswith("transformer_layes.")})
    for i in range(layers):
        b = f"transformer_layes.{i}."
        h = F.layer_norm(x, (width,), t[b + "ln_1.weight"], t[b + "ln_1.bias"])
        attn, _ = F.multi_head_attention_forward(
            h, h, h, width, heads, t[b + "attn.in_proj_weight"], t[b + "attn.in_proj_bias"], None, None, False, 0.0,
            t[b + "attn.out_proj.weight"], t[b + "attn.out_proj.bias"], need_weights=False)
        x = x + attn
        h = F.layer_norm(x, (width,), t[b + "ln_2.weight"], t[b + "ln_2.bias"])
        h = F.linear(h, t[b + "mlp.c_fc.weight"], t[b + "mlp.c_fc.bias"])
        x = x + F.linear(h * torch.sigmoid(1.702 * h), t[b + "mlp.c_proj.weight"], t[b + "mlp.c_proj.bias"])
    x = x.transpose(0, 1)[:, -tokens:]
    return F.layer_norm(x, (width,), t["ln_post.weight"], t["ln_post.bias"]) @ t["proj"]


def test_t2i_style_model_matches_the_reference_forward(tmp_path):
    path = write_tiny_style_model(tmp_path / "style.safetensors", "t2i")
    model = load_style_model(path)
    assert model.kind == "t2i_style" and model.model.config.tokens == 8
    x = _tokens(2, 5, 32)
    cond = model.get_cond(_Output(x))
    assert cond.shape == (2, 8, 24)
    assert torch.allclose(cond, _t2i_reference(load_file(str(path)), x), atol=1e-5)


def test_redux_matches_its_formula(tmp_path):
    path = write_tiny_style_model(tmp_path / "redux.safetensors", "redux")
    t = load_file(str(path))
    x = _tokens(1, 4, 32, seed=1)
    expected = F.linear(F.silu(F.linear(x, t["redux_up.weight"], t["redux_up.bias"])),
                        t["redux_down.weight"], t["redux_down.bias"])
    model = load_style_model(path)
    assert model.kind == "redux" and torch.allclose(model.get_cond(_Output(x)), expected, atol=1e-6)


def test_style_model_files_are_checked(tmp_path):
    save_file({"foo": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(UnsupportedFormatError, match="not a style model"):
        load_style_model(tmp_path / "other.safetensors")
    tensors = style_model_state_dict("redux")
    tensors["redux_down.weight"] = torch.zeros(40, 7)
    save_file(tensors, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ShapeMismatchError, match="redux_up"):
        load_style_model(tmp_path / "bad.safetensors")
    model = load_style_model(write_tiny_style_model(tmp_path / "ok.safetensors", "t2i"))
    with pytest.raises(ValueError, match="32 wide, got 16"):
        model.get_cond(_Output(torch.zeros(1, 5, 16)))


# --- StyleModelApply's maths --------------------------------------------------------------------

def test_multiply_scales_the_flattened_tokens_and_appends_them():
    text = _tokens(1, 3, 4)
    cond = _tokens(2, 2, 4, seed=1)  # two images, two tokens each
    options = {"pooled_output": torch.ones(1, 4)}
    out = apply_style([[text, options]], cond, 0.5, "multiply")
    assert len(out) == 1 and out[0][1] == options and out[0][1] is not options
    expected = torch.cat([text, 0.5 * cond.reshape(1, 4, 4)], dim=1)
    assert torch.equal(out[0][0], expected) and "attention_mask" not in out[0][1]


def test_attn_bias_writes_a_mask_with_log_strength_columns():
    text = _tokens(1, 3, 4)
    cond = _tokens(1, 2, 4, seed=1)
    (entry,) = apply_style([[text, {}]], cond, 0.5, "attn_bias")
    assert torch.equal(entry[0], torch.cat([text, cond], dim=1))  # tokens unscaled
    mask = entry[1]["attention_mask"]
    assert mask.dtype == torch.float16 and mask.shape == (1, 6, 6)  # 3 text + 2 style + 1 reference
    bias = torch.tensor(0.5).log().half()
    expected = torch.zeros(1, 6, 6, dtype=torch.float16)
    expected[:, :3, 3:5] = bias  # text rows attend to the style tokens with log(strength)
    expected[:, 5:, 3:5] = bias  # and so does the reference row; the style rows stay 0
    assert torch.equal(mask, expected) and entry[1]["attention_mask_img_shape"] == (1, 1)
    (unit,) = apply_style([[text, {}]], cond, 1.0, "attn_bias")
    assert "attention_mask" not in unit[1]  # log(1) = 0: no mask needed
    (zero,) = apply_style([[text, {}]], cond, 0.0, "attn_bias")
    assert torch.isneginf(zero[1]["attention_mask"][0, 0, 3])


def test_an_existing_mask_is_kept_in_its_quadrants():
    n_txt, n_ref, n_style = 2, 6, 3
    old = torch.rand(1, n_txt + n_ref, n_txt + n_ref, generator=torch.Generator().manual_seed(2)) > 0.5
    new = extended_mask(old, 1, n_txt, n_style, n_ref, torch.tensor([0.0]))
    as_bias = torch.log(old.half())
    s = n_txt + n_style
    assert torch.equal(new[:, :n_txt, :n_txt], as_bias[:, :n_txt, :n_txt])
    assert torch.equal(new[:, :n_txt, s:], as_bias[:, :n_txt, n_txt:])
    assert torch.equal(new[:, s:, :n_txt], as_bias[:, n_txt:, :n_txt])
    assert torch.equal(new[:, s:, s:], as_bias[:, n_txt:, n_txt:])
    assert torch.equal(new[:, n_txt:s], torch.zeros(1, n_style, s + n_ref, dtype=torch.float16))
    # multiply also enlarges a mask it finds, with a zero bias, keeping the reference shape.
    text = _tokens(1, n_txt, 4)
    options = {"attention_mask": old, "attention_mask_img_shape": (2, 3)}
    (entry,) = apply_style([[text, options]], _tokens(1, n_style, 4), 2.0, "multiply")
    assert torch.equal(entry[1]["attention_mask"], new) and entry[1]["attention_mask_img_shape"] == (2, 3)
    assert options["attention_mask"] is old  # the input entry is unchanged
