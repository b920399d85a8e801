"""HunyuanVideo 1.5's text path (comfy_core/families/hunyuan_video15/clip.py): DualCLIPLoader type
"hunyuan_video_15" over a Qwen2.5-VL file and a ByT5 file, ComfyUI's template and hidden layer, the
dropped system turn, and ByT5 states of the quoted text as `conditioning_byt5small`."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.hunyuan_video15.clip import HV15_TEMPLATE, glyph_text
from comfy_core.text_encoders.byt5_tokenizer import ByT5Tokenizer
from tests.fixtures.hv15_files import write_byt5, write_qwen25vl_text_only


def test_glyph_text_takes_every_quote_in_comfyuis_order():
    assert glyph_text('a "red" sign, ‘左’ and “右” and "blue"') == 'Text "red". Text "blue". Text "左". Text "右". '
    assert glyph_text("no quotes") == ""


def test_byt5_tokens_are_bytes_then_end():
    tokens = ByT5Tokenizer().tokenize_with_weights("A é")
    assert tokens == [[(68, 1.0), (35, 1.0), (198, 1.0), (172, 1.0), (1, 1.0)]]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders

    folder = tmp_path_factory.mktemp("hv15_text")
    qwen = write_qwen25vl_text_only(folder / "qwen_2.5_vl_7b.safetensors")
    byt5 = write_byt5(folder / "byt5_small_glyphxl_fp16.safetensors")
    return load_text_encoders([str(qwen), str(byt5)], clip_type="hunyuan_video_15")


def test_the_template_the_hidden_layer_and_the_dropped_system_turn(clip):
    tokens = clip.tokenize("a cat")
    assert set(tokens) == {"qwen25_7b"}  # no quotes: no ByT5 tokens
    ids = [pair[0] for pair in tokens["qwen25_7b"][0]]
    assert clip.tokenizer.decode(ids, skip_special_tokens=False) == HV15_TEMPLATE.format("a cat")
    out = clip.encode_from_tokens(tokens, return_dict=True)
    tower = clip.cond_stage_model.qwen25_7b
    with torch.no_grad():
        states = tower.encode_token_weights(tokens["qwen25_7b"])[0]  # its set options: layer -3, no norm
    starts = [i for i, t in enumerate(ids) if t == 151644]  # <|im_start|>
    assert tower.options.layer_idx == -3 and not tower.options.layer_norm_hidden
    assert torch.allclose(out["cond"], states[:, starts[1] + 3:], atol=1e-5)  # after "<|im_start|>user\n"
    assert out["pooled_output"] is None and "conditioning_byt5small" not in out
    assert clip.encode_from_tokens(clip.tokenize(""), return_dict=True)["cond"].shape[1] > 0  # "" becomes " "


def test_quoted_text_goes_through_byt5(clip):
    tokens = clip.tokenize('a sign saying "OPEN"')
    glyph = [pair[0] for pair in tokens["byt5"][0]]
    assert glyph == [b + 3 for b in b'Text "OPEN". '] + [1]
    out = clip.encode_from_tokens(tokens, return_dict=True)
    with torch.no_grad():
        want = clip.cond_stage_model.t5xxl.encode_token_weights(tokens["byt5"])[0]
    assert out["conditioning_byt5small"].shape == (1, len(glyph), 32)
    assert torch.allclose(out["conditioning_byt5small"], want)
