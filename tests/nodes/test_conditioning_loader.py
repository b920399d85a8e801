"""ConditioningLoader, "Load Conditioning" (today's ComfyUI, nodes_cond.py): a precomputed
CONDITIONING from the embeddings folders."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from nodes.conditioning_loader import _conditioning_files, conditioning_loader
from nodes.errors import NodeInputError
from tests.nodes.model_patch_helpers import sample
from tests.nodes.node_context import folders_env, running_node


@pytest.fixture
def env(tmp_path):
    environment = folders_env(tmp_path)
    (tmp_path / "base" / "models" / "embeddings" / "sub").mkdir(parents=True)
    return environment


def _folder(env):
    return env.folders.paths("embeddings")[0]


def test_the_conditioning_tensor_and_its_options_come_back(env):
    cond, pooled = torch.randn(1, 5, 8), torch.randn(1, 8)
    save_file({"conditioning": cond, "pooled_output": pooled}, str(_folder(env) / "sub" / "cat.safetensors"))
    assert _conditioning_files(env) == ["sub/cat.safetensors"]
    with running_node("ConditioningLoader", env=env):
        (loaded,) = conditioning_loader("sub/cat.safetensors")
    assert len(loaded) == 1 and set(loaded[0][1]) == {"pooled_output"}
    assert torch.equal(loaded[0][0], cond) and torch.equal(loaded[0][1]["pooled_output"], pooled)


def test_metadata_options_and_numbered_tensors_come_back_as_save_conditioning_wrote_them(env):
    import json

    cond = torch.randn(1, 4, 8)
    refs = [torch.full((1, 4, 2, 2), float(i)) for i in range(12)]
    tensors = {"conditioning": cond, **{f"reference_latents.{i}": r for i, r in enumerate(refs)}}
    save_file(tensors, str(_folder(env) / "edit.safetensors"),
              metadata={"conditioning_options": json.dumps({"guidance": 3.5, "prompt_type": "negative"})})
    with running_node("ConditioningLoader", env=env):
        ((loaded, options),) = conditioning_loader("edit.safetensors")[0]
    assert torch.equal(loaded, cond)
    assert options["guidance"] == 3.5 and options["prompt_type"] == "negative"
    assert len(options["reference_latents"]) == 12  # ordered by number: 10 and 11 after 9, not after 1
    assert all(torch.equal(got, want) for got, want in zip(options["reference_latents"], refs))
    assert set(options) == {"guidance", "prompt_type", "reference_latents"}


def test_bad_metadata_options_are_a_clear_error(env):
    save_file({"conditioning": torch.zeros(1, 2, 4)}, str(_folder(env) / "meta.safetensors"),
              metadata={"conditioning_options": "[1, 2]"})
    with running_node("ConditioningLoader", env=env), pytest.raises(NodeInputError, match="JSON object"):
        conditioning_loader("meta.safetensors")


def test_torch_files_are_read_without_running_code(env):
    cond = torch.randn(2, 3, 4)
    torch.save({"state_dict": {"conditioning": cond}}, _folder(env) / "wrapped.pt")
    torch.save({"conditioning": cond, "guidance": torch.tensor(3.5)}, _folder(env) / "plain.pt")
    with running_node("ConditioningLoader", env=env):
        assert torch.equal(conditioning_loader("wrapped.pt")[0][0][0], cond)
        (loaded,) = conditioning_loader("plain.pt")
    assert torch.equal(loaded[0][1]["guidance"], torch.tensor(3.5))

    class Payload:
        def __reduce__(self):
            return (print, ("ran",))

    torch.save({"conditioning": cond, "x": Payload()}, _folder(env) / "evil.pt")
    with running_node("ConditioningLoader", env=env), pytest.raises(NodeInputError, match="refused"):
        conditioning_loader("evil.pt")


def test_bad_files_and_names_are_clear_errors(env):
    save_file({"pooled_output": torch.zeros(1, 8)}, str(_folder(env) / "nocond.safetensors"))
    save_file({"conditioning": torch.zeros(5, 8)}, str(_folder(env) / "flat.safetensors"))
    (_folder(env) / "broken.safetensors").write_bytes(b"not safetensors")
    with running_node("ConditioningLoader", env=env):
        with pytest.raises(NodeInputError, match="no 'conditioning' tensor"):
            conditioning_loader("nocond.safetensors")
        with pytest.raises(NodeInputError, match=r"\[batch, tokens, width\]"):
            conditioning_loader("flat.safetensors")
        with pytest.raises(NodeInputError, match="not a readable safetensors"):
            conditioning_loader("broken.safetensors")
        with pytest.raises(NodeInputError, match="conditioning_name"):
            conditioning_loader("missing.safetensors")
        with pytest.raises(NodeInputError, match="conditioning_name"):
            conditioning_loader("../escape.safetensors")


def test_a_saved_text_encoding_samples_as_the_encoding_itself(env, sd1_with_prompts):
    (cond, options), = sd1_with_prompts.positive
    save_file({"conditioning": cond.contiguous(), **{k: v.contiguous() for k, v in options.items()
                                                    if isinstance(v, torch.Tensor)}},
              str(_folder(env) / "red_cube.safetensors"))
    with running_node("ConditioningLoader", env=env):
        (loaded,) = conditioning_loader("red_cube.safetensors")
    want = sample(sd1_with_prompts.model, sd1_with_prompts, steps=2, size=8)
    assert torch.equal(sample(sd1_with_prompts.model, sd1_with_prompts, steps=2, size=8, positive=loaded), want)
