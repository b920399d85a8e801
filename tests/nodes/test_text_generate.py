"""TextGenerate (ComfyUI's comfy_extras/nodes_textgen.py, 2026) on a tiny Qwen3 file loaded by
CLIPLoader type "lumina2": the prompt in Z-Image's chat template, greedy text equal to the tower's
own greedy ids decoded, seeded sampling reproducible per seed, the reasoning split, the dynamic
`sampling_mode` inputs as the editor sends them, and clear node errors for a CLIP that cannot
generate, media given to a text-only encoder and unusable sampling options."""
from __future__ import annotations

import pytest
import torch

from comfy_core.split.text_encoder_files import load_text_encoders
from comfy_core.text_encoders.generate import SamplingOptions, generate_tokens
from graph.context import NodeContext, reset_current, set_current
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.text_generate import split_reasoning, text_generate
from tests.fixtures.clips import one_thread, sd1  # noqa: F401  (module-wide one-thread torch; CLIP-L)
from tests.fixtures.qwen3_files import tiny_qwen3_state_dict, write_qwen3_file
from tests.nodes.workflow_2026 import Runner, node

PROMPT = "a red fox in the snow"
TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
OFF = {"sampling_mode": "off"}


def _on(seed: int, **overrides) -> dict:
    return {"sampling_mode": "on", "temperature": 0.7, "top_k": 64, "top_p": 0.95, "min_p": 0.05,
            "repetition_penalty": 1.05, "seed": seed, **overrides}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("textgen")
    write_qwen3_file(root / "models" / "text_encoders" / "qwen_3_4b.safetensors", tiny_qwen3_state_dict(seed=11))
    return root


@pytest.fixture(scope="module")
def clip(models):
    return load_text_encoders([models / "models" / "text_encoders" / "qwen_3_4b.safetensors"], "lumina2")


@pytest.fixture
def progress(models):
    reports = []
    environment = Environment.rooted_at(models, mmap=False)
    token = set_current(NodeContext("p", "7", "7", None, environment, report=lambda v, m, p: reports.append((v, m))))
    yield reports
    reset_current(token)


def _tower_greedy(clip, n):
    ids = clip.tokenizer.qwen3_4b.encode(TEMPLATE.format(PROMPT))
    tower = clip.cond_stage_model.qwen3_4b
    with torch.no_grad():
        return generate_tokens(tower, tower.embed_ids(torch.tensor([ids])), n, SamplingOptions(do_sample=False),
                               stop_tokens=tower.stop_tokens)


def test_greedy_text_is_the_towers_greedy_ids_decoded(clip, progress):
    expected = _tower_greedy(clip, 6)
    text, reasoning = text_generate(clip, PROMPT, 6, OFF)
    assert (text, reasoning) == split_reasoning(clip.tokenizer.decode(expected, skip_special_tokens=True))
    assert progress == [(i, 6) for i in range(1, len(expected) + 1)]  # one report per generated token


def test_sampling_is_reproducible_per_seed(clip, progress):
    # A flat distribution (the tiny random model's is peaked at the widgets' defaults).
    flat = dict(temperature=2.0, top_p=1.0, min_p=0.0)
    first = text_generate(clip, PROMPT, 8, _on(3, **flat))
    assert text_generate(clip, PROMPT, 8, _on(3, **flat)) == first
    assert text_generate(clip, PROMPT, 8, _on(4, **flat)) != first


def test_comfyuis_clip_generate_and_decode(clip):
    tokens = clip.tokenize(PROMPT, min_length=1)
    ids = clip.generate(tokens, do_sample=False, max_length=5)
    assert ids == _tower_greedy(clip, 5)
    assert clip.decode(ids) == clip.tokenizer.qwen3_4b.decode(ids, skip_special_tokens=True)
    sampled = clip.generate(tokens, max_length=5, seed=9, temperature=2.0)
    assert sampled == clip.generate(tokens, max_length=5, seed=9, temperature=2.0)


@pytest.mark.parametrize("generated, split", [
    ("a fox", ("a fox", "")),
    ("<think>\nplan the fox\n</think>\n\nA red fox.", ("A red fox.", "plan the fox")),
    ("plan</think>answer", ("answer", "plan")),  # the prompt ended with <think>
    ("<think> cut short by max_length", ("", "cut short by max_length")),
    ("  no close, not opened <think> here ", ("no close, not opened <think> here", "")),
])
def test_the_reasoning_split(generated, split):
    assert split_reasoning(generated) == split


def test_a_clip_that_cannot_generate_is_a_node_error(sd1, progress):
    with pytest.raises(NodeInputError, match="input 'clip'.*cannot generate text") as caught:
        text_generate(sd1, PROMPT, 4, OFF)
    assert caught.value.node_id == "7"


def test_media_for_a_text_only_encoder_are_refused(clip, progress):
    with pytest.raises(NodeInputError, match="input 'image'.*reads text only"):
        text_generate(clip, PROMPT, 4, OFF, image=torch.zeros(1, 8, 8, 3))
    with pytest.raises(NodeInputError, match="input 'audio'"):
        text_generate(clip, PROMPT, 4, OFF, audio={"waveform": torch.zeros(1, 1, 8), "sample_rate": 8})


def test_unusable_sampling_options_are_node_errors(clip, progress):
    with pytest.raises(NodeInputError, match="input 'sampling_mode'.*repetition_penalty"):
        text_generate(clip, PROMPT, 4, _on(1, repetition_penalty=0.0))  # the widget allows 0
    with pytest.raises(NodeInputError, match="input 'max_length'"):
        text_generate(clip, PROMPT, 0, OFF)
    with pytest.raises(NodeInputError, match="input 'mtp'"):
        text_generate(clip, PROMPT, 4, OFF, mtp="7")


async def test_a_workflow_as_the_editor_sends_it(models, clip):
    runner = Runner(models)
    sampling = {"sampling_mode": "on", **{f"sampling_mode.{k}": v for k, v in _on(5).items() if k != "sampling_mode"}}
    prompt = {"c": node("CLIPLoader", clip_name="qwen_3_4b.safetensors", type="lumina2", device="default"),
              "g": node("TextGenerate", clip=["c", 0], prompt=PROMPT, max_length=5, thinking=False,
                        use_default_template=True, mtp="auto", **sampling),
              "o": node("PreviewAny", source=["g", 0]),
              "off": node("TextGenerate", clip=["c", 0], prompt=PROMPT, max_length=5, sampling_mode="off"),
              "o2": node("PreviewAny", source=["off", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    expected_on = text_generate(clip, PROMPT, 5, _on(5))[0]
    expected_off = split_reasoning(clip.tokenizer.decode(_tower_greedy(clip, 5)))[0]
    assert out.ui_outputs["o"] == {"text": [expected_on]} and out.ui_outputs["o2"] == {"text": [expected_off]}


async def test_the_chosen_options_widgets_are_required(models):
    runner = Runner(models)
    prompt = {"c": node("CLIPLoader", clip_name="qwen_3_4b.safetensors", type="lumina2", device="default"),
              "g": node("TextGenerate", clip=["c", 0], prompt=PROMPT, max_length=5, sampling_mode="on",
                        **{"sampling_mode.temperature": 0.7}),
              "o": node("PreviewAny", source=["g", 0])}
    out = await runner.run(prompt)
    assert out.status == "error" and "sampling_mode.top_k" in out.error["exception_message"]
