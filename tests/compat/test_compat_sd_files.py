"""ComfyUI's model and file API (`comfy.sd`, `comfy.lora`, `comfy.utils`, `comfy.sd1_clip`,
`comfy.sdxl_clip`, `comfy.clip_vision`) as packs call it: the fixture pack
tests/compat/api_packs/files_pack loads and uses models through it, and its outputs equal the
built-in nodes' bit for bit."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch

PACK = Path(__file__).parent / "api_packs" / "files_pack" / "__init__.py"


@pytest.fixture
def files(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    """The session's model folders (tmp_path/models) hold the tiny SD1 checkpoint, a LoRA, a
    VAE file and a CLIP vision file; the working directory is tmp_path, so the built-in nodes
    (default environment) read the same folders. Returns the imported fixture pack."""
    from tests.fixtures.clip_vision import write_tiny_clip_vision

    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    for kind in ("checkpoints", "loras", "vae", "clip_vision", "embeddings"):
        (models / kind).mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, models / "checkpoints" / "tiny.safetensors")
    shutil.copy(tiny_sd1_ckpt, models / "vae" / "tiny_vae.safetensors")  # first_stage_model.* keys
    write_tiny_clip_vision(models / "clip_vision" / "vision.safetensors")
    spec = importlib.util.spec_from_file_location("files_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("files_pack_under_test", None)


def _builtin_checkpoint():
    from nodes.loaders import checkpoint_loader_simple

    return checkpoint_loader_simple("tiny.safetensors")


def _write_lora(path: Path, model) -> None:
    from tests.fixtures.loras import write_unet_lora

    write_unet_lora(path, model, seed=3, rank=2, scale=0.05)


def test_checkpoint_loader_gives_our_objects_and_the_builtin_weights(files):
    import comfy.sd
    from comfy_core.patching.model import ModelPatcher

    model, clip, vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    ref_model, ref_clip, ref_vae = _builtin_checkpoint()
    assert isinstance(model, ModelPatcher) and isinstance(clip, comfy.sd.CLIP) and isinstance(vae, comfy.sd.VAE)
    assert isinstance(ref_vae, comfy.sd.VAE) and isinstance(ref_clip, comfy.sd.CLIP)  # our loaders' objects pass
    ours, theirs = model.model_state_dict(), ref_model.model_state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_text_encoding_equals_clip_text_encode(files):
    from nodes.conditioning import clip_text_encode

    _model, clip, _vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    plain, scheduled, is_sdxl = files.FilesTextEncode().encode(clip, "a (red:1.3) cat, photo")
    (reference,) = clip_text_encode("a (red:1.3) cat, photo", _builtin_checkpoint()[1])
    assert not is_sdxl
    for conditioning in (plain, scheduled):
        assert torch.equal(conditioning[0][0], reference[0][0])
        assert torch.equal(conditioning[0][1]["pooled_output"], reference[0][1]["pooled_output"])


def test_lora_through_comfy_sd_and_through_key_maps_equal_lora_loader(files, tmp_path):
    from nodes.patching import lora_loader

    model, clip, _vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    _write_lora(tmp_path / "models" / "loras" / "tiny_lora.safetensors", model)
    ref_model, ref_clip, _ = _builtin_checkpoint()
    ref_patched, _ref_clip = lora_loader(ref_model, ref_clip, "tiny_lora.safetensors", 0.8, 1.0)
    via_sd, _clip = files.FilesLoraLoader().load(model, clip, "tiny_lora.safetensors", 0.8, 1.0)
    (via_keys,) = files.FilesLoraByKeyMap().load(model, "tiny_lora.safetensors", 0.8)
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    sigma = torch.tensor([3.0])
    context = torch.randn(1, 77, clip.cond_stage_model.clip_l.width, generator=torch.Generator().manual_seed(1))

    def run(patcher):
        with torch.no_grad(), patcher.applied() as module:
            return module.apply_model(x, sigma, context)

    reference = run(ref_patched)
    assert not torch.equal(reference, run(ref_model))  # the LoRA changes the output ...
    assert torch.equal(run(via_sd), reference)  # ... exactly as LoraLoader's does
    assert torch.equal(run(via_keys), reference)


def test_vae_methods_and_vae_from_state_dict_equal_vae_decode(files):
    from nodes.latent import vae_decode, vae_encode

    _model, _clip, vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    latent = {"samples": torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(2))}
    image, encoded = files.FilesVAE().run(vae, latent)
    (reference,) = vae_decode(latent, _builtin_checkpoint()[2])
    assert torch.equal(image, reference)
    assert torch.equal(encoded["samples"], vae_encode(reference, _builtin_checkpoint()[2])[0]["samples"])
    (from_sd,) = files.FilesVAEFromStateDict().load("tiny_vae.safetensors")
    assert torch.equal(files.FilesVAE().run(from_sd, latent)[0], reference)
    assert (vae.downscale_ratio, vae.upscale_ratio, vae.latent_channels, vae.latent_dim) == (8, 8, 4, 2)
    assert vae.patcher is vae and vae.first_stage_model is vae.model and vae.vae_dtype == torch.float32
    assert vae.spacial_compression_decode() == 8 and vae.memory_used_decode((1, 4, 8, 8), torch.float32) > 0


def test_clip_vision_encode_image_and_model_call_equal_clip_vision_encode(files):
    from nodes.clip_vision import encode, load_clip

    image = torch.rand(1, 40, 48, 3, generator=torch.Generator().manual_seed(4))
    direct, manual = files.FilesClipVisionEncode().encode("vision.safetensors", image)
    (reference,) = encode(load_clip("vision.safetensors")[0], image, "center")
    for key in ("last_hidden_state", "image_embeds", "penultimate_hidden_states"):
        assert torch.equal(direct[key], reference[key])
        assert torch.equal(manual[key], reference[key])


def test_family_classes_are_comfyui_names(files, tmp_path):
    import comfy.sd1_clip
    import comfy.sdxl_clip
    from comfy_core.loading import load_checkpoint
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    _model, clip, _vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    assert type(clip.cond_stage_model).__name__ == "SD1ClipModel"
    assert isinstance(clip.cond_stage_model, comfy.sd1_clip.SD1ClipModel)
    assert isinstance(clip.cond_stage_model.clip_l, comfy.sd1_clip.SDClipModel)
    assert isinstance(clip.tokenizer, comfy.sd1_clip.SD1Tokenizer)
    assert isinstance(clip.tokenizer.clip_l, comfy.sd1_clip.SDTokenizer)
    _m, xl_clip, _v = load_checkpoint(write_tiny_checkpoint(tmp_path / "xl.safetensors", family="sdxl"),
                                      output_vae=False)
    assert type(xl_clip.cond_stage_model).__name__ == "SDXLClipModel"  # smZNodes' test
    assert isinstance(xl_clip.cond_stage_model.clip_g, comfy.sdxl_clip.SDXLClipG)
    assert isinstance(xl_clip.cond_stage_model.clip_g, comfy.sd1_clip.SDClipModel)
    assert isinstance(xl_clip.tokenizer, comfy.sdxl_clip.SDXLTokenizer)
    # one tower's encode_token_weights is the slice of the set's output it contributes
    tokens = xl_clip.tokenize("a (cat:1.2)")
    cond, _pooled = xl_clip.encode_from_tokens(tokens, return_pooled=True)
    with xl_clip.patcher.applied() as encoders:
        g_cond, _g_pooled = encoders.clip_g.encode_token_weights(tokens["g"])
    assert torch.equal(g_cond, cond[..., -g_cond.shape[-1]:])


def test_sd1_clip_functions():
    import comfy.sd1_clip as sd1_clip

    text = sd1_clip.escape_important(r"a \(b\) (c:1.5)")
    assert sd1_clip.token_weights(text, 1.0) == [("a \0\2b\0\1 ", 1.0), ("c", 1.5)]
    assert sd1_clip.unescape_important("\0\2b\0\1") == "(b)"
    assert sd1_clip.gen_empty_tokens({"start": 49406, "end": 49407, "pad": 0}, 5) == [49406, 49407, 0, 0, 0]


def test_tokenizer_option_min_length_and_refusal(files):
    from comfy_core.text_encoders.errors import TokenizeError

    _model, clip, _vae = files.FilesCheckpointLoader().load("tiny.safetensors")
    padded = clip.clone()
    padded.set_tokenizer_option("clip_l_min_length", 90)
    assert len(padded.tokenize("a cat")["l"][0]) == 90 and len(clip.tokenize("a cat")["l"][0]) == 77
    assert padded.cache_signature() != clip.cache_signature()
    with pytest.raises(TokenizeError, match="not supported"):
        clip.set_tokenizer_option("t5xxl_min_length", 3)


def test_clip_type_other_families_are_typed_errors(files, tmp_path):
    import comfy.sd
    from comfy_core.split import UnsupportedClipTypeError

    with pytest.raises(UnsupportedClipTypeError, match="stable_cascade"):
        comfy.sd.load_clip([tmp_path / "x.safetensors"], clip_type=comfy.sd.CLIPType.STABLE_CASCADE)
    from comfy.text_encoders.sd3_clip import SD3ClipModel
    from comfy_core.families.sd3.clip import SD3ClipModel as ours

    assert SD3ClipModel is ours  # SD3's encoder set is ours now (tests/compat/test_compat_dit_text.py)


def test_diffusion_model_state_dict_loads_like_a_file(files, tmp_path):
    import comfy.sd
    from safetensors.torch import load_file

    sd = load_file(str(tmp_path / "models" / "checkpoints" / "tiny.safetensors"))
    unet = {k: v for k, v in sd.items() if k.startswith("model.diffusion_model.")}
    model = comfy.sd.load_diffusion_model_state_dict(unet)
    reference = _builtin_checkpoint()[0].model_state_dict()
    ours = model.model_state_dict()
    assert ours.keys() == reference.keys() and all(torch.equal(ours[k], reference[k]) for k in ours)


def test_comfy_lora_calculate_weight_and_helpers():
    import comfy.lora

    weight = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
    diff = torch.randn(4, 3, generator=torch.Generator().manual_seed(6))
    out = comfy.lora.calculate_weight([(0.5, ("diff", (diff,)), 2.0, None, None)], weight.clone(), "w")
    assert torch.equal(out, weight * 2.0 + 0.5 * diff)
    padded = comfy.lora.pad_tensor_to_shape(torch.ones(2, 2), (3, 4))
    assert padded.sum() == 4 and padded.shape == (3, 4)
    assert comfy.lora.LORA_CLIP_MAP["self_attn.q_proj"] == "self_attn_q_proj"
