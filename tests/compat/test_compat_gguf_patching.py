"""ComfyUI-GGUF's patcher paths on our runtime, through the fixture pack
tests/compat/api_packs/gguf_like_pack: its CLIP loader re-classes the CLIP's patcher with
`QModelPatcher.clone(clip.patcher)` (ComfyUI's `CLIP.patcher` is a ModelPatcher), and LoRA
reaches its quantized weights through its own `patch_weight_to_device` (the patches ride on the
tensor and are applied in the layer's forward) and `unpatch_model(unpatch_weights=True)`."""
from __future__ import annotations

import torch
from safetensors.torch import load_file

from tests.compat.test_compat_gguf import _denoised, gguf  # noqa: F401  (fixture)


def _unet_lora(model, seed=3, scale=0.05):
    """A kohya LoRA over to_q / to_v (quantized Linear weights) and proj_in (a plain 1x1 conv)."""
    from comfy_core.lora import unet_key_map

    g = torch.Generator().manual_seed(seed)
    shapes = {k: tuple(v.shape) for k, v in model.model_state_dict().items()}
    tensors = {}
    seen = set()
    for layer, key in unet_key_map(model.model).items():
        if key.endswith(("to_q.weight", "to_v.weight", "proj_in.weight")) and key not in seen:
            seen.add(key)  # one of the key map's names for each weight
            shape = shapes[key]
            tail = shape[2:]
            tensors[f"{layer}.lora_up.weight"] = torch.randn(shape[0], 2, *tail, generator=g) * scale
            tensors[f"{layer}.lora_down.weight"] = torch.randn(2, shape[1], *tail, generator=g) * scale
    return tensors


def _with_lora(model, tensors, strength=0.8):
    from comfy_core.lora import load_lora_for_models

    patched, _clip, report = load_lora_for_models(model, None, tensors, strength, 0.0)
    assert report.model_keys == len(tensors) // 2 and not report.unmatched
    return patched


def test_clip_loader_reclasses_our_clip_patcher_as_the_packs_model_patcher(gguf):
    import comfy.model_patcher
    from comfy_core.patching.clip import ClipPatcher
    from nodes.loaders import clip_loader

    (reference,) = clip_loader("clip_l.safetensors", "stable_diffusion")
    assert isinstance(reference.patcher, ClipPatcher)
    assert isinstance(reference.patcher, comfy.model_patcher.ModelPatcher)
    (clip,) = gguf.QuantizedCLIPLoader().load_clip("clip_l.safetensors")
    assert type(clip.patcher) is gguf.QModelPatcher
    assert clip.patcher.model is clip.cond_stage_model and clip.patcher.wrappers is not reference.patcher.wrappers
    twin = clip.clone()
    assert type(twin.patcher) is gguf.QModelPatcher and twin.patcher.model is clip.patcher.model


def test_lora_on_the_packs_clip_patcher_matches_lora_on_ours(gguf, tmp_path):
    from comfy_core.lora import load_lora_for_models, text_encoder_key_map
    from nodes.conditioning import clip_text_encode
    from nodes.loaders import clip_loader

    (clip,) = gguf.QuantizedCLIPLoader().load_clip("clip_l.safetensors")
    (reference,) = clip_loader("clip_l.safetensors", "stable_diffusion")
    g = torch.Generator().manual_seed(7)
    weights = dict(reference.patcher.model_state_dict())
    tensors = {}
    seen = set()
    for layer, key in text_encoder_key_map(reference.patcher.model).items():
        if key.endswith(("q_proj.weight", "v_proj.weight")) and key not in seen:
            seen.add(key)
            rows, cols = weights[key].shape
            tensors[f"{layer}.lora_up.weight"] = torch.randn(rows, 2, generator=g) * 0.1
            tensors[f"{layer}.lora_down.weight"] = torch.randn(2, cols, generator=g) * 0.1
    assert tensors
    _m, ours, report = load_lora_for_models(None, clip, tensors, 0.0, 1.0)
    assert report.clip_keys == len(tensors) // 2 and type(ours.patcher) is gguf.QModelPatcher
    _m, theirs, _r = load_lora_for_models(None, reference, tensors, 0.0, 1.0)
    (a,) = clip_text_encode("a red cat", ours)
    (b,) = clip_text_encode("a red cat", theirs)
    (plain,) = clip_text_encode("a red cat", clip)
    assert torch.equal(a[0][0], b[0][0])
    assert (a[0][0] - plain[0][0]).abs().max() > 1e-3
    # the pack's own backups are gone once the weights are back
    assert clip.patcher.backup == {} and ours.patcher.backup == {}


def test_lora_reaches_quantized_weights_through_the_packs_patch_weight_to_device(gguf, monkeypatch):
    from comfy_core.split import load_diffusion_model

    (model,) = gguf.QuantizedUnetLoader().load_unet("tiny.safetensors")
    tensors = _unet_lora(model)
    lora = _with_lora(model, tensors)
    assert type(lora) is gguf.QModelPatcher
    calls = []
    original = gguf.QModelPatcher.patch_weight_to_device

    def spy(self, key, device_to=None, inplace_update=False):
        calls.append(key)
        return original(self, key, device_to, inplace_update)

    monkeypatch.setattr(gguf.QModelPatcher, "patch_weight_to_device", spy)
    unet = model.model.diffusion_model
    to_q = unet.input_blocks[1][1].transformer_blocks[0].attn1.to_q
    proj_in = unet.input_blocks[1][1].proj_in
    before_q, before_proj = to_q.weight, proj_in.weight
    g = torch.Generator().manual_seed(0)
    x, context = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 7, 64, generator=g)
    with torch.no_grad(), lora.applied() as module:
        assert sorted(calls) == sorted(k for k, v in lora.patches.items() if v)
        # quantized: the packed tensor stays, the patches ride on it; plain: a patched tensor
        assert to_q.weight.dtype == torch.uint8 and to_q.weight.patches
        assert proj_in.weight is not before_proj and not torch.equal(proj_in.weight, before_proj)
        ours = module.apply_model(x, torch.tensor([3.0]), c_crossattn=context)
    # the module's own tensors are back, with no patches left on them
    assert to_q.weight is before_q and proj_in.weight is before_proj
    assert not any(getattr(p, "patches", None) for p in unet.parameters())
    assert lora.backup == {}

    # LoRA on our loader over the same dequantized weights
    dequantized = gguf.dequantized_state_dict(gguf.quantized_state_dict(load_file("models/checkpoints/tiny.safetensors")))
    reference = _with_lora(load_diffusion_model(dequantized), tensors)
    with torch.no_grad(), reference.applied() as module:
        theirs = module.apply_model(x, torch.tensor([3.0]), c_crossattn=context)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    with torch.no_grad(), model.applied() as module:
        plain = module.apply_model(x, torch.tensor([3.0]), c_crossattn=context)
    assert (ours - plain).abs().max() > 1e-3


def test_a_subclass_calling_super_gets_comfyuis_patch_weight_to_device(session, tiny_sd1_ckpt):
    """An override that only observes and calls super() patches as our own path does, bit for
    bit; with `weight_inplace_update` the values are written into the module's own tensors and
    copied back from `backup` on exit (ComfyUI's inplace path)."""
    import comfy.model_patcher
    from comfy_core.loading import load_checkpoint

    seen = []

    class Observing(comfy.model_patcher.ModelPatcher):
        def patch_weight_to_device(self, key, device_to=None, inplace_update=False):
            seen.append(key)
            return super().patch_weight_to_device(key, device_to, inplace_update)

    model = load_checkpoint(tiny_sd1_ckpt)[0]
    lora = _with_lora(model, _unet_lora(model))
    expected = _denoised(lora)
    observed = lora.clone()
    observed.__class__ = Observing
    assert torch.equal(_denoised(observed), expected) and seen
    proj_in = model.model.diffusion_model.input_blocks[1][1].proj_in
    before, values = proj_in.weight, proj_in.weight.detach().clone()
    observed.weight_inplace_update = True
    inside = {}

    def spy_forward(*args, **kwargs):
        inside["changed"] = not torch.equal(proj_in.weight, values)
        inside["same_object"] = proj_in.weight is before
        return original_forward(*args, **kwargs)

    original_forward = proj_in.forward
    proj_in.forward = spy_forward
    try:
        # the same values in the module's own memory: matrix products may round differently in the
        # last bit over other memory, nothing more
        torch.testing.assert_close(_denoised(observed), expected, rtol=0, atol=1e-5)
    finally:
        del proj_in.forward
    assert inside == {"changed": True, "same_object": True}
    assert proj_in.weight is before and torch.equal(proj_in.weight, values) and observed.backup == {}
