"""LoRA formats against direct computation: kohya (LDM and diffusers names), diffusers, PEFT,
LoCon (conv, Tucker), DoRA, LoHa, LoKr, full diffs; text encoder names; unmatched keys; stacking.
LoRA files are generated here and written to disk with safetensors."""
from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from comfy_core.lora import load_lora_for_models, parse_lora, text_encoder_key_map, unet_key_map
from comfy_core.patching import ClipPatcher, ModelPatcher, PatchDataError
from tests.fixtures.checkpoints import tiny_state_dict


def module_from_tensors(tensors: dict[str, torch.Tensor]) -> nn.Module:
    """A module tree whose parameters have exactly these names (no forward needed here)."""
    root = nn.Module()
    for name, tensor in tensors.items():
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, nn.Parameter(tensor.clone(), requires_grad=False))
    return root


@pytest.fixture(scope="module")
def sd1() -> dict[str, torch.Tensor]:
    return tiny_state_dict("sd1")


@pytest.fixture(scope="module")
def sdxl() -> dict[str, torch.Tensor]:
    return tiny_state_dict("sdxl")


def unet_patcher(sd: dict[str, torch.Tensor]) -> ModelPatcher:
    return ModelPatcher(module_from_tensors({k[len("model."):]: v for k, v in sd.items()
                                             if k.startswith("model.diffusion_model.")}))


def clip_patcher(slots: dict[str, str], sd: dict[str, torch.Tensor]) -> ClipPatcher:
    """Encoders named like ours (`clip_l.transformer.text_model....`) from HF-layout fixture keys."""
    tensors = {}
    for slot, prefix in slots.items():
        for k, v in sd.items():
            if k.startswith(prefix):
                tensors[f"{slot}.transformer.text_model.{k[len(prefix):]}"] = v
    return ClipPatcher(module_from_tensors(tensors))


def roundtrip(tmp_path: Path, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    path = tmp_path / "lora.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return load_file(str(path))


def patched_weight(patcher, key: str) -> torch.Tensor:
    with patcher.applied() as module:
        return dict(module.named_parameters())[key].detach().clone()


def original(patcher, key: str) -> torch.Tensor:
    return dict(patcher.model.named_parameters())[key].detach().clone()


G = torch.Generator().manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G) * 0.1


Q_LDM = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"
Q_DIFF = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q"


@pytest.mark.parametrize("layer", [
    "lora_unet_" + Q_DIFF.replace(".", "_"),  # kohya, diffusers UNet names (SD1.5 trainers)
    "lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q",  # kohya, LDM names (SDXL trainers)
])
def test_kohya_lora_matches_direct_computation(tmp_path, sd1, layer):
    model = unet_patcher(sd1)
    w = original(model, Q_LDM)
    rank, alpha, strength = 4, 2.0, 0.7
    up, down = rand(w.shape[0], rank), rand(rank, w.shape[1])
    lora = roundtrip(tmp_path, {f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down,
                                f"{layer}.alpha": torch.tensor(alpha)})
    new_model, _, report = load_lora_for_models(model, None, lora, strength, 0.0)
    assert report.model_keys == 1 and report.unmatched == []
    expected = w + strength * (alpha / rank) * (up @ down)
    torch.testing.assert_close(patched_weight(new_model, Q_LDM), expected, atol=1e-6, rtol=1e-6)
    assert torch.equal(original(model, Q_LDM), w)  # the input patcher is untouched


@pytest.mark.parametrize("naming", ["diffusers", "peft", "processor"])
def test_diffusers_and_peft_names_without_alpha(tmp_path, sd1, naming):
    model = unet_patcher(sd1)
    key = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_out.0.weight"
    w = original(model, key)
    up, down = rand(w.shape[0], 2), rand(2, w.shape[1])
    base = "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn2"
    tensors = {
        "diffusers": {f"{base}.to_out.0.lora.up.weight": up, f"{base}.to_out.0.lora.down.weight": down},
        "peft": {f"{base}.to_out.0.lora_B.weight": up, f"{base}.to_out.0.lora_A.weight": down},
        "processor": {f"{base}.processor.to_out_lora.up.weight": up, f"{base}.processor.to_out_lora.down.weight": down},
    }[naming]
    new_model, _, report = load_lora_for_models(model, None, roundtrip(tmp_path, tensors), 1.0, 1.0)
    assert report.model_keys == 1
    torch.testing.assert_close(patched_weight(new_model, key), w + up @ down, atol=1e-6, rtol=1e-6)


def test_linear_lora_on_1x1_conv_proj_in(tmp_path, sd1):
    # SD1's proj_in is a 1x1 conv; LoRAs store it as a linear [r, in] pair.
    model = unet_patcher(sd1)
    key = "diffusion_model.input_blocks.1.1.proj_in.weight"
    w = original(model, key)
    assert w.dim() == 4
    up, down = rand(w.shape[0], 3), rand(3, w.shape[1])
    layer = "lora_unet_down_blocks_0_attentions_0_proj_in"
    lora = roundtrip(tmp_path, {f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down,
                                f"{layer}.alpha": torch.tensor(3.0)})
    new_model, _, _ = load_lora_for_models(model, None, lora, 1.0, 1.0)
    torch.testing.assert_close(patched_weight(new_model, key), w + (up @ down).reshape(w.shape), atol=1e-6, rtol=1e-6)


def test_locon_conv3x3_and_tucker(tmp_path, sd1):
    model = unet_patcher(sd1)
    key1 = "diffusion_model.input_blocks.1.0.in_layers.2.weight"  # resnet conv1, 3x3
    key2 = "diffusion_model.input_blocks.1.0.out_layers.3.weight"  # resnet conv2, 3x3
    w1, w2 = original(model, key1), original(model, key2)
    out, cin, kh, kw = w1.shape
    r = 2
    up, down = rand(out, r, 1, 1), rand(r, cin, kh, kw)
    out2, cin2 = w2.shape[:2]
    t_up, t_mid, t_down = rand(out2, r, 1, 1), rand(r, r, kh, kw), rand(r, cin2, 1, 1)
    l1, l2 = "lora_unet_down_blocks_0_resnets_0_conv1", "lora_unet_down_blocks_0_resnets_0_conv2"
    lora = roundtrip(tmp_path, {
        f"{l1}.lora_up.weight": up, f"{l1}.lora_down.weight": down, f"{l1}.alpha": torch.tensor(1.0),
        f"{l2}.lora_up.weight": t_up, f"{l2}.lora_mid.weight": t_mid, f"{l2}.lora_down.weight": t_down,
        f"{l2}.alpha": torch.tensor(4.0),
    })
    new_model, _, report = load_lora_for_models(model, None, lora, 0.5, 1.0)
    assert report.model_keys == 2
    direct1 = (up.flatten(1) @ down.flatten(1)).reshape(w1.shape)
    # Tucker: W[o,i,h,w] = sum_ab up[o,a] mid[a,b,h,w] down[b,i], computed with explicit loops over ranks.
    direct2 = torch.zeros_like(w2)
    for a in range(r):
        for b in range(r):
            direct2 += t_up[:, a, 0, 0][:, None, None, None] * t_mid[a, b][None, None] * t_down[b, :, 0, 0][None, :, None, None]
    torch.testing.assert_close(patched_weight(new_model, key1), w1 + 0.5 * (1.0 / r) * direct1, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(patched_weight(new_model, key2), w2 + 0.5 * (4.0 / r) * direct2, atol=1e-6, rtol=1e-6)


def test_dora_rescales_columns(tmp_path, sd1):
    model = unet_patcher(sd1)
    w = original(model, Q_LDM)
    up, down = rand(w.shape[0], 2), rand(2, w.shape[1])
    magnitude = torch.rand(1, w.shape[1], generator=G) + 0.5
    layer = "lora_unet_" + Q_DIFF.replace(".", "_")
    lora = roundtrip(tmp_path, {f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down,
                                f"{layer}.alpha": torch.tensor(2.0), f"{layer}.dora_scale": magnitude})
    new_model, _, _ = load_lora_for_models(model, None, lora, 1.0, 1.0)
    v = w + up @ down
    expected = v * (magnitude / v.norm(dim=0, keepdim=True))  # per input column (Liu et al. 2024)
    got = patched_weight(new_model, Q_LDM)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got.norm(dim=0), magnitude[0], atol=1e-5, rtol=1e-5)
    half, _, _ = load_lora_for_models(model, None, lora, 0.5, 1.0)
    torch.testing.assert_close(patched_weight(half, Q_LDM), w + 0.5 * (expected - w), atol=1e-6, rtol=1e-5)


def test_loha_and_lokr(tmp_path, sd1):
    model = unet_patcher(sd1)
    kq = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_k.weight"
    kv = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_v.weight"
    wq, wv = original(model, kq), original(model, kv)
    out, cin = wq.shape
    r = 2
    a1, b1, a2, b2 = rand(out, r), rand(r, cin), rand(out, r), rand(r, cin)
    k1 = rand(2, 4)  # kron(k1 [2,4], k2 [out/2, cin/4]) -> [out, cin]
    k2a, k2b = rand(out // 2, r), rand(r, cin // 4)
    lh = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_k"
    lk = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_v"
    lora = roundtrip(tmp_path, {
        f"{lh}.hada_w1_a": a1, f"{lh}.hada_w1_b": b1, f"{lh}.hada_w2_a": a2, f"{lh}.hada_w2_b": b2,
        f"{lh}.alpha": torch.tensor(1.0),
        f"{lk}.lokr_w1": k1, f"{lk}.lokr_w2_a": k2a, f"{lk}.lokr_w2_b": k2b, f"{lk}.alpha": torch.tensor(4.0),
    })
    new_model, _, report = load_lora_for_models(model, None, lora, 1.0, 1.0)
    assert report.model_keys == 2
    loha = (a1 @ b1) * (a2 @ b2) * (1.0 / r)
    kron = torch.zeros(out, cin)
    w2 = k2a @ k2b
    for i in range(2):
        for j in range(4):
            kron[i * (out // 2):(i + 1) * (out // 2), j * (cin // 4):(j + 1) * (cin // 4)] = k1[i, j] * w2
    torch.testing.assert_close(patched_weight(new_model, kq), wq + loha, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(patched_weight(new_model, kv), wv + (4.0 / r) * kron, atol=1e-6, rtol=1e-6)


def test_full_diff_and_bias_diff(tmp_path, sd1):
    model = unet_patcher(sd1)
    key = "diffusion_model.out.2.weight"
    w, b = original(model, key), original(model, "diffusion_model.out.2.bias")
    d, db = rand(*w.shape), rand(*b.shape)
    lora = roundtrip(tmp_path, {"lora_unet_conv_out.diff": d, "lora_unet_conv_out.diff_b": db})
    new_model, _, report = load_lora_for_models(model, None, lora, 2.0, 1.0)
    assert report.model_keys == 2
    torch.testing.assert_close(patched_weight(new_model, key), w + 2.0 * d, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(patched_weight(new_model, "diffusion_model.out.2.bias"), b + 2.0 * db, atol=1e-6, rtol=1e-6)


def test_text_encoder_names_single_and_sdxl(tmp_path, sd1, sdxl):
    layer = "text_model.encoder.layers.1.self_attn.q_proj"
    single = clip_patcher({"clip_l": "cond_stage_model.transformer.text_model."}, sd1)
    key = f"clip_l.transformer.{layer}.weight"
    w = original(single, key)
    up, down = rand(w.shape[0], 2), rand(2, w.shape[1])
    te = "lora_te_" + layer.replace(".", "_")
    lora = roundtrip(tmp_path, {f"{te}.lora_up.weight": up, f"{te}.lora_down.weight": down})
    model = unet_patcher(sd1)
    _, new_clip, report = load_lora_for_models(model, single, lora, 1.0, 0.5)
    assert (report.model_keys, report.clip_keys) == (0, 1)
    torch.testing.assert_close(patched_weight(new_clip, key), w + 0.5 * up @ down, atol=1e-6, rtol=1e-6)

    pair = clip_patcher({"clip_l": "conditioner.embedders.0.transformer.text_model."}, sdxl)
    two = nn.Module()
    two.add_module("clip_l", pair.model.clip_l)
    two.add_module("clip_g", copy.deepcopy(pair.model.clip_l))  # same names below the slot suffice
    km = text_encoder_key_map(two)
    assert km["lora_te1_" + layer.replace(".", "_")] == key
    assert km["text_encoder." + layer] == key
    assert km["lora_te2_" + layer.replace(".", "_")] == f"clip_g.transformer.{layer}.weight"
    assert km["text_encoder_2." + layer] == f"clip_g.transformer.{layer}.weight"
    assert "lora_te_" + layer.replace(".", "_") not in km


def test_unmatched_keys_are_logged_once_each_and_the_rest_applies(tmp_path, sd1, caplog):
    model = unet_patcher(sd1)
    w = original(model, Q_LDM)
    layer = "lora_unet_" + Q_DIFF.replace(".", "_")
    up, down = rand(w.shape[0], 2), rand(2, w.shape[1])
    lora = roundtrip(tmp_path, {
        f"{layer}.lora_up.weight": up, f"{layer}.lora_down.weight": down,
        "lora_unet_no_such_block.lora_up.weight": rand(4, 2), "lora_unet_no_such_block.lora_down.weight": rand(2, 4),
        "lora_unet_no_such_block.alpha": torch.tensor(1.0), "something.else": torch.zeros(1),
    })
    with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
        new_model, _, report = load_lora_for_models(model, None, lora, 1.0, 1.0, name="test.safetensors")
    assert report.model_keys == 1
    assert sorted(report.unmatched) == sorted(k for k in lora if "no_such_block" in k or k == "something.else")
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # ComfyUI's warning (comfy/lora.py load_lora), once per key that loads nothing
    assert sorted(messages) == sorted(f"lora key not loaded: {k}" for k in report.unmatched)
    torch.testing.assert_close(patched_weight(new_model, Q_LDM), w + up @ down, atol=1e-6, rtol=1e-6)


def test_stacked_loras_compose(tmp_path, sd1):
    model = unet_patcher(sd1)
    w = original(model, Q_LDM)
    layer = "lora_unet_" + Q_DIFF.replace(".", "_")
    ups = [rand(w.shape[0], 2) for _ in range(2)]
    downs = [rand(2, w.shape[1]) for _ in range(2)]
    files = [{f"{layer}.lora_up.weight": u, f"{layer}.lora_down.weight": d} for u, d in zip(ups, downs)]
    first, _, _ = load_lora_for_models(model, None, files[0], 0.5, 1.0)
    second, _, _ = load_lora_for_models(first, None, files[1], -1.0, 1.0)
    expected = w + 0.5 * ups[0] @ downs[0] - ups[1] @ downs[1]
    torch.testing.assert_close(patched_weight(second, Q_LDM), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(patched_weight(first, Q_LDM), w + 0.5 * ups[0] @ downs[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(patched_weight(model, Q_LDM), w, atol=0, rtol=0)


def test_incomplete_records_load_nothing_and_are_logged(sd1, caplog):
    """As ComfyUI's adapters load only whole records: an up without its down (a LoHa without
    w2, a LoKr without w1) patches nothing, its keys are "not loaded", and the reason is logged."""
    key_map = unet_key_map(unet_patcher(sd1).model)
    layer = "lora_unet_" + Q_DIFF.replace(".", "_")
    for tensors, why in (({f"{layer}.lora_up.weight": torch.zeros(2, 2)}, "up and down"),
                         ({f"{layer}.hada_w1_a": torch.zeros(2, 2)}, "missing"),
                         ({f"{layer}.lokr_w2": torch.zeros(2, 2)}, "lokr_w1")):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
            parsed = parse_lora(tensors, key_map, "x.safetensors")
        assert parsed.patches == {} and parsed.unmatched == list(tensors)
        assert any(why in r.getMessage() and "x.safetensors" in r.getMessage() for r in caplog.records)


def test_a_wrong_shape_patch_added_directly_fails_when_applied_and_restores(sd1):
    """A patch dict a pack hands to add_patches itself is not checked on the way in: it fails
    where it is applied, and the module is left as it was."""
    model = unet_patcher(sd1)
    w = original(model, Q_LDM)
    bad = model.clone()
    bad.add_patches({Q_LDM: ("diff", (torch.zeros(3, 3),))}, 1.0)
    with pytest.raises(PatchDataError, match="diff"):
        patched_weight(bad, Q_LDM)
    assert torch.equal(original(model, Q_LDM), w)


Q2_LDM = "diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_k.weight"
K_DIFF = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_k"
TE_Q = "clip_l.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight"


def test_a_partly_matching_lora_applies_what_matches_as_a_file_of_only_those_keys(tmp_path, sd1, caplog):
    """ComfyUI applies a LoRA as far as it matches the model: a record for a wider layer (a LoRA
    of another width), a full diff of the wrong shape and keys naming nothing are skipped and
    logged; the weights it does match come out exactly as from a file holding only those keys."""
    model = unet_patcher(sd1)
    clip = clip_patcher({"clip_l": "cond_stage_model.transformer.text_model."}, sd1)
    w, wk, wt = original(model, Q_LDM), original(model, Q2_LDM), original(clip, TE_Q)
    q, k = "lora_unet_" + Q_DIFF.replace(".", "_"), "lora_unet_" + K_DIFF.replace(".", "_")
    te = "lora_te_text_model_encoder_layers_0_self_attn_q_proj"
    good = {f"{q}.lora_up.weight": rand(w.shape[0], 2), f"{q}.lora_down.weight": rand(2, w.shape[1]),
            f"{q}.alpha": torch.tensor(1.0),
            f"{te}.lora_up.weight": rand(wt.shape[0], 2), f"{te}.lora_down.weight": rand(2, wt.shape[1])}
    wrong = {f"{k}.lora_up.weight": rand(wk.shape[0], 2), f"{k}.lora_down.weight": rand(2, wk.shape[1] + 8),
             f"{te.replace('q_proj', 'k_proj')}.diff": rand(3, 5),
             "lora_unet_no_such_block.lora_up.weight": rand(4, 2)}
    with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
        got_model, got_clip, report = load_lora_for_models(model, clip, roundtrip(tmp_path, {**good, **wrong}),
                                                           0.7, 0.4, "partial.safetensors")
    want_model, want_clip, _ = load_lora_for_models(model, clip, good, 0.7, 0.4)
    assert (report.model_keys, report.clip_keys) == (1, 1)
    assert report.unmatched == ["lora_unet_no_such_block.lora_up.weight"]
    assert sorted(line.split(":")[0] for line in report.skipped) == sorted(
        [Q2_LDM, TE_Q.replace("q_proj", "k_proj")])
    for got, want, key in ((got_model, want_model, Q_LDM), (got_model, want_model, Q2_LDM),
                           (got_clip, want_clip, TE_Q), (got_clip, want_clip, TE_Q.replace("q_proj", "k_proj"))):
        assert torch.equal(patched_weight(got, key), patched_weight(want, key)), key
    assert not torch.equal(patched_weight(got_model, Q_LDM), w)
    assert torch.equal(patched_weight(got_model, Q2_LDM), wk)  # the misfit left its weight alone
    messages = [r.getMessage() for r in caplog.records]
    # ComfyUI's lines: comfy/lora.py for the unmatched key and the diff, the adapter's error line
    assert "lora key not loaded: lora_unet_no_such_block.lora_up.weight" in messages
    assert any(m.startswith(f"WARNING SHAPE MISMATCH {TE_Q.replace('q_proj', 'k_proj')} WEIGHT NOT MERGED (3, 5) != ")
               for m in messages)
    assert any(m.startswith(f"ERROR partial.safetensors {Q2_LDM} ") for m in messages)
    assert [r.levelno for r in caplog.records if Q2_LDM in r.getMessage()] == [logging.ERROR]


def test_a_lora_matching_nothing_loads_nothing_and_says_so(sd1, caplog):
    """ComfyUI loads a LoRA for another model as an empty patch set: every key logged as not
    loaded, the models unchanged, the run goes on."""
    model = unet_patcher(sd1)
    flux_lora = {"lora_unet_double_blocks_0_img_attn_proj.lora_up.weight": torch.zeros(4, 2),
                 "lora_unet_double_blocks_0_img_attn_proj.lora_down.weight": torch.zeros(2, 4)}
    with caplog.at_level(logging.WARNING, logger="comfy_core.lora.loader"):
        new_model, new_clip, report = load_lora_for_models(model, None, flux_lora, 1.0, 1.0, "flux.safetensors")
    assert new_clip is None and new_model is not model
    assert report.model_keys == 0 and report.unmatched == list(flux_lora)
    assert new_model.patches == {}
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if m.startswith("lora key not loaded")] == [
        f"lora key not loaded: {k}" for k in flux_lora]
    assert any("flux.safetensors" in m and "none of its 2 keys" in m for m in messages)
