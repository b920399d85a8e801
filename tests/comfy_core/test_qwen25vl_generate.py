"""Text generation with the Qwen2.5-VL tower (ComfyUI's `Qwen25_7BVLIModel.generate`, TextGenerate
with an image): greedy tokens equal a greedy loop over transformers' `Qwen2_5_VLForConditionalGeneration`
on the same tiny weights (its own M-RoPE index for the image, full recompute each step), with
and without an image; the file's LM head is used; padded prompts are refused; the TextGenerate
node takes an image for this encoder."""
from __future__ import annotations

import pytest
import torch

from comfy_core.text_encoders.generate import GenerationError, SamplingOptions, generate_tokens
from comfy_core.text_encoders.qwen25vl import Qwen25VLConfig
from comfy_core.text_encoders.qwen25vl_load import build_qwen25vl_encoder
from comfy_core.text_encoders.qwen25vl_vision import preprocess_image
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.qwen25vl_files import reference_model, tiny_qwen25vl_state_dict

IMAGE_PAD = 151655
PROMPT_HEAD = [151644, 872, 198, 151652]  # <|im_start|>user\n<|vision_start|>
PROMPT_TAIL = [151653, 64, 6548, 315, 264, 8251, 151645, 198, 151644, 77091, 198]  # <|vision_end|>... assistant\n
STEPS = 6


@pytest.fixture(scope="module")
def state():
    state = tiny_qwen25vl_state_dict()
    torch.manual_seed(11)
    state["lm_head.weight"] = 0.05 * torch.randn(state["model.embed_tokens.weight"].shape)
    return state


@pytest.fixture(scope="module")
def tower(state):
    return build_qwen25vl_encoder(Qwen25VLConfig.detect_from_weights(state, ""), state)


@pytest.fixture(scope="module")
def reference(state):
    model = reference_model({k: v for k, v in state.items() if k != "lm_head.weight"})
    model.lm_head.weight.data.copy_(state["lm_head.weight"])
    return model


def _options() -> SamplingOptions:
    return SamplingOptions(do_sample=False)  # greedy, as TextGenerate's sampling_mode "off"


def _reference_greedy(reference, ids: torch.Tensor, **vision) -> list[int]:
    out = []
    with torch.no_grad():
        for _ in range(STEPS):
            extra = {"mm_token_type_ids": (ids == IMAGE_PAD).int()} if vision else {}  # its M-RoPE index needs it
            logits = reference(input_ids=ids, **vision, **extra).logits[:, -1]
            token = int(logits.argmax(-1))
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


def test_greedy_text_generation_matches_transformers(tower, reference):
    row = [151644, 872, 198, 64, 6548, 315, 264, 8251, 151645, 198, 151644, 77091, 198]
    embeds, positions = tower.prompt_inputs(row)
    assert positions is None
    ours = generate_tokens(tower, embeds, STEPS, _options())
    assert ours == _reference_greedy(reference, torch.tensor([row]))


def test_greedy_generation_with_an_image_matches_transformers_rope_index(tower, reference):
    image = torch.rand(1, 56, 56, 3, generator=torch.Generator().manual_seed(3))
    row = PROMPT_HEAD + [{"type": "image", "data": image}] + PROMPT_TAIL
    embeds, positions = tower.prompt_inputs(row)
    patches, grid = preprocess_image(image, tower.config.vision)
    count = int(grid.prod()) // 4  # merged 2x2 patches
    assert positions.shape == (3, len(row) - 1 + count) and embeds.shape[1] == positions.shape[1]
    ours = generate_tokens(tower, embeds, STEPS, _options(), positions=positions)
    ids = torch.tensor([PROMPT_HEAD + [IMAGE_PAD] * count + PROMPT_TAIL])
    theirs = _reference_greedy(reference, ids, pixel_values=patches, image_grid_thw=grid)
    assert ours == theirs
    # The M-RoPE positions matter: ordinary positions give other logits.
    cache = tower.new_cache(1, embeds.shape[1])
    plain = tower.logits(tower.decode_step(embeds, cache))
    cache = tower.new_cache(1, embeds.shape[1])
    assert not torch.allclose(plain, tower.logits(tower.decode_step(embeds, cache, positions)), atol=1e-4)


def test_padded_prompts_are_refused(tower):
    with pytest.raises(GenerationError, match="padded"):
        tower.prompt_inputs([151644, 872, 198, 64, 151643, 151643])


def test_textgenerate_takes_an_image_for_qwen25vl(tmp_path, state):
    from comfy_core.split.text_encoder_files import load_text_encoders
    from nodes.text_generate import text_generate
    from tests.fixtures.qwen25vl_files import write_qwen25vl_file

    path = write_qwen25vl_file(tmp_path / "qwen_2.5_vl_7b.safetensors", state, dtype=torch.float32)
    clip = load_text_encoders([path], "qwen_image")
    image = torch.rand(1, 56, 56, 3)
    text, _thinking = text_generate(clip, "what is this?", 4, {"sampling_mode": "off"}, image=image)
    assert isinstance(text, str)
    with pytest.raises(Exception, match="video"):
        text_generate(clip, "what is this?", 4, {"sampling_mode": "off"}, video=image)
