"""SaveConditioning / LoadConditioning (today's ComfyUI, comfy_extras/nodes_cond.py): a CONDITIONING
saved as ComfyUI's `.conditioning` file (safetensors; a JSON description in the metadata key
`comfy_conditioning`, tensors t0, t1, ...) and loaded back identical; unsafe names refused."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from comfy_core.latent.nested import NestedTensor
from comfy_core.text_encoders.conditioning_files import pack_conditioning, unpack_conditioning
from nodes.conditioning_files import list_conditioning_files, load_conditioning, save_conditioning
from nodes.environment import Environment, host_env
from nodes.errors import NodeInputError
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    token = host_env.set(environment)
    yield environment
    host_env.reset(token)


def rich_conditioning() -> list:
    g = torch.Generator().manual_seed(0)
    cond = torch.randn(2, 77, 16, generator=g)
    return [
        [cond, {"pooled_output": torch.randn(2, 8, generator=g).half(), "guidance": 3.5, "strength": 1,
                "set_area_to_bounds": False, "mask": None, "name": "x",
                "reference_latents": [torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 4, 4, 4, generator=g)],
                "area": (64, 64, 0, 8), "nested": {"a": [1, (2.5, "b")]},
                "audio_video": NestedTensor([torch.ones(1, 2, 3, 4, 5), torch.zeros(1, 8, 3, 2)])}],
        [cond[:1].clone(), {"attention_mask": torch.ones(1, 77, dtype=torch.bool), "start_percent": 0.25}],
    ]


def assert_same(a, b, where="conditioning"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, NestedTensor):
        assert isinstance(b, NestedTensor) and len(a.tensors) == len(b.tensors), where
        for i, (x, y) in enumerate(zip(a.tensors, b.tensors)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, where


def test_pack_describes_values_and_numbers_tensors_in_order():
    cond = torch.zeros(1, 2, 3)
    tensors, description = pack_conditioning([[cond, {"pooled_output": torch.ones(1, 3), "guidance": 2.0,
                                                      "area": (1, 2), "lst": [None]}]])
    assert list(tensors) == ["t0", "t1"] and torch.equal(tensors["t1"], torch.ones(1, 3))
    assert description == {"version": 1, "entries": [{
        "cond": {"t": "tensor", "k": "t0"},
        "extra": {"t": "dict", "v": {"pooled_output": {"t": "tensor", "k": "t1"}, "guidance": {"t": "lit", "v": 2.0},
                                     "area": {"t": "tuple", "v": [{"t": "lit", "v": 1}, {"t": "lit", "v": 2}]},
                                     "lst": {"t": "list", "v": [{"t": "lit", "v": None}]}}}}]}
    empty, _ = pack_conditioning([])
    assert list(empty) == ["t0"] and empty["t0"].numel() == 0


def test_save_then_load_gives_the_same_conditioning(env):
    conditioning = rich_conditioning()
    result = save_conditioning(conditioning, "conditioning/ComfyUI", prompt={"1": {"class_type": "X"}},
                               extra_pnginfo={"workflow": {"nodes": []}})
    assert result["result"][0] is conditioning
    assert result["ui"] == {"files": [{"filename": "ComfyUI_00001_.conditioning", "subfolder": "conditioning",
                                       "type": "output"}]}
    saved = env.output_dir / "conditioning" / "ComfyUI_00001_.conditioning"
    with safe_open(str(saved), framework="pt") as handle:  # ComfyUI's layout, readable by any safetensors reader
        metadata = handle.metadata()
        assert sorted(handle.keys(), key=lambda k: int(k[1:])) == [f"t{i}" for i in range(8)]
    assert json.loads(metadata["comfy_conditioning"])["version"] == 1
    assert json.loads(metadata["prompt"]) == {"1": {"class_type": "X"}}
    assert json.loads(metadata["workflow"]) == {"nodes": []}
    shutil.copy(saved, env.input_dir / "cached.conditioning")
    assert list_conditioning_files(env) == ["cached.conditioning"]
    (loaded,) = load_conditioning("cached.conditioning")
    assert_same(conditioning, loaded)
    (from_output,) = load_conditioning("conditioning/ComfyUI_00001_.conditioning [output]")
    assert_same(conditioning, from_output)
    assert save_conditioning(conditioning, "conditioning/ComfyUI")["ui"]["files"][0]["filename"] == \
        "ComfyUI_00002_.conditioning"


def test_metadata_can_be_left_out(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    environment.disable_metadata = True
    token = host_env.set(environment)
    try:
        save_conditioning([[torch.zeros(1, 2, 3), {}]], "c", prompt={"1": {}})
    finally:
        host_env.reset(token)
    with safe_open(str(environment.output_dir / "c_00001_.conditioning"), framework="pt") as handle:
        assert set(handle.metadata()) == {"comfy_conditioning"}


def test_values_a_file_cannot_hold_are_named(env):
    with pytest.raises(NodeInputError, match="control_net"):
        save_conditioning([[torch.zeros(1, 2, 3), {"control_net": object()}]], "c")


def test_unsafe_or_foreign_files_are_refused(env):
    with pytest.raises(NodeInputError, match="'filename_prefix'"):
        save_conditioning([[torch.zeros(1, 2, 3), {}]], "../../escape")
    for name in ("../outside.conditioning", "/etc/passwd.conditioning", "cached.safetensors"):
        with pytest.raises(NodeInputError, match="'conditioning'"):
            load_conditioning(name)
    save_file({"conditioning": torch.zeros(1, 2, 3)}, str(env.input_dir / "plain.conditioning"))
    with pytest.raises(NodeInputError, match="comfy_conditioning"):
        load_conditioning("plain.conditioning")
    save_file({"t0": torch.zeros(1)}, str(env.input_dir / "v2.conditioning"),
              metadata={"comfy_conditioning": json.dumps({"version": 2, "entries": []})})
    with pytest.raises(NodeInputError, match="version"):
        load_conditioning("v2.conditioning")


def test_unpack_rebuilds_nested_tensors():
    parts = [torch.ones(1, 2), torch.zeros(3)]
    tensors, description = pack_conditioning([[torch.zeros(1, 1, 1), {"n": NestedTensor(parts)}]])
    rebuilt = unpack_conditioning(tensors, description, NestedTensor)[0][1]["n"]
    assert isinstance(rebuilt, NestedTensor) and all(torch.equal(a, b) for a, b in zip(rebuilt.tensors, parts))


async def test_load_and_save_in_a_workflow(tmp_path):
    runner = Runner(tmp_path)
    token = host_env.set(runner.env)
    try:
        save_conditioning(rich_conditioning(), "seed")
    finally:
        host_env.reset(token)
    shutil.copy(runner.env.output_dir / "seed_00001_.conditioning", runner.env.input_dir / "prompt.conditioning")
    prompt = {"load": node("LoadConditioning", conditioning="prompt.conditioning"),
              "save": node("SaveConditioning", conditioning=["load", 0], filename_prefix="again/c")}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["save"] == {"files": [{"filename": "c_00001_.conditioning", "subfolder": "again",
                                                 "type": "output"}]}
    token = host_env.set(runner.env)
    try:
        (copy,) = load_conditioning("again/c_00001_.conditioning [output]")
    finally:
        host_env.reset(token)
    assert_same(rich_conditioning(), copy)
    checked = await runner.validate({"load": node("LoadConditioning", conditioning="missing.conditioning"),
                                     "save": node("SaveConditioning", conditioning=["load", 0])})
    assert not checked.ok
