"""Model patch files (ComfyUI's ModelPatchLoader rules) and USO's style projector: detection from
key names, the kinds refused with their names, the projector's maths against a computation
written here from the raw tensors, the Flux post_input patch, the SigLIP layers USO reads."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.clip_vision.output import ClipVisionOutput
from comfy_core.families.flux.dit import FluxConfig, FluxTransformer
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.patch_files import (PATCH_KINDS, UnknownModelPatchError, UnsupportedModelPatchError,
                                                  detect_model_patch, load_model_patch)
from comfy_core.model_patches.uso import UsoStyleProjector, UsoStyleProjectorPatch, uso_style_layers
from comfy_core.patching.patcher import Patcher
from tests.fixtures.flux_files import tiny_flux_state_dict
from tests.fixtures.model_patch_files import (FOREIGN_KEYS, foreign_patch_state_dict, uso_projector_state_dict,
                                              write_patch_file, write_tiny_uso_projector)


def reference_projection(state: dict, layers: torch.Tensor) -> torch.Tensor:
    """USO's projector from the file's tensors: per level silu(W_e h^T + b)^T, layer norm, W_p x + b;
    levels high (layers[2]), mid (layers[1]), low (layers[0]) concatenated along the tokens."""
    out = []
    for level, hidden in (("high", layers[2]), ("mid", layers[1]), ("low", layers[0])):
        p = f"feature_embedder.{level}_"
        mixed = torch.einsum("st,btw->bsw", state[p + "embedding_linear.0.weight"].float(), hidden.float())
        x = F.silu(mixed + state[p + "embedding_linear.0.bias"].float()[None, :, None])  # [B, S, W]
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        x = (x - mean) / torch.sqrt(var + 1e-5) * state[p + "layer_norm.weight"].float() + state[p + "layer_norm.bias"].float()
        out.append(x @ state[p + "projection.weight"].float().T + state[p + "projection.bias"].float())
    return torch.cat(out, dim=1)


def _layers(batch: int = 1, tokens: int = 4, width: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(3, batch, tokens, width, generator=torch.Generator().manual_seed(seed))


def test_loaded_projector_matches_the_maths_of_the_file(tmp_path):
    state = uso_projector_state_dict(seed=3)
    patch = load_model_patch(write_patch_file(tmp_path / "uso.safetensors", state))
    assert isinstance(patch, Patcher) and isinstance(patch.model, UsoStyleProjector)
    assert patch.model.config.siglip_tokens == 4 and patch.model.config.style_tokens == 2
    assert patch.model.config.hidden_size == 64 and patch.model.config.siglip_width == 16
    layers = _layers(batch=2)
    with torch.no_grad():
        got = patch.model(layers)
    assert got.shape == (2, 6, 64)
    torch.testing.assert_close(got, reference_projection(state, layers), atol=1e-5, rtol=1e-5)


def test_the_file_weight_dtype_is_kept(tmp_path):
    patch = load_model_patch(write_tiny_uso_projector(tmp_path / "uso.safetensors", dtype=torch.bfloat16))
    assert {p.dtype for p in patch.model.parameters()} == {torch.bfloat16}
    assert patch.model(_layers()).dtype == torch.bfloat16


@pytest.mark.parametrize("kind", sorted(set(FOREIGN_KEYS) - {"qwen_image_diffsynth_controlnet",  # built here
                                                               "z_image_fun_controlnet", "wan_multitalk",
                                                               "minimax_h3_fun_controlnet", "anima_lllite"}))
def test_other_kinds_are_refused_naming_the_kind(tmp_path, kind):
    path = write_patch_file(tmp_path / f"{kind}.safetensors", foreign_patch_state_dict(kind))
    assert detect_model_patch(foreign_patch_state_dict(kind)).name == kind
    title = next(k.title for k in PATCH_KINDS if k.name == kind)
    with pytest.raises(UnsupportedModelPatchError, match=title) as info:
        load_model_patch(path)
    assert info.value.kind == kind


def test_detection_follows_comfyuis_order():
    # A file with both a Qwen DiffSynth marker and USO's: ComfyUI tests the DiffSynth key first.
    both = {**foreign_patch_state_dict("qwen_image_diffsynth_controlnet"), **uso_projector_state_dict()}
    assert detect_model_patch(both).name == "qwen_image_diffsynth_controlnet"
    assert detect_model_patch(uso_projector_state_dict()).name == "uso_style_projector"
    assert detect_model_patch({"duration_head.x": 0, "attention_pooler.query_tokens": 0}).name == "ltx_duration_head"
    assert detect_model_patch({"something.weight": 0}) is None


def test_unknown_and_inconsistent_files_get_typed_errors(tmp_path):
    with pytest.raises(UnknownModelPatchError, match="not a model patch file"):
        load_model_patch(write_patch_file(tmp_path / "x.safetensors", {"w.weight": torch.zeros(2, 2)}))
    state = uso_projector_state_dict()
    state["feature_embedder.low_projection.weight"] = torch.zeros(32, 16)
    with pytest.raises(ModelPatchError, match="widths differ"):
        load_model_patch(write_patch_file(tmp_path / "bad.safetensors", state))
    state = uso_projector_state_dict()
    del state["feature_embedder.mid_projection.bias"]
    with pytest.raises(ModelPatchError, match="missing"):
        load_model_patch(write_patch_file(tmp_path / "short.safetensors", state))
    state = uso_projector_state_dict()
    del state["feature_embedder.low_layer_norm.weight"]
    with pytest.raises(ModelPatchError, match="low_layer_norm"):
        load_model_patch(write_patch_file(tmp_path / "norms.safetensors", state))


def test_projector_refuses_states_of_another_shape(tmp_path):
    patch = load_model_patch(write_tiny_uso_projector(tmp_path / "uso.safetensors"))
    with pytest.raises(ModelPatchError, match="4 SigLIP tokens of width 16"):
        patch.model(_layers(tokens=5))
    with pytest.raises(ModelPatchError, match=r"\[3, B, tokens, width\]"):
        patch.model(torch.zeros(2, 1, 4, 16))


def _output(layers: int = 20, batch: int = 1, tokens: int = 4, width: int = 16) -> ClipVisionOutput:
    out = ClipVisionOutput()
    states = torch.randn(batch, layers, tokens, width, generator=torch.Generator().manual_seed(7))
    out["all_hidden_states"] = states
    out["penultimate_hidden_states"] = states[:, -2]
    out["last_hidden_state"] = states[:, -1]
    return out


def test_uso_reads_layers_minus_20_minus_11_and_the_penultimate():
    output = _output(layers=22)
    stacked = uso_style_layers(output)
    assert stacked.shape == (3, 1, 4, 16)
    assert torch.equal(stacked[0], output.all_hidden_states[:, 2])  # 22 - 20
    assert torch.equal(stacked[1], output.all_hidden_states[:, 11])  # 22 - 11
    assert torch.equal(stacked[2], output.penultimate_hidden_states)


def test_uso_needs_a_siglip_output_with_twenty_layers():
    with pytest.raises(ModelPatchError, match="at least 20"):
        uso_style_layers(_output(layers=19))
    clip = ClipVisionOutput()
    clip["last_hidden_state"] = torch.zeros(1, 5, 16)
    clip["penultimate_hidden_states"] = torch.zeros(1, 5, 16)
    with pytest.raises(ModelPatchError, match="SigLIP"):
        uso_style_layers(clip)


def test_patch_prepends_style_tokens_and_zero_ids(tmp_path):
    state = uso_projector_state_dict(seed=4)
    patch_model = load_model_patch(write_patch_file(tmp_path / "uso.safetensors", state))
    layers = _layers()
    patch = UsoStyleProjectorPatch(patch_model, layers)
    txt = torch.randn(2, 3, 64)
    txt_ids = torch.arange(18, dtype=torch.float32).reshape(2, 3, 3)
    img, img_ids = torch.randn(2, 5, 64), torch.randn(2, 5, 3)
    out = patch({"img": img, "txt": txt, "img_ids": img_ids, "txt_ids": txt_ids})
    expected = reference_projection(state, layers)
    assert out["img"] is img and out["img_ids"] is img_ids
    assert out["txt"].shape == (2, 9, 64) and out["txt_ids"].shape == (2, 9, 3)
    torch.testing.assert_close(out["txt"][:, :6], expected.expand(2, -1, -1), atol=1e-5, rtol=1e-5)
    assert torch.equal(out["txt"][:, 6:], txt)
    assert torch.equal(out["txt_ids"][:, :6], torch.zeros(2, 6, 3)) and torch.equal(out["txt_ids"][:, 6:], txt_ids)
    with pytest.raises(ModelPatchError, match="width 64"):
        patch({"img": img, "txt": torch.zeros(2, 3, 32), "img_ids": img_ids, "txt_ids": txt_ids})
    with pytest.raises(ModelPatchError, match="reference images"):
        UsoStyleProjectorPatch(patch_model, _layers(batch=2))({"txt": torch.zeros(3, 3, 64), "txt_ids": txt_ids})


def test_flux_runs_with_the_style_tokens_before_its_text(tmp_path):
    state = uso_projector_state_dict(seed=5)
    patch_model = load_model_patch(write_patch_file(tmp_path / "uso.safetensors", state))
    flux_state = tiny_flux_state_dict(True, seed=2)
    with torch.device("meta"):
        flux = FluxTransformer.from_config(FluxConfig.detect_from_weights(flux_state))
    flux.load_state_dict(flux_state, strict=True, assign=True)
    layers = _layers()
    tokens = reference_projection(state, layers)  # [1, 6, 64]

    def by_hand(kwargs: dict) -> dict:
        ids = torch.zeros(1, 6, 3)
        return {**kwargs, "txt": torch.cat([tokens, kwargs["txt"]], 1), "txt_ids": torch.cat([ids, kwargs["txt_ids"]], 1)}

    gen = torch.Generator().manual_seed(0)
    inputs = dict(x=torch.randn(1, 16, 8, 6, generator=gen), timestep=torch.tensor([0.6]),
                  context=torch.randn(1, 4, 32, generator=gen), y=torch.randn(1, 24, generator=gen),
                  guidance=torch.tensor([3.0]))
    with torch.no_grad():
        plain = flux(**inputs, transformer_options={})
        styled = flux(**inputs, transformer_options={"patches": {"post_input": [UsoStyleProjectorPatch(patch_model, layers)]}})
        expected = flux(**inputs, transformer_options={"patches": {"post_input": [by_hand]}})
    torch.testing.assert_close(styled, expected, atol=1e-5, rtol=1e-5)
    assert (styled - plain).abs().max() > 1e-3
