"""ACE-Step 1.5's text side: ComfyUI's prompt formats, the encoder set's outputs against transformers'
Qwen3 (caption states, lyric embeddings), the LM's audio codes against a plain recomputing loop over
transformers' model, the sampling filters, and DualCLIPLoader type "ace" on reduced files."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.families.ace_step15.clip import TEXT_TEMPLATE, metas_caption, metas_think
from comfy_core.families.ace_step15.lm_codes import (AUDIO_END, AUDIO_START, EOS, PAD, choose_code, filter_scores,
                                                     generate_audio_codes)
from comfy_core.text_encoders.generate import GenerationError
from tests.fixtures.ace_step_files import LM_TOWER, TEXT_TOWER, tiny_lm_state_dict, tiny_text_state_dict, \
    write_safetensors


@pytest.fixture(scope="module")
def states() -> tuple[dict, dict]:
    return tiny_text_state_dict(), tiny_lm_state_dict()


@pytest.fixture(scope="module")
def clip(states, tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders

    folder = tmp_path_factory.mktemp("ace_text")
    text = write_safetensors(folder / "qwen_0.6b_ace15.safetensors", states[0])
    lm = write_safetensors(folder / "qwen_4b_ace15.safetensors", states[1])
    return load_text_encoders([text, lm], "ace")


def test_metas_are_written_as_comfyui_writes_them():
    assert metas_think({"bpm": 190, "duration": 120, "timesignature": "4", "keyscale": "E minor"}) == \
        "<think>\nbpm: 190\nduration: 120\nkeyscale: E minor\ntimesignature: 4\n</think>"
    assert metas_think({"timesignature": "3/4", "bpm": "unspecified", "lyrics": "x"}) == "<think>\ntimesignature: 3\n</think>"
    assert metas_think({}) == "<think>\n\n</think>"
    assert metas_caption({"bpm": 90, "duration": 10.2, "keyscale": "C major", "timesignature": 4}) == \
        "- bpm: 90\n- timesignature: 4\n- keyscale: C major\n- duration: 11 seconds"
    assert metas_caption({}) == "- bpm: N/A\n- timesignature: N/A\n- keyscale: N/A\n- duration: 30 seconds"


def test_tokenizer_makes_the_four_prompts(clip):
    tokens = clip.tokenize(" soft piano ", lyrics="[verse]\nla", bpm=100, duration=2.2, timesignature=3,
                           language="en", keyscale="A minor", seed=7, cfg_scale=1.5)
    assert set(tokens) == {"lm_prompt", "lm_prompt_negative", "lyrics", "qwen3_06b", "lm_metadata"}
    qwen = clip.tokenizer.qwen3_06b
    ids = lambda key: [pair[0] for chunk in tokens[key] for pair in chunk]  # noqa: E731
    want = lambda text: [pair[0] for chunk in qwen.tokenize_with_weights(text, disable_weights=True) for pair in chunk]  # noqa: E731
    assert ids("qwen3_06b") == want(TEXT_TEMPLATE.format(
        "soft piano", "- bpm: 100\n- timesignature: 3\n- keyscale: A minor\n- duration: 3 seconds"))
    assert ids("lyrics") == want("# Languages\nen\n\n# Lyric\n[verse]\nla<|endoftext|><|endoftext|>")
    think = "<think>\nbpm: 100\nduration: 3\nkeyscale: A minor\ntimesignature: 3\n</think>"
    head = ("<|im_start|>system\n# Instruction\nGenerate audio semantic tokens based on the given conditions:\n\n"
            "<|im_end|>\n<|im_start|>user\n# Caption\nsoft piano\n\n# Lyric\n[verse]\nla\n<|im_end|>\n"
            "<|im_start|>assistant\n")
    assert ids("lm_prompt") == want(f"{head}{think}\n\n<|im_end|>\n")
    assert ids("lm_prompt_negative") == want(f"{head}<think>\n\n</think>\n\n<|im_end|>\n")
    assert tokens["lm_metadata"] == {"min_tokens": 15, "max_tokens": 15, "seed": 7, "generate_audio_codes": True,
                                     "cfg_scale": 1.5, "temperature": 0.85, "top_p": 0.9, "top_k": 0.0,
                                     "min_p": 0.0}


def test_set_outputs_match_transformers_qwen3(clip, states):
    from tests.fixtures.qwen3_files import reference_model

    tokens = clip.tokenize("bright synth pop", lyrics="[chorus]\nhey", duration=1, generate_audio_codes=False)
    cond = clip.encode_from_tokens_scheduled(tokens)
    states_out, extra = cond[0]
    assert "audio_codes" not in extra and extra["pooled_output"] is None
    reference = reference_model(states[0], **TEXT_TOWER)
    ids = torch.tensor([[pair[0] for pair in tokens["qwen3_06b"][0]]])
    mask = (torch.arange(ids.shape[1]) < int((ids[0] == PAD).nonzero()[0])).long()[None]  # up to the first pad
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        lyric_ids = torch.tensor([[pair[0] for pair in tokens["lyrics"][0]]])
        want_lyrics = reference.embed_tokens(lyric_ids)
    torch.testing.assert_close(states_out, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(extra["conditioning_lyrics"], want_lyrics)


def _reference_codes(model, prompt, negative, steps, seed, cfg, temperature, top_p):
    """ComfyUI's loop recomputed in full at every step on transformers' Qwen3 (no cache)."""
    longest = max(len(prompt), len(negative))
    rows = [[PAD] * (longest - len(r)) + list(r) for r in (prompt, negative)]
    mask = torch.tensor([[0 if (t == PAD and all(x == PAD for x in r[:i + 1])) else 1 for i, t in enumerate(r)]
                         for r in rows])
    generator = torch.Generator().manual_seed(seed)
    table = model.embed_tokens.weight
    codes, ids = [], torch.tensor(rows)
    for _ in range(steps):
        with torch.no_grad():
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1]
        scores = hidden @ table[AUDIO_START:AUDIO_END].T
        token = choose_code(scores, None, cfg, temperature, 0, 0.0, top_p, table.shape[0], generator)
        codes.append(token - AUDIO_START)
        ids = torch.cat([ids, torch.full((2, 1), token)], dim=1)
        mask = torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
    return codes


def test_audio_codes_match_a_recomputing_reference_loop(clip, states):
    from tests.fixtures.qwen3_files import reference_model

    lm = clip.cond_stage_model.encoder("qwen3_4b")
    prompt, negative = [151644, 872, 198, 100, 101, 102, 103], [151644, 872, 198, 104]
    got = generate_audio_codes(lm, prompt, negative, min_tokens=6, max_tokens=6, seed=11, cfg_scale=2.0,
                               temperature=0.85, top_p=0.9)
    reference = reference_model(states[1], **LM_TOWER)
    assert got == _reference_codes(reference, prompt, negative, 6, 11, 2.0, 0.85, 0.9)
    assert len(got) == 6 and all(0 <= c < AUDIO_END - AUDIO_START for c in got)
    again = generate_audio_codes(lm, prompt, negative, min_tokens=6, max_tokens=6, seed=11)
    assert again == got
    assert generate_audio_codes(lm, prompt, negative, min_tokens=6, max_tokens=6, seed=12) != got
    text_tower = clip.cond_stage_model.encoder("qwen3_06b")
    with pytest.raises(GenerationError, match="vocabulary"):
        generate_audio_codes(text_tower, prompt, negative, min_tokens=1, max_tokens=1, seed=0)


def test_encode_writes_duration_times_five_codes(clip):
    tokens = clip.tokenize("jazz", lyrics="", duration=0.9, seed=3, cfg_scale=1.0)
    extra = clip.encode_from_tokens_scheduled(tokens)[0][1]
    assert len(extra["audio_codes"]) == 1 and len(extra["audio_codes"][0]) == 5


def test_filters_follow_comfyuis_order_and_rules():
    low = torch.finfo(torch.float32).min
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = filter_scores(scores, top_k=0, min_p=0.0, top_p=0.6)  # 0.5 alone is below 0.6: 0.3 crosses it, kept
    assert (kept > low).tolist() == [[True, True, False, False]]
    assert (filter_scores(scores, 3, 0.0, 1.0) > low).tolist() == [[True, True, True, False]]
    assert (filter_scores(scores, 0, 0.5, 1.0) > low).tolist() == [[True, True, False, False]]  # p >= 0.25


def test_greedy_choice_and_end_token():
    codes = torch.tensor([[0.0, 3.0, 1.0], [0.0, 1.0, 2.0]])
    # guided: uncond + 2 (cond - uncond) = [0, 5, 0]: code 1
    assert choose_code(codes, None, 2.0, 0.0, 0, 0.0, 1.0, AUDIO_END, None) == AUDIO_START + 1
    eos = torch.tensor([9.0, 0.0])  # guided end score 18 beats every code
    assert choose_code(codes, eos, 2.0, 0.0, 0, 0.0, 1.0, AUDIO_END, None) == EOS
    assert choose_code(codes[:1], None, 1.0, 0.0, 0, 0.0, 1.0, AUDIO_END, None) == AUDIO_START + 1
