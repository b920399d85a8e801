"""Split-file loading (comfy_core.split): a diffusion model, text encoders and a VAE from separate
files, or a diffusers folder, give the very objects a single-file checkpoint of the same weights
gives (bit for bit); fp8 storage computes as ComfyUI's manual cast does; text-encoder types of
families we do not have are typed errors."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from comfy_core.checkpoint.diffusers_keys import DiffusersLayoutError, unet_names
from comfy_core.checkpoint.errors import MissingComponentError
from comfy_core.families import default_registry
from comfy_core.families.errors import UnknownFamilyError
from comfy_core.loading import LoadOptions, load_checkpoint, load_vae
from comfy_core.split import (
    CLIP_LOADER_TYPES,
    DUAL_CLIP_LOADER_TYPES,
    ClipFilesError,
    UnsupportedClipTypeError,
    load_diffusers,
    load_diffusion_model,
    load_text_encoders,
)
from comfy_core.split.text_encoder_files import slot_for_depth
from tests.fixtures.split_files import (
    UNET_PREFIX,
    split_state_dict,
    text_towers,
    under,
    write_checkpoint,
    write_diffusers_folder,
    write_split_files,
)

pytest.importorskip("diffusers")

FAMILIES = ("sd1", "sd2", "sd2_v", "sdxl")
FAMILY_NAMES = {"sd1": "sd1", "sd2": "sd2", "sd2_v": "sd2", "sdxl": "sdxl"}


class _Models:
    """Per family (built on first use): the checkpoint, its split files and its diffusers folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, dict] = {}

    def __call__(self, family: str) -> dict:
        if family not in self._made:
            state = split_state_dict(family)
            models = self.root / family
            files = write_split_files(state, family, models)
            files["checkpoint"] = write_checkpoint(state, models / "checkpoints" / f"{family}.safetensors")
            files["diffusers"] = write_diffusers_folder(state, family, models / "diffusers" / family)
            files["state"] = state
            self._made[family] = files
        return self._made[family]

    def loaded(self, family: str) -> tuple:
        """`(model, clip, vae, cond, pooled)`: the checkpoint loaded on copied weights and the
        test prompt encoded, once per family (the tests only read them)."""
        files = self(family)
        if "loaded" not in files:
            model, clip, vae = load_checkpoint(files["checkpoint"], COPIED)
            files["loaded"] = (model, clip, vae, *_encode(clip))
        return files["loaded"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> _Models:
    return _Models(tmp_path_factory.mktemp("split"))


def _slots(family: str) -> list[str]:
    return [slot for slot, _kind, _prefix in text_towers(family)]


def _clip_type(family: str) -> str:
    return "sdxl" if family == "sdxl" else "stable_diffusion"


def _same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and torch.equal(sa[key], sb[key]), key


def _encode(clip, text: str = "a red cube, (sharp:1.2)"):
    return clip.encode_from_tokens(clip.tokenize(text), return_pooled=True)


# Zero-copy weights are views of each file's memory map, whose offsets differ between a
# checkpoint and a split file: torch's CPU kernels may round the last bit differently on
# differently aligned data, so forward passes are compared on copied (aligned) weights.
COPIED = LoadOptions(mmap=False)


def _denoised(model, context, y=None, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    sigma = torch.tensor([2.5])
    return model.model.apply_model(x, sigma, context, y)


@pytest.mark.parametrize("family", FAMILIES)
def test_split_files_give_the_checkpoints_model_clip_and_vae(made, family):
    files = made(family)
    model, clip, vae, cond, pooled = made.loaded(family)
    split_model = load_diffusion_model(files["unet"], COPIED)
    split_clip = load_text_encoders([files[slot] for slot in _slots(family)], _clip_type(family))
    split_vae = load_vae(files["vae"])

    assert split_model.model.family.name == FAMILY_NAMES[family]
    assert split_model.model.model_sampling.prediction == model.model.model_sampling.prediction
    _same_state(model.model, split_model.model)
    _same_state(vae.model, split_vae.model)
    split_cond, split_pooled = _encode(split_clip)
    assert torch.equal(cond, split_cond) and torch.equal(pooled, split_pooled)
    assert clip.cond_stage_model.spec.name == split_clip.cond_stage_model.spec.name
    y = model.model.encode_adm(pooled_output=pooled, width=64, height=64)
    assert torch.equal(_denoised(model, cond, y), _denoised(split_model, split_cond, y))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_diffusers_folder_gives_the_checkpoints_objects(made, family):
    files = made(family)
    model, clip, vae = load_checkpoint(files["checkpoint"])
    d_model, d_clip, d_vae = load_diffusers(files["diffusers"])
    assert d_model.model.family.name == FAMILY_NAMES[family]
    assert d_model.model.model_sampling.prediction == model.model.model_sampling.prediction
    _same_state(model.model, d_model.model)
    _same_state(vae.model, d_vae.model)
    assert all(torch.equal(a, b) for a, b in zip(_encode(clip), _encode(d_clip)))


def test_unet_loader_also_takes_a_whole_checkpoint_and_a_prefixed_unet(made, tmp_path):
    files = made("sd1")
    model, _, _ = load_checkpoint(files["checkpoint"], output_clip=False, output_vae=False)
    _same_state(model.model, load_diffusion_model(files["checkpoint"]).model)
    prefixed = write_checkpoint({k: v for k, v in files["state"].items() if k.startswith(UNET_PREFIX)},
                                tmp_path / "prefixed.safetensors")
    _same_state(model.model, load_diffusion_model(prefixed).model)


def test_sd2_prediction_of_a_bare_unet_follows_the_single_file_rule(made, tmp_path):
    assert load_diffusion_model(made("sd2")["unet"]).model.model_sampling.prediction == "eps"
    assert load_diffusion_model(made("sd2_v")["unet"]).model.model_sampling.prediction == "v"
    assert load_diffusion_model(made("sd2")["unet"], LoadOptions(prediction="v")).model.model_sampling.prediction == "v"


def test_a_bare_refiner_unet_is_told_from_sdxl_by_its_shapes(tmp_path):
    registry = default_registry()
    for family, expected in (("sdxl_refiner", "sdxl_refiner"), ("sdxl", "sdxl"), ("sd1", "sd1"), ("sd2", "sd2")):
        state = split_state_dict(family)
        tensors = {k: v for k, v in state.items() if k.startswith(UNET_PREFIX)}  # .shape is all detection reads
        assert registry.detect_diffusion_model(tensors).family.name == expected


def test_a_file_without_a_unet_is_a_typed_error(made, tmp_path):
    with pytest.raises(MissingComponentError, match="not a diffusion model"):
        load_diffusion_model(made("sd1")["vae"])
    junk = dict(under(made("sd1")["state"], UNET_PREFIX))
    junk["input_blocks.0.0.weight"] = torch.zeros(32, 3, 3, 3)  # a 3-channel UNet: no family has one
    with pytest.raises(UnknownFamilyError):
        load_diffusion_model(write_checkpoint(junk, tmp_path / "odd.safetensors"))


def test_diffusers_names_that_fit_nowhere_are_refused():
    with pytest.raises(DiffusersLayoutError, match="time_embedding.cond_proj"):
        unet_names(["down_blocks.0.resnets.0.conv1.weight", "conv_in.weight", "time_embedding.cond_proj.weight"])


# --- fp8 storage ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_fp8_storage_holds_fp8_weights_and_computes_as_a_manual_cast(made, family, dtype):
    """ComfyUI's fp8 UNETLoader: every UNet weight stored in fp8 (rounded from the file), each
    layer computing in float32 on the CPU with its weight cast up; so the result equals a float32
    model holding the fp8-rounded weights, bit for bit."""
    files = made(family)
    stored = load_diffusion_model(files["unet"], weight_dtype=dtype)
    assert {p.dtype for p in stored.model.parameters()} == {dtype}
    assert stored.model.manual_cast_dtype == torch.float32 and stored.model.get_dtype() == dtype
    file_weights = under(files["state"], UNET_PREFIX)
    for name, param in stored.model.diffusion_model.state_dict().items():
        assert torch.equal(param.view(torch.uint8), file_weights[name].to(dtype).view(torch.uint8)), name

    reference = load_diffusion_model(files["unet"], COPIED)  # float32
    with torch.no_grad():
        for name, param in reference.model.diffusion_model.named_parameters():
            param.copy_(file_weights[name].to(dtype).to(torch.float32))
    model, _, _, cond, pooled = made.loaded(family)
    y = model.model.encode_adm(pooled_output=pooled, width=64, height=64)
    out = _denoised(stored, cond, y)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.equal(out, _denoised(reference, cond, y))
    assert not torch.equal(out, _denoised(model, cond, y))  # fp8 rounding does change the result


def test_fp8_fast_is_plain_fp8_where_the_device_has_no_fp8_matrix_products(made):
    from comfy_core.models.storage_cast import Fp8Linear, fp8_compute_supported

    assert not fp8_compute_supported("cpu")  # fp8 matrix products are a CUDA (capability >= 8.9) path
    files = made("sd1")
    fast = load_diffusion_model(files["unet"], weight_dtype=torch.float8_e4m3fn, fp8_optimizations=True)
    plain = load_diffusion_model(files["unet"], weight_dtype=torch.float8_e4m3fn)
    assert any(isinstance(m, Fp8Linear) for m in fast.model.modules())
    assert not any(isinstance(m, Fp8Linear) for m in plain.model.modules())
    context = torch.randn(1, 77, 64, generator=torch.Generator().manual_seed(3))
    assert torch.equal(_denoised(fast, context), _denoised(plain, context))


def test_fp8_storage_keeps_parameter_names_for_patchers(made):
    stored = load_diffusion_model(made("sd1")["unet"], weight_dtype=torch.float8_e4m3fn)
    plain = load_diffusion_model(made("sd1")["unet"])
    assert list(stored.model.state_dict()) == list(plain.model.state_dict())


# --- text encoders ---------------------------------------------------------------------------------

def test_the_tower_comes_from_its_depth_as_in_comfyui():
    assert [slot_for_depth(n) for n in (3, 12, 22, 23, 24, 30, 31, 32)] == \
        ["clip_l", "clip_l", "clip_l", "clip_h", "clip_h", "clip_h", "clip_g", "clip_g"]


def test_a_lone_bigg_file_is_the_sdxl_refiners_encoder(tmp_path):
    state = split_state_dict("sdxl_refiner")
    checkpoint = write_checkpoint(state, tmp_path / "refiner.safetensors")
    files = write_split_files(state, "sdxl_refiner", tmp_path)
    _, clip, _ = load_checkpoint(checkpoint, output_vae=False)
    split = load_text_encoders([files["clip_g"]])
    assert split.cond_stage_model.spec.name == "sdxl_refiner"
    assert all(torch.equal(a, b) for a, b in zip(_encode(clip), _encode(split)))


def test_an_open_clip_layout_file_loads_as_its_transformers_layout_twin(made, tmp_path):
    files = made("sd2")
    raw = write_checkpoint(under(files["state"], "cond_stage_model.model."), tmp_path / "open_clip_h.safetensors")
    a, b = load_text_encoders([raw]), load_text_encoders([files["clip_h"]])
    assert a.cond_stage_model.spec.name == "sd2"
    assert all(torch.equal(x, y) for x, y in zip(_encode(a), _encode(b)))


def test_dual_clip_order_does_not_matter(made):
    files = made("sdxl")
    a = load_text_encoders([files["clip_l"], files["clip_g"]], "sdxl")
    b = load_text_encoders([files["clip_g"], files["clip_l"]], "sdxl")
    assert all(torch.equal(x, y) for x, y in zip(_encode(a), _encode(b)))


@pytest.mark.parametrize("clip_type", sorted(set(CLIP_LOADER_TYPES + DUAL_CLIP_LOADER_TYPES)
                                              - {t for s in default_registry().encoder_sets() for t in s.clip_types}))
def test_types_of_families_we_do_not_have_are_typed_errors(clip_type, tmp_path):
    # Refused before any file is read: the file need not even exist.
    with pytest.raises(UnsupportedClipTypeError, match=f"'{clip_type}' is not supported: it needs") as caught:
        load_text_encoders([tmp_path / "missing.safetensors"], clip_type)
    assert caught.value.clip_type == clip_type


def test_files_that_do_not_form_the_asked_set_are_typed_errors(made, tmp_path):
    files = made("sdxl")
    with pytest.raises(ClipFilesError, match=r"sdxl needs CLIP-L\+OpenCLIP-bigG; each file must hold a different tower"):
        load_text_encoders([files["clip_l"], made("sd1")["clip_l"]], "sdxl")
    with pytest.raises(ClipFilesError, match="sdxl needs"):
        load_text_encoders([files["clip_g"]], "sdxl")
    t5 = write_checkpoint({"encoder.block.0.layer.0.SelfAttention.k.weight": torch.zeros(8, 8)},
                          tmp_path / "t5.safetensors")
    with pytest.raises(ClipFilesError, match="T5"):
        load_text_encoders([t5])
