"""The new nodes as packs reach them through ComfyUI's import surface: `comfy_extras.nodes_X.Class`
with ComfyUI's FUNCTION (`execute` of the V3 nodes of today's ComfyUI, 0.3.64's V1 method of
SaveLoRANode / LoadImageSetFromFolderNode / LoadImageTextSetFromFolderNode) and ComfyUI's
parameters, answering what the node answers."""
from __future__ import annotations

import importlib

import pytest
import torch


@pytest.fixture
def session(tmp_path):
    import compat
    from graph.registry import Registry
    from nodes.environment import Environment

    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    sess = compat.install(env, Registry())
    with sess.activate():
        yield sess


class _Sampling:
    def percent_to_sigma(self, percent: float) -> float:
        return 10.0 * (1.0 - percent)


class _Model:
    """A MODEL stand-in: clones carry their own model_options."""

    def __init__(self) -> None:
        self.model = object()
        self.model_options: dict = {}

    def clone(self) -> "_Model":
        other = _Model()
        other.model_options = {k: (list(v) if isinstance(v, list) else v) for k, v in self.model_options.items()}
        return other

    def get_model_object(self, name: str):
        assert name == "model_sampling"
        return _Sampling()

    def set_option(self, key, value):
        self.model_options[key] = value

    def add_option_function(self, key, fn, disable_cfg1_optimization=False):
        self.model_options.setdefault(key, []).append(fn)


@pytest.mark.parametrize("module, name, params", [
    ("comfy_extras.nodes_seamless_tiling", "ModelPatchSeamlessTiling", ["model", "tiling", "context_size"]),
    ("comfy_extras.nodes_seamless_tiling", "VAEDecodeSeamlessTiling", ["samples", "vae", "tiling", "context_size"]),
    ("comfy_extras.nodes_tag", "TangentialAmplifyingGuidance",
     ["model", "t_scale", "r_scale", "start_percent", "end_percent"]),
    ("comfy_extras.nodes_lt", "LTXVGuidanceRescale", ["model", "guidance_rescale"]),
    ("comfy_extras.nodes_lora_stack", "LoadLoraModel", ["model", "loras"]),
    ("comfy_extras.nodes_lora_stack", "LoadLoraTextEncoder", ["clip", "loras"]),
])
def test_v3_nodes_are_in_their_comfy_extras_module_with_execute(session, module, name, params):
    from compat.node_facades import comfy_nodes_today

    cls = getattr(importlib.import_module(module), name)
    assert importlib.import_module(module).NODE_CLASS_MAPPINGS[name] is cls
    assert cls.FUNCTION == "EXECUTE_NORMALIZED" and callable(cls.execute)
    # positional arguments are bound in today's ComfyUI's order of `execute`
    assert comfy_nodes_today()[name]["execute"] == "(" + ", ".join(params) + ")"


def test_the_model_patches_answer_a_node_output_with_the_patch_on_a_clone(session):
    from comfy_core.model_patches.post_cfg_rescale import GuidanceRescale, TangentialAmplifyingGuidance
    from comfy_core.model_patches.seamless_tiling import SeamlessTiling
    from comfy_extras.nodes_lt import LTXVGuidanceRescale
    from comfy_extras.nodes_seamless_tiling import ModelPatchSeamlessTiling
    from comfy_extras.nodes_tag import TangentialAmplifyingGuidance as TAGNode

    model = _Model()
    out = ModelPatchSeamlessTiling.execute(model, "y", 5)
    assert type(out).__name__ == "NodeOutput"
    assert out.result[0].model_options["model_function_wrapper"] == SeamlessTiling(5, 0)
    assert model.model_options == {}
    tag = TAGNode.execute(model, t_scale=1.2, r_scale=0.9, start_percent=0.0, end_percent=0.5).result[0]
    assert tag.model_options["sampler_post_cfg_function"] == [TangentialAmplifyingGuidance(1.2, 0.9, 10.0, 5.0)]
    rescale = LTXVGuidanceRescale.execute(model, 0.3).result[0]
    assert rescale.model_options["sampler_post_cfg_function"] == [GuidanceRescale(0.3)]


def test_the_seamless_decode_and_the_lora_rows_through_execute(session):
    from comfy_extras.nodes_lora_stack import LoadLoraModel, LoadLoraTextEncoder
    from comfy_extras.nodes_seamless_tiling import VAEDecodeSeamlessTiling

    class VAE:
        def encode(self, x):
            return x

        def decode(self, latent):  # [B, C, h, w] -> [B, 2h, 2w, C]
            return latent.repeat_interleave(2, -1).repeat_interleave(2, -2).movedim(1, -1)

    latent = torch.arange(12, dtype=torch.float32).reshape(1, 1, 3, 4)
    (image,) = VAEDecodeSeamlessTiling.execute({"samples": latent}, VAE(), "x and y", 1).result
    assert torch.equal(image, VAE().decode(latent))  # this decoder has no context to gain: the crop is exact
    model = _Model()
    assert LoadLoraModel.execute(model, [{"lora_name": "x.safetensors", "strength": 0}]).result[0] is model

    class Clip:
        def tokenize(self, text):
            return text

        def encode_from_tokens(self, tokens):
            return tokens

    clip = Clip()
    assert LoadLoraTextEncoder.execute(clip, [{"lora_name": None, "strength": 1.0}]).result[0] is clip


def test_the_0364_nodes_keep_their_v1_methods(session, tmp_path):
    from safetensors.torch import load_file

    nodes_train = importlib.import_module("comfy_extras.nodes_train")
    save = nodes_train.NODE_CLASS_MAPPINGS["SaveLoRANode"]
    assert save.FUNCTION == "save" and save.OUTPUT_NODE is True
    lora = {"diffusion_model.x.lora_up.weight": torch.ones(2, 1)}
    save().save(lora, "loras/pack", 3)  # ComfyUI 0.3.64's (lora, prefix, steps)
    written = tmp_path / "output" / "loras" / "pack_3_steps_00001_.safetensors"
    assert torch.equal(load_file(str(written))["diffusion_model.x.lora_up.weight"], torch.ones(2, 1))
    for node_id in ("LoadImageSetFromFolderNode", "LoadImageTextSetFromFolderNode"):
        cls = nodes_train.NODE_CLASS_MAPPINGS[node_id]
        assert cls.FUNCTION == "load_images" and callable(cls().load_images)
