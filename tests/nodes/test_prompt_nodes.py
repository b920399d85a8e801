"""CLIPTextEncodeWeighted (+SDXL), ApplyEmbedding: node behaviour, validation, registration, and
prompt editing / alternation switching at webui's steps inside the KSampler node (reference 0.6,
1.3): a model-function wrapper records which positive conditioning each model call received."""
from contextlib import contextmanager

import pytest
import safetensors.torch
import torch

from comfy_core.loading import load_checkpoint
from comfy_core.prompt.conditioning import PromptOptions, encode_prompt, registered_embeddings
from comfy_core.prompt.errors import EmbeddingWidthError
from tests.fixtures.clips import one_thread, sd1, sdxl  # noqa: F401 -- fixtures
from graph.context import NodeContext, reset_current, set_current
from graph.native import spec_of
from graph.registry import Registry
import nodes.prompt as prompt_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from nodes.sampling import ksampler


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path / "base")
    environment.ensure_dirs()
    (tmp_path / "base" / "models" / "embeddings").mkdir(parents=True)
    return environment


def embeddings_dir(env):
    return env.folders.paths("embeddings")[0]


@contextmanager
def running_in(env):
    token = set_current(NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env))
    try:
        yield
    finally:
        reset_current(token)


def test_encode_node_matches_library(sd1, env):
    with running_in(env):
        (cond,) = prompt_nodes.clip_text_encode_weighted("a [cat:dog:3] AND tree:0.5", sd1, steps=10,
                                                         scheduler="karras")
    expected = encode_prompt(sd1, "a [cat:dog:3] AND tree:0.5", PromptOptions(steps=10, scheduler="karras"))
    assert len(cond) == len(expected) == 3
    for (c, m), (e, em) in zip(cond, expected):
        assert torch.allclose(c, e)
        assert {k: v for k, v in m.items() if k != "pooled_output"} == \
               {k: v for k, v in em.items() if k != "pooled_output"}


def test_folder_embeddings_match_by_name_as_webui(sd1, env):
    safetensors.torch.save_file({"emb_params": torch.randn(2, 64)}, str(embeddings_dir(env) / "Fancy.safetensors"))
    safetensors.torch.save_file({"emb_params": torch.randn(2, 768)}, str(embeddings_dir(env) / "sd15.safetensors"))
    with running_in(env):
        (with_folder,) = prompt_nodes.clip_text_encode_weighted("a fancy cat", sd1)
        (without,) = prompt_nodes.clip_text_encode_weighted("a fancy cat", sd1, folder_embeddings=False)
        (explicit,) = prompt_nodes.clip_text_encode_weighted("a embedding:Fancy cat", sd1, folder_embeddings=False)
    assert not torch.allclose(with_folder[0][0], without[0][0])
    assert torch.allclose(with_folder[0][0], explicit[0][0], atol=1e-6)


def test_apply_embedding_returns_clone_with_embedding(sd1, env):
    torch.save({"string_to_param": {"*": torch.randn(1, 64)}}, embeddings_dir(env) / "mine.pt")
    with running_in(env):
        (clip,) = prompt_nodes.apply_embedding(sd1, "mine.pt", "sks-token")
        (cond,) = prompt_nodes.clip_text_encode_weighted("a sks-token", clip, folder_embeddings=False)
        (plain,) = prompt_nodes.clip_text_encode_weighted("a sks-token", sd1, folder_embeddings=False)
    assert clip is not sd1 and registered_embeddings(sd1) == ()
    assert [e.name for e in registered_embeddings(clip)] == ["sks-token"]
    assert not torch.allclose(cond[0][0], plain[0][0])


def test_apply_embedding_errors_name_file_and_widths(sd1, env):
    torch.save({"string_to_param": {"*": torch.randn(1, 1024)}}, embeddings_dir(env) / "sd2style.pt")
    with running_in(env):
        with pytest.raises(EmbeddingWidthError) as info:
            prompt_nodes.apply_embedding(sd1, "sd2style.pt")
        with pytest.raises(NodeInputError, match="missing.pt"):
            prompt_nodes.apply_embedding(sd1, "missing.pt")
    message = str(info.value)
    assert "sd2style.pt" in message and "1024" in message and "64" in message


def test_embedding_combo_lists_folder(env):
    torch.save({"emb": torch.randn(64)}, embeddings_dir(env) / "a.bin")
    assert prompt_nodes.list_embedding_files(env) == ["a.bin"]


def test_sdxl_node_adds_size_conditioning(sdxl, env):
    with running_in(env):
        (cond,) = prompt_nodes.clip_text_encode_weighted_sdxl("a cat", sdxl, width=832, height=1216, crop_w=8,
                                                              crop_h=16, target_width=640, target_height=960)
        (negative,) = prompt_nodes.clip_text_encode_weighted_sdxl("", sdxl, negative=True)
    meta = cond[0][1]
    assert (meta["width"], meta["height"], meta["crop_w"], meta["crop_h"], meta["target_width"],
            meta["target_height"]) == (832, 1216, 8, 16, 640, 960)
    assert meta["pooled_output"].shape == (1, 64) and cond[0][0].shape == (1, 77, 128)
    assert negative[0][0].abs().sum() == 0 and negative[0][1]["pooled_output"].abs().sum() == 0
    assert negative[0][1]["width"] == 1024


def test_sdxl_node_refuses_sd1_clip(sd1, env):
    with running_in(env), pytest.raises(NodeInputError, match="SDXL"):
        prompt_nodes.clip_text_encode_weighted_sdxl("a", sd1)


def test_syntax_error_is_a_validation_message():
    assert prompt_nodes._validate_text("a (b:1.2.3)").startswith("prompt syntax error at character 5")
    assert prompt_nodes._validate_text("a [b:c:3] AND (d:1.2)") is True
    assert prompt_nodes._validate_text("(b:1.2.3)", emphasis="None") is True
    assert prompt_nodes._validate_text(None) is True  # linked text


async def test_validation_reports_custom_error_on_the_node():
    from graph.validation import validate_prompt

    from graph.native import Input, Output, node

    @node("TestClipSource", outputs=[Output("CLIP")])
    def clip_source():
        return (None,)

    @node("TestSink", inputs=[Input("conditioning", "CONDITIONING")], output_node=True)
    def sink(conditioning):
        return ()

    registry = Registry()
    for fn in (prompt_nodes.clip_text_encode_weighted, clip_source, sink):
        registry.add_native(fn)
    prompt = {"1": {"class_type": "CLIPTextEncodeWeighted",
                    "inputs": {"text": "a (b:1.2.3)", "clip": ["2", 0], "emphasis": "Original", "steps": 20,
                               "scheduler": "normal", "negative": False, "comma_backtrack": 20,
                               "folder_embeddings": True}},
              "2": {"class_type": "TestClipSource", "inputs": {}},
              "3": {"class_type": "TestSink", "inputs": {"conditioning": ["1", 0]}}}
    result = await validate_prompt(prompt, registry)
    assert not result.ok
    errors = result.node_errors.get("1", {}).get("errors", []) if isinstance(result.node_errors, dict) else []
    assert any("prompt syntax error" in str(e.get("details", "")) for e in errors), result


def test_registered_specs_render():
    registry = Registry()
    for fn in (prompt_nodes.clip_text_encode_weighted, prompt_nodes.clip_text_encode_weighted_sdxl,
               prompt_nodes.apply_embedding):
        registry.add_native(fn)
    info = registry.object_info()
    required = info["CLIPTextEncodeWeighted"]["input"]["required"]
    assert required["emphasis"][0] == ["Original", "No norm", "Ignore", "None"]
    assert required["steps"][1]["default"] == 20
    assert info["ApplyEmbedding"]["output"] == ["CLIP"]
    assert spec_of(prompt_nodes.clip_text_encode_weighted).behaviour.validate_inputs is not None


def test_is_changed_follows_the_embeddings_folder(env):
    with running_in(env):
        before = prompt_nodes._embeddings_changed(text="a cat", folder_embeddings=True)
        torch.save({"emb": torch.randn(64)}, embeddings_dir(env) / "new.bin")
        after = prompt_nodes._embeddings_changed(text="a cat", folder_embeddings=True)
        unused = prompt_nodes._embeddings_changed(text="a cat", folder_embeddings=False)
    assert before != after and unused == ""


def test_non_clip_input_is_a_clear_error(env):
    with running_in(env), pytest.raises(NodeInputError, match="'clip' expected a CLIP object"):
        prompt_nodes.clip_text_encode_weighted("a", "not a clip")


# --- schedules inside KSampler ----------------------------------------------------------------

@pytest.fixture(scope="module")
def sd1_model_clip(tiny_sd1_ckpt):
    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    return model, clip


def texts_seen(model, positive, negative, steps, scheduler, sampler="euler"):
    """The index of the positive entry used at each model call, in call order."""
    seen = []

    def wrapper(apply_model, args):
        rows = args["c"]["c_crossattn"]
        for row, kind in zip(rows.chunk(len(args["cond_or_uncond"])), args["cond_or_uncond"]):
            if kind == 0:
                matches = [i for i, (cond, _) in enumerate(positive) if torch.equal(row[:1], cond)]
                seen.append(matches)
        return apply_model(args["input"], args["timestep"], **args["c"])

    patched = model.clone()
    patched.model_options["model_function_wrapper"] = wrapper
    ksampler(patched, 0, steps, 5.0, sampler, scheduler, positive, negative, {"samples": torch.zeros(1, 4, 8, 8)})
    return seen


def webui_calls(schedule_ends, steps):
    """webui's entry per call: the first whose end step >= the call counter (from 0)."""
    return [[next(i for i, end in enumerate(schedule_ends) if end >= call)] for call in range(steps)]


@pytest.mark.parametrize("scheduler", ["normal", "karras", "simple"])
def test_prompt_editing_switches_at_webui_step(sd1_model_clip, scheduler):
    model, clip = sd1_model_clip
    options = PromptOptions(steps=8, scheduler=scheduler)
    positive = encode_prompt(clip, "a [cat:dog:3]", options)
    negative = encode_prompt(clip, "", PromptOptions(negative=True))
    assert len(positive) == 2
    assert texts_seen(model, positive, negative, 8, scheduler) == webui_calls([3, 8], 8)  # cat x4, then dog


def test_alternation_switches_every_step(sd1_model_clip):
    model, clip = sd1_model_clip
    positive = encode_prompt(clip, "[cat|dog]", PromptOptions(steps=6, scheduler="karras"))
    negative = encode_prompt(clip, "", PromptOptions(negative=True))
    seen = texts_seen(model, positive, negative, 6, "karras")
    # entries 0, 2, 4 hold the same "cat" tensor: a call matches all of them
    assert [len(m) for m in seen] == [3] * 6
    labels = ["cat" if 0 in matches else "dog" for matches in seen]
    # webui uses the first option twice: cat, cat, dog, cat, dog, cat
    assert labels == ["cat", "cat", "dog", "cat", "dog", "cat"]


def test_fractional_switch_with_different_step_count(sd1_model_clip):
    model, clip = sd1_model_clip
    positive = encode_prompt(clip, "a [cat:dog:0.5] b", PromptOptions(steps=5, scheduler="normal"))
    negative = encode_prompt(clip, "", PromptOptions(negative=True))
    # 0.5 * 5 = 2.5 -> int 2: cat for calls 0..2, dog for 3..4
    assert texts_seen(model, positive, negative, 5, "normal") == webui_calls([2, 5], 5)


def test_a1111_nodes_clean_text_as_webui_and_clip_text_encode_does_not(sd1, sdxl, env):
    """webui's tokenizers run ftfy first (curly quotes, entities, full-width letters, ligatures);
    ComfyUI's CLIPTextEncode does not, so there the two spellings stay different."""
    from nodes.conditioning import clip_text_encode

    fancy, plain = "“Ｃａｔ” &amp; ﬁsh", '"cat" & fish'
    with running_in(env):
        (a,) = prompt_nodes.clip_text_encode_weighted(fancy, sd1, folder_embeddings=False)
        (b,) = prompt_nodes.clip_text_encode_weighted(plain, sd1, folder_embeddings=False)
        (c,) = prompt_nodes.clip_text_encode_weighted_sdxl(fancy, sdxl, folder_embeddings=False)
        (d,) = prompt_nodes.clip_text_encode_weighted_sdxl(plain, sdxl, folder_embeddings=False)
    assert torch.equal(a[0][0], b[0][0]) and torch.equal(c[0][0], d[0][0])
    assert torch.equal(c[0][1]["pooled_output"], d[0][1]["pooled_output"])
    (comfy_fancy,) = clip_text_encode(fancy, sd1)
    (comfy_plain,) = clip_text_encode(plain, sd1)
    assert not torch.allclose(comfy_fancy[0][0], comfy_plain[0][0], atol=1e-3)
