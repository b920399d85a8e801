"""Qwen3-VL text-encoder files through CLIPLoader (comfy_core/split/text_encoder_files.py): ComfyUI's
int8 ConvRot files kept int8 and equal to their dequantised weights, type "qwen_image" building
Qwen-Image 2.1's set (comfy_core/families/qwen_image21/clip.py: its chat template as token ids, the
system turn and vision tokens dropped, `image_slots`), TextEncodeQwenImage21 on it, and type "flux3"
building FLUX 3's (comfy_core/families/flux3/clip.py) against transformers on diffusers' recipe."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.flux3.clip import FLUX3_LAYERS, PAD_MULTIPLE
from comfy_core.families.qwen_image.qwen21 import SYSTEM_TURN
from comfy_core.models.quant_linear import QuantizedLinear
from comfy_core.split.clip_types import CLIP_LOADER_TYPES
from comfy_core.split.text_encoder_files import ClipFilesError, load_text_encoders
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen3vl import Qwen3VLConfig, build_qwen3vl_encoder
from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer
from nodes.loaders import CLIP_LOADER_TYPES as NODE_CLIP_TYPES
from nodes.qwen_image_nodes import text_encode_qwen_image21
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen3vl_files import (FLUX3_LAYERS as FLUX3_DEPTH, TEXT_WIDTH, dequantized_state,
                                          int8_convrot_state, reference_model, tiny_qwen3vl_state_dict,
                                          write_tiny_qwen3vl)
from tests.fixtures.t5_files import header_of

IM_START, IM_END, SYSTEM, USER, NEWLINE, PAD = 151644, 151645, 8948, 872, 198, 151643


@pytest.fixture(scope="module")
def state():
    return tiny_qwen3vl_state_dict(seed=7)


@pytest.fixture(scope="module")
def files(tmp_path_factory, state):
    root = tmp_path_factory.mktemp("qwen3vl") / "text_encoders"
    return {"qwen_image": write_tiny_qwen3vl(root / "qwen3vl_8b_int8_convrot.safetensors", int8_convrot=True,
                                             state=state),
            "flux3": write_tiny_qwen3vl(root / "qwen3vl_4b_int8_convrot.safetensors", dtype=torch.float32, seed=8,
                                        layers=FLUX3_DEPTH)}


@pytest.fixture(scope="module")
def clip(files):
    return load_text_encoders([files["qwen_image"]], "qwen_image")


@pytest.fixture(scope="module")
def dequantized(state):
    """The float32 tower of the int8 file's dequantised weights (what the int8 layers must compute)."""
    stored = dequantized_state(int8_convrot_state(state))
    return build_qwen3vl_encoder(Qwen3VLConfig.detect_from_weights(header_of(stored), ""), stored)


def _image(height, width, seed=0):
    return torch.rand(1, height, width, 3, generator=torch.Generator().manual_seed(seed))


def _ids(text: str) -> list[int]:
    return QwenTokenizer("qwen3vl_8b", TEXT_WIDTH).encode(text)


def test_int8_convrot_layers_stay_int8_and_match_the_dequantised_weights(clip, dequantized):
    tower = clip.cond_stage_model.qwen3vl_8b
    model, visual = tower.transformer.model, tower.transformer.visual
    for layer in (model.layers[0].self_attn.q_proj, model.layers[2].mlp.down_proj, visual.blocks[1].attn.qkv,
                  visual.deepstack_merger_list[0].linear_fc1):
        assert isinstance(layer, QuantizedLinear) and layer.weight.dtype == torch.int8 and layer._group == 16
    assert tower.transformer.model.embed_tokens.weight.dtype == torch.bfloat16  # not quantised, as stored
    row = [IM_START, USER, NEWLINE, 151652, {"type": "image", "data": _image(64, 96)}, 151653, 64, 2518, IM_END]
    for rows in ([[IM_START, USER, NEWLINE, 64, 2518, IM_END]], [row]):
        ours, theirs = tower(rows), dequantized(rows)
        torch.testing.assert_close(ours[0], theirs[0], atol=1e-5, rtol=1e-5)


def test_cliploader_qwen_image_with_a_qwen3vl_file_is_qwen_image21s_set(clip, files):
    assert type(clip.cond_stage_model).__name__ == "QwenImage21TEModel"
    assert type(clip.tokenizer).__name__ == "QwenImage21Tokenizer"
    assert "flux3" in CLIP_LOADER_TYPES and list(CLIP_LOADER_TYPES) == NODE_CLIP_TYPES
    with pytest.raises(ClipFilesError, match="Qwen3-VL-8B"):
        load_text_encoders([files["qwen_image"]], "flux2")  # Klein wants a Qwen3 tower


def test_the_prompt_is_qwen_image21s_template_as_token_ids(clip):
    tokens = clip.tokenize("a red fox")
    ids = [pair[0] for pair in tokens["qwen3vl_8b"][0]]
    expected = _ids(SYSTEM_TURN + "<|im_start|>user\na red fox<|im_end|>\n<|im_start|>assistant\n")
    assert ids == expected and tokens["keep_vision"] is False
    assert ids[:3] == [IM_START, SYSTEM, NEWLINE] and ids.count(IM_START) == 3 and PAD not in ids
    system = _ids("Comprehend and analyze the provided prompt.")
    assert ids[3:3 + len(system)] == system and ids[3 + len(system)] == IM_END
    # thinking off: Qwen3's empty thinking block after the opened assistant turn
    unthinking = [pair[0] for pair in clip.tokenize("a red fox", thinking=False)["qwen3vl_8b"][0]]
    assert unthinking == expected + _ids("<think>\n\n</think>\n\n")
    assert [p[0] for p in clip.tokenize("", prevent_empty_text=True)["qwen3vl_8b"][0]] == _ids(
        SYSTEM_TURN + "<|im_start|>user\n <|im_end|>\n<|im_start|>assistant\n")


def test_the_system_turn_is_dropped_from_the_last_blocks_states(clip):
    tokens = clip.tokenize("a red fox")
    out = clip.encode_from_tokens(tokens, return_dict=True)
    ids = [pair[0] for pair in tokens["qwen3vl_8b"][0]]
    start = [i for i, t in enumerate(ids) if t == IM_START][1]
    tower = clip.cond_stage_model.qwen3vl_8b
    full, _, _ = tower([ids])  # layer -1: the last block's output, no final norm
    assert out["cond"].shape == (1, len(ids) - start, TEXT_WIDTH) and out["pooled_output"] is None
    assert "attention_mask" not in out and "image_slots" not in out  # the mask masks nothing: left out
    torch.testing.assert_close(out["cond"], full[:, start:])


def test_reference_images_give_image_slots_unless_the_vision_tokens_stay(clip):
    first, second = _image(64, 96, seed=1), _image(64, 64, seed=2)
    tokens = clip.tokenize("swap them", images=[first, second])
    pairs = tokens["qwen3vl_8b"][0]
    assert [p[0]["data"] for p in pairs if isinstance(p[0], dict)] == [first, second]
    plain = [p[0] for p in pairs if not isinstance(p[0], dict)]
    block = "<|vision_start|><|image_pad|><|vision_end|>"
    text = (SYSTEM_TURN + f"<|im_start|>user\n<image1>{block} <image2>{block}swap them<|im_end|>\n"
            "<|im_start|>assistant\n")
    assert plain == [t for t in _ids(text) if t != 151655]
    tower = clip.cond_stage_model.qwen3vl_8b
    sizes = [tower.image_token_count(first), tower.image_token_count(second)]  # 6 and 4 merged tokens
    full, _, _ = tower([[p[0] for p in pairs]])
    dropped = clip.encode_from_tokens(tokens, return_dict=True)
    kept = clip.encode_from_tokens(clip.tokenize("swap them", images=[first, second], keep_vision=True),
                                   return_dict=True)
    system = [i for i, p in enumerate(pairs) if p[0] == IM_START][1]
    first_at = next(i for i, p in enumerate(pairs) if isinstance(p[0], dict))
    second_at = [i for i, p in enumerate(pairs) if isinstance(p[0], dict)][1] + sizes[0] - 1
    slot1 = first_at - system
    slot2 = second_at - system - sizes[0]
    assert dropped["image_slots"] == [slot1, slot2] and "image_slots" not in kept
    assert kept["cond"].shape[1] == full.shape[1] - system
    assert dropped["cond"].shape[1] == full.shape[1] - system - sum(sizes)
    torch.testing.assert_close(kept["cond"], full[:, system:])
    keep = torch.ones(full.shape[1], dtype=torch.bool)
    keep[:system] = False
    keep[first_at:first_at + sizes[0]] = False
    keep[second_at:second_at + sizes[1]] = False
    torch.testing.assert_close(dropped["cond"], full[:, keep])


class RecordingVAE:
    """A test double with a VAE's surface: records the pixels it encodes, returns a latent of their mean."""

    def __init__(self):
        self.seen = []

    def encode(self, pixels):
        self.seen.append(pixels)
        return torch.full((1, 64, pixels.shape[1] // 16, pixels.shape[2] // 16), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


def test_text_encode_qwen_image21_reads_the_references_through_the_vision_tower(clip):
    image = _image(100, 70, seed=4)
    vae = RecordingVAE()
    positive, negative, latent = text_encode_qwen_image21(clip, "make it blue", "", vae=vae, resolution=64,
                                                          images={"image_1": image})
    assert len(vae.seen) == 1 and vae.seen[0].shape == (1, 64, 64, 3)  # about 64^2 pixels, multiples of 32
    before = len(_ids("<|im_start|>user\n<image1><|vision_start|>"))  # kept before the image: its slot
    assert positive[0][1]["image_slots"] == negative[0][1]["image_slots"] == [before]
    assert len(positive[0][1]["reference_latents"]) == 1 and latent["samples"].shape == (1, 64, 4, 4)
    without_vae, _, _ = text_encode_qwen_image21(clip, "make it blue", "", resolution=64, images={"image_1": image})
    count = clip.cond_stage_model.qwen3vl_8b.image_token_count(vae.seen[0])
    assert "image_slots" not in without_vae[0][1]  # no latents coming: the vision tokens condition the model
    assert without_vae[0][0].shape[1] == positive[0][0].shape[1] + count


@pytest.fixture(scope="module")
def flux3_clip(files):
    return load_text_encoders([files["flux3"]], "flux3")


def test_cliploader_flux3_is_flux3s_set_on_diffusers_recipe(flux3_clip):
    """The prompt in Qwen3-VL's chat template, padded to a multiple of 80, the inputs of blocks 4, 8, ...,
    32 stacked per token: the same as transformers' Qwen3-VL fed diffusers' FLUX 3 inputs (padding
    masked, at position 1)."""
    assert type(flux3_clip.cond_stage_model).__name__ == "Flux3TEModel"
    tokens = flux3_clip.tokenize("a red fox in the snow")
    ids = [pair[0] for pair in tokens["qwen3vl_8b"][0]]
    prompt = _ids("<|im_start|>user\na red fox in the snow<|im_end|>\n<|im_start|>assistant\n")
    assert len(ids) == PAD_MULTIPLE and ids[:len(prompt)] == prompt and set(ids[len(prompt):]) == {PAD}
    cond = flux3_clip.encode_from_tokens(tokens)
    assert cond.shape == (1, PAD_MULTIPLE, len(FLUX3_LAYERS) * TEXT_WIDTH)
    state = tiny_qwen3vl_state_dict(seed=8, layers=FLUX3_DEPTH)
    reference = reference_model(state)
    mask = torch.tensor([[1] * len(prompt) + [0] * (PAD_MULTIPLE - len(prompt))])
    positions = torch.arange(PAD_MULTIPLE)[None].masked_fill(mask == 0, 1)
    with torch.no_grad():
        hidden = reference(input_ids=torch.tensor([ids]), attention_mask=mask, position_ids=positions,
                           output_hidden_states=True).hidden_states
    expected = torch.cat([hidden[k] for k in FLUX3_LAYERS], dim=-1)
    torch.testing.assert_close(cond, expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(TokenizeError, match="text only"):
        flux3_clip.tokenize("a fox", images=[_image(32, 32)])
