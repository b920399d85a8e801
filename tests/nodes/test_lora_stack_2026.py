"""LoadLoraModel and LoadLoraTextEncoder (today's ComfyUI, comfy_extras/nodes_lora_stack.py): the
row group as ComfyUI's `_DynamicGroup` nests it (gaps, row limits, required fields), each row's
LoRA applied in order at its strength (the patched weights against `W + sum s * up @ down`
computed by hand), skipped rows, inputs unchanged, and both nodes in a workflow with the rows
spelled as the editor sends them."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.lora import text_encoder_key_map, unet_key_map
from graph.native import Input, node
from graph.v3_schema import DynamicInputError
from nodes.environment import Environment, host_env
from nodes.errors import NodeInputError
from nodes.lora_stack import _rows, load_lora_model, load_lora_text_encoder
from tests.fixtures.clips import one_thread  # noqa: F401 (fixture: tiny models on one thread)
from tests.nodes.workflow_2026 import Runner
from tests.nodes.workflow_2026 import node as prompt_node

UNET_KEY = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"
CLIP_LAYER = "lora_te_text_model_encoder_layers_0_self_attn_q_proj"


# -- the row group ---------------------------------------------------------------------------------

def test_rows_nest_as_comfyuis_dynamic_group():
    group = _rows("t")
    flat = {"loras.0.lora_name": "a", "loras.0.strength": 1.0, "loras.2.lora_name": "b", "loras.2.strength": 0.5,
            "loras.2x": 1, "other": 3}
    flat.pop("loras.2x")
    assert group.nest(flat) == [{"lora_name": "a", "strength": 1.0}, {"lora_name": None, "strength": None},
                                {"lora_name": "b", "strength": 0.5}]
    assert flat == {"other": 3}  # the group's inputs are taken out of the call's
    assert group.nest({"loras.1.lora_name": "a", "loras.1.strength": 1.0}, listed=True)[0] == \
        {"lora_name": [None], "strength": [None]}
    assert len(group.flat()) == 40 and group.flat()[1].name == "loras.0.strength"


@pytest.mark.parametrize("flat, words", [
    ({}, "0 rows"),  # min is 1
    ({f"loras.{i}.lora_name": "a" for i in range(21)} | {f"loras.{i}.strength": 1.0 for i in range(21)}, "21 rows"),
    ({"loras.01.lora_name": "a", "loras.01.strength": 1.0}, "loras.01.lora_name"),
    ({"loras.0.name": "a"}, "loras.0.name"),
    ({"loras.0.lora_name": "a"}, "lacks ['strength']"),
])
def test_rows_that_break_the_groups_rules_are_refused(flat, words):
    with pytest.raises(DynamicInputError, match=words.replace("[", r"\[").replace("]", r"\]")):
        _rows("t").nest(dict(flat))


# -- applying the rows -----------------------------------------------------------------------------

def _lora(path: Path, layer: str, shape: tuple[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    up, down = torch.randn(shape[0], 2, generator=g) * 0.1, torch.randn(2, shape[1], generator=g) * 0.1
    save_file({f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down}, str(path))
    return up, down


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint

    model, clip, _ = load_checkpoint(tiny_sd1_ckpt, output_vae=False)
    return model, clip


@pytest.fixture
def loras(tmp_path, sd1):
    model, clip = sd1
    env = Environment.rooted_at(tmp_path)
    env.ensure_dirs()
    folder = tmp_path / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    unet_layer = next(k for k, v in unet_key_map(model.model).items() if v == UNET_KEY and k.startswith("lora_unet"))
    w = dict(model.model.named_parameters())[UNET_KEY]
    clip_key = text_encoder_key_map(clip.patcher.model)[CLIP_LAYER]
    cw = dict(clip.patcher.model.named_parameters())[clip_key]
    made = {"a": _lora(folder / "a.safetensors", unet_layer, tuple(w.shape), 1),
            "b": _lora(folder / "b.safetensors", unet_layer, tuple(w.shape), 2),
            "te": _lora(folder / "te.safetensors", CLIP_LAYER, tuple(cw.shape), 3)}
    token = host_env.set(env)
    try:
        yield made, w.detach().clone(), clip_key, cw.detach().clone()
    finally:
        host_env.reset(token)


def _applied(patcher, key):
    with patcher.applied():
        return patcher.applied_tensor(key).detach().clone()


def test_model_rows_apply_in_order_at_their_strengths(sd1, loras):
    model, _clip = sd1
    (made, w, _ck, _cw) = loras
    rows = [{"lora_name": "a.safetensors", "strength": 1.0}, {"lora_name": None, "strength": None},
            {"lora_name": "b.safetensors", "strength": -0.5}, {"lora_name": "a.safetensors", "strength": 0}]
    patches_before = {k: list(v) for k, v in model.patches.items()}
    (patched,) = load_lora_model(model, rows)
    assert patched is not model and {k: list(v) for k, v in model.patches.items()} == patches_before
    (ua, da), (ub, db) = made["a"], made["b"]
    want = w + 1.0 * (ua @ da) - 0.5 * (ub @ db)
    torch.testing.assert_close(_applied(patched, UNET_KEY), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_applied(model, UNET_KEY), w, rtol=0, atol=0)  # the input MODEL: as it was
    assert load_lora_model(model, [{"lora_name": "a.safetensors", "strength": 0}])[0] is model
    assert load_lora_model(model, [{"lora_name": "", "strength": 1.0}])[0] is model


def test_text_encoder_rows_patch_the_clip(sd1, loras):
    _model, clip = sd1
    (made, _w, clip_key, cw) = loras
    (patched,) = load_lora_text_encoder(clip, [{"lora_name": "te.safetensors", "strength": 0.75}])
    up, down = made["te"]
    # the text encoder's weights are fp16: the patch is computed in float32 and stored back in fp16
    torch.testing.assert_close(_applied(patched.patcher, clip_key).float(), cw.float() + 0.75 * (up @ down),
                               rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(_applied(clip.patcher, clip_key), cw, rtol=0, atol=0)


def test_a_missing_file_names_its_row(sd1, loras):
    with pytest.raises(NodeInputError, match="loras.1.lora_name"):
        load_lora_model(sd1[0], [{"lora_name": "a.safetensors", "strength": 1.0},
                                 {"lora_name": "nope.safetensors", "strength": 1.0}])


CAPTURED: dict = {}


@node("TestCaptureLoraStack", inputs=[Input("model", "MODEL"), Input("clip", "CLIP")], output_node=True)
def _capture(model, clip):
    CAPTURED.update(model=model, clip=clip)
    return {"ui": {}}


async def test_both_nodes_in_a_workflow_with_the_editors_row_names(tmp_path, tiny_sd1_ckpt, sd1, loras):
    import shutil

    (made, w, clip_key, cw) = loras
    runner = Runner(tmp_path)
    runner.registry.add_native(_capture)
    (tmp_path / "models" / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_sd1_ckpt, tmp_path / "models" / "checkpoints" / "tiny.safetensors")
    prompt = {
        "1": prompt_node("CheckpointLoaderSimple", ckpt_name="tiny.safetensors"),
        "2": {"class_type": "LoadLoraModel", "inputs": {"model": ["1", 0],
                                                         "loras.0.lora_name": "a.safetensors", "loras.0.strength": 1.0,
                                                         "loras.2.lora_name": "b.safetensors", "loras.2.strength": 0.5}},
        "3": {"class_type": "LoadLoraTextEncoder", "inputs": {"clip": ["1", 1], "loras.0.lora_name": "te.safetensors",
                                                               "loras.0.strength": -1.0}},
        "4": prompt_node("TestCaptureLoraStack", model=["2", 0], clip=["3", 0]),
    }
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    (ua, da), (ub, db), (ut, dt) = made["a"], made["b"], made["te"]
    torch.testing.assert_close(_applied(CAPTURED["model"], UNET_KEY), w + ua @ da + 0.5 * (ub @ db),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_applied(CAPTURED["clip"].patcher, clip_key).float(), cw.float() - ut @ dt,
                               rtol=2e-3, atol=2e-3)
    bad = {**prompt, "2": {"class_type": "LoadLoraModel",
                           "inputs": {"model": ["1", 0], "loras.0.lora_name": "nope.safetensors",
                                      "loras.0.strength": 1.0}}}
    checked = await runner.validate(bad)
    assert not checked.ok and "loras.0.lora_name" in str(checked.node_errors)
