"""CLIPTextEncodeSDXL and CLIPTextEncodeSDXLRefiner: ComfyUI's sockets, each text to its encoder,
chunk padding, the size / aesthetic options, and KSampler runs that use them (tiny SDXL base and
refiner checkpoints), directly and through the executor."""
from __future__ import annotations

import shutil

import pytest
import torch

from comfy_core.loading import load_checkpoint
from graph.executor import Executor
from graph.native import Input, node, spec_of
from graph.registry import Registry
from graph.validation import validate_prompt
from nodes import register_builtin_nodes
from nodes.environment import Environment
from nodes.sampling import ksampler
from nodes.errors import NodeInputError
from nodes.sdxl_text import clip_text_encode_sdxl, clip_text_encode_sdxl_refiner
from tests.fixtures.clips import load_clip, one_thread, sd1, sdxl  # noqa: F401 (fixtures)

LONG = " ".join(["a red lighthouse on a rocky shore"] * 20)  # well over one 77-token chunk
SIZES = {"width": 1024, "height": 768, "crop_w": 16, "crop_h": 32, "target_width": 512, "target_height": 256}
L_WIDTH = 64  # the tiny SDXL's CLIP-L width; CLIP-G follows it in the concatenated context


@pytest.fixture(scope="module")
def refiner_clip(tiny_sdxl_refiner_ckpt):
    return load_clip(tiny_sdxl_refiner_ckpt)


def _sdxl(clip, text_g, text_l, **sizes):
    values = {**SIZES, **sizes}
    return clip_text_encode_sdxl(clip, values["width"], values["height"], values["crop_w"], values["crop_h"],
                                 values["target_width"], values["target_height"], text_g, text_l)[0]


def test_specs_match_comfyui():
    spec = spec_of(clip_text_encode_sdxl)
    assert spec.node_id == "CLIPTextEncodeSDXL" and spec.category == "advanced/conditioning"
    assert spec.display_name == "CLIPTextEncodeSDXL"  # ComfyUI maps no display name
    assert [(i.name, i.type) for i in spec.inputs] == [
        ("clip", "CLIP"), ("width", "INT"), ("height", "INT"), ("crop_w", "INT"), ("crop_h", "INT"),
        ("target_width", "INT"), ("target_height", "INT"), ("text_g", "STRING"), ("text_l", "STRING")]
    for name, default in (("width", 1024), ("height", 1024), ("crop_w", 0), ("crop_h", 0),
                          ("target_width", 1024), ("target_height", 1024)):
        assert spec.input(name).options == {"default": default, "min": 0, "max": 16384}
    for name in ("text_g", "text_l"):
        assert spec.input(name).options["multiline"] and spec.input(name).options["dynamicPrompts"]
    assert [o.type for o in spec.outputs] == ["CONDITIONING"]

    spec = spec_of(clip_text_encode_sdxl_refiner)
    assert spec.node_id == "CLIPTextEncodeSDXLRefiner" and spec.category == "advanced/conditioning"
    assert [(i.name, i.type) for i in spec.inputs] == [
        ("ascore", "FLOAT"), ("width", "INT"), ("height", "INT"), ("text", "STRING"), ("clip", "CLIP")]
    assert spec.input("ascore").options == {"default": 6.0, "min": 0.0, "max": 1000.0, "step": 0.01}
    assert spec.input("width").options == {"default": 1024, "min": 0, "max": 16384}
    assert [o.type for o in spec.outputs] == ["CONDITIONING"]


def test_each_text_goes_to_its_encoder_and_the_sizes_are_options(sdxl):
    (cond, options), = _sdxl(sdxl, "a lighthouse at dusk", "oil painting")
    from_g, pooled_g = sdxl.encode_from_tokens(sdxl.tokenize("a lighthouse at dusk"), return_pooled=True)
    from_l = sdxl.encode("oil painting")
    assert cond.shape == from_g.shape == (1, 77, 2 * L_WIDTH)
    torch.testing.assert_close(cond[..., :L_WIDTH], from_l[..., :L_WIDTH])  # CLIP-L part: text_l
    torch.testing.assert_close(cond[..., L_WIDTH:], from_g[..., L_WIDTH:])  # CLIP-G part: text_g
    torch.testing.assert_close(options["pooled_output"], pooled_g)  # pooled from CLIP-G
    assert {k: options[k] for k in SIZES} == SIZES
    assert set(options) == {"pooled_output", *SIZES}


@pytest.mark.parametrize("long_side", ["text_l", "text_g"])
def test_the_shorter_text_is_padded_with_empty_chunks(sdxl, long_side):
    text_g, text_l = (LONG, "a cat") if long_side == "text_g" else ("a cat", LONG)
    assert len(sdxl.tokenize(LONG)["l"]) == 2
    (cond, _), = _sdxl(sdxl, text_g, text_l)
    assert cond.shape == (1, 154, 2 * L_WIDTH)  # both encoders: two chunks
    empty = sdxl.encode("")  # [1, 77, 128]
    short = slice(0, L_WIDTH) if long_side == "text_g" else slice(L_WIDTH, None)
    torch.testing.assert_close(cond[:, 77:, short], empty[..., short])
    torch.testing.assert_close(cond[:, :77, short], sdxl.encode("a cat")[..., short])


def test_sdxl_refuses_bad_inputs(sdxl, sd1, in_node):
    with pytest.raises(NodeInputError, match="input 'clip' expected an SDXL CLIP"):
        _sdxl(sd1, "a", "b")
    with pytest.raises(NodeInputError, match="input 'clip' expected a CLIP object, received None"):
        _sdxl(None, "a", "b")
    with pytest.raises(NodeInputError, match="input 'text_l' expected a STRING"):
        _sdxl(sdxl, "a", 3)
    with in_node("CLIPTextEncodeSDXL", "6"), pytest.raises(NodeInputError, match="input 'crop_h' expected an INT") as info:
        _sdxl(sdxl, "a", "b", crop_h=-8)
    assert (info.value.node_type, info.value.node_id, info.value.input_name) == ("CLIPTextEncodeSDXL", "6", "crop_h")
    assert str(info.value).startswith("CLIPTextEncodeSDXL (node 6): ")
    with pytest.raises(NodeInputError, match="'width'"):
        _sdxl(sdxl, "a", "b", width=True)


def test_refiner_encodes_with_clip_g_and_carries_the_aesthetic_score(refiner_clip):
    (conditioning,) = clip_text_encode_sdxl_refiner(refiner_clip, 2.5, 640, 512, "a lighthouse")
    (cond, options), = conditioning
    expected, pooled = refiner_clip.encode_from_tokens(refiner_clip.tokenize("a lighthouse"), return_pooled=True)
    torch.testing.assert_close(cond, expected)
    torch.testing.assert_close(options["pooled_output"], pooled)
    assert (options["aesthetic_score"], options["width"], options["height"]) == (2.5, 640, 512)
    with pytest.raises(NodeInputError, match="input 'ascore'"):
        clip_text_encode_sdxl_refiner(refiner_clip, -1.0, 640, 512, "a")
    with pytest.raises(NodeInputError, match="input 'clip' expected a CLIP object, received object"):
        clip_text_encode_sdxl_refiner(object(), 6.0, 640, 512, "a")


def test_packs_call_the_nodes_with_comfyuis_method_and_argument_order(sdxl, refiner_clip, comfy_nodes):
    nodes = comfy_nodes

    (expected,) = clip_text_encode_sdxl(sdxl, 512, 512, 0, 0, 512, 512, "a lighthouse", "oil painting")
    # V3 nodes in ComfyUI 0.3.64 (comfy_extras.nodes_clip_sdxl): `execute` answers a NodeOutput.
    (got,) = nodes.CLIPTextEncodeSDXL.execute(sdxl, 512, 512, 0, 0, 512, 512, "a lighthouse", "oil painting").result
    torch.testing.assert_close(got[0][0], expected[0][0])
    (got,) = nodes.CLIPTextEncodeSDXLRefiner.execute(refiner_clip, 3.0, 640, 512, "a lighthouse").result
    assert (got[0][1]["aesthetic_score"], got[0][1]["width"], got[0][1]["height"]) == (3.0, 640, 512)


def _sample(model, positive, negative) -> torch.Tensor:
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    (out,) = ksampler(model, 3, 2, 5.0, "euler", "normal", positive, negative, latent, 1.0)
    return out["samples"]


def test_ksampler_uses_the_sdxl_size_options(tiny_sdxl_ckpt, sdxl):
    model, _, _ = load_checkpoint(tiny_sdxl_ckpt, output_vae=False, output_clip=False)
    negative = _sdxl(sdxl, "", "")
    base = _sample(model, _sdxl(sdxl, "a lighthouse", "a lighthouse"), negative)
    assert base.shape == (1, 4, 8, 8) and torch.isfinite(base).all()
    again = _sample(model, _sdxl(sdxl, "a lighthouse", "a lighthouse"), negative)
    torch.testing.assert_close(again, base)
    # Only the size embedding differs: the label embedding must have read it.
    resized = _sample(model, _sdxl(sdxl, "a lighthouse", "a lighthouse", target_width=2048), negative)
    assert not torch.allclose(resized, base)


def test_ksampler_uses_the_refiner_aesthetic_score(tiny_sdxl_refiner_ckpt, refiner_clip):
    model, _, _ = load_checkpoint(tiny_sdxl_refiner_ckpt, output_vae=False, output_clip=False)
    negative = clip_text_encode_sdxl_refiner(refiner_clip, 2.5, 1024, 1024, "")[0]
    high = _sample(model, clip_text_encode_sdxl_refiner(refiner_clip, 6.0, 1024, 1024, "a lighthouse")[0], negative)
    low = _sample(model, clip_text_encode_sdxl_refiner(refiner_clip, 1.0, 1024, 1024, "a lighthouse")[0], negative)
    assert torch.isfinite(high).all() and not torch.allclose(high, low)


CAPTURED: dict[str, torch.Tensor] = {}


@node("TestCaptureSdxlLatent", inputs=[Input("samples", "LATENT")], output_node=True)
def capture_latent(samples):
    CAPTURED["samples"] = samples["samples"]
    return {}


async def test_sdxl_workflow_through_the_executor(tmp_path, tiny_sdxl_ckpt):
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sdxl_ckpt, tmp_path / "models" / "checkpoints" / "tiny_sdxl.safetensors")
    registry = Registry()
    register_builtin_nodes(registry)
    registry.add_native(capture_latent)
    sizes = {"width": 1024, "height": 1024, "crop_w": 0, "crop_h": 0, "target_width": 1024, "target_height": 1024}
    prompt = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny_sdxl.safetensors"}},
        "6": {"class_type": "CLIPTextEncodeSDXL",
              "inputs": {"clip": ["4", 1], "text_g": "a lighthouse", "text_l": "oil painting", **sizes}},
        "7": {"class_type": "CLIPTextEncodeSDXL", "inputs": {"clip": ["4", 1], "text_g": "", "text_l": "", **sizes}},
        "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "3": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "seed": 1, "steps": 2, "cfg": 5.0,
                                                   "sampler_name": "euler", "scheduler": "normal",
                                                   "positive": ["6", 0], "negative": ["7", 0],
                                                   "latent_image": ["5", 0], "denoise": 1.0}},
        "9": {"class_type": "TestCaptureSdxlLatent", "inputs": {"samples": ["3", 0]}},
    }
    checked = await validate_prompt(prompt, registry, env=env)
    assert checked.ok, checked.node_errors
    outcome = await Executor(registry, env=env).execute(prompt, "sdxl1", outputs=checked.outputs)
    assert outcome.status == "success", outcome.error
    samples = CAPTURED["samples"]
    assert samples.shape == (1, 4, 8, 8) and torch.isfinite(samples).all() and samples.abs().sum() > 0

    bad = {**prompt, "6": {**prompt["6"], "inputs": {**prompt["6"]["inputs"], "crop_w": -1}}}
    checked = await validate_prompt(bad, registry, env=env)
    assert not checked.ok and "6" in checked.node_errors
