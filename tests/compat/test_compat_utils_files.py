"""`comfy.utils`, `comfy.diffusers_convert`, `comfy.clip_vision.load` replacement (ComfyUI 0.3.64's
behaviour, written in compat/files_utils.py and compat/files_convert.py)."""
from __future__ import annotations

import pytest
import torch


def test_state_dict_helpers(session):
    import comfy.utils as u

    sd = {"a.x": torch.zeros(2), "a.y": torch.ones(3, dtype=torch.float16), "b.z": torch.ones(5, dtype=torch.float16)}
    assert u.calculate_parameters(sd, "a.") == 5 and u.weight_dtype(sd) == torch.float16
    out = u.state_dict_prefix_replace(dict(sd), {"a.": "c."}, filter_keys=True)
    assert sorted(out) == ["c.x", "c.y"]
    assert sorted(u.state_dict_key_replace(dict(sd), {"b.z": "q"})) == ["a.x", "a.y", "q"]
    batch = torch.arange(4.0)
    assert u.resize_to_batch_size(batch, 2).tolist() == [0.0, 3.0]
    assert u.resize_to_batch_size(batch, 8).tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert u.resize_list_to_batch_size([1, 2, 3], 1) == [1]
    module = torch.nn.Sequential(torch.nn.Linear(2, 2))
    previous = u.set_attr_param(module, "0.bias", torch.full((2,), 7.0))
    assert isinstance(previous, torch.nn.Parameter) and u.get_attr(module, "0.bias").tolist() == [7.0, 7.0]
    u.copy_to_param(module, "0.bias", torch.zeros(2))
    assert module[0].bias.tolist() == [0.0, 0.0]


def test_open_clip_names_round_trip(session):
    import comfy.diffusers_convert as dc
    import comfy.utils as u

    g = torch.Generator().manual_seed(0)
    open_clip = {"positional_embedding": torch.randn(5, 8, generator=g),
                 "transformer.resblocks.0.attn.in_proj_weight": torch.randn(24, 8, generator=g),
                 "transformer.resblocks.0.attn.in_proj_bias": torch.randn(24, generator=g),
                 "transformer.resblocks.0.ln_1.weight": torch.randn(8, generator=g),
                 "text_projection": torch.randn(8, 4, generator=g)}
    hf = u.clip_text_transformers_convert(dict(open_clip), "", "")
    assert torch.equal(hf["text_model.encoder.layers.0.self_attn.k_proj.weight"],
                       open_clip["transformer.resblocks.0.attn.in_proj_weight"][8:16])
    assert torch.equal(hf["text_projection.weight"], open_clip["text_projection"].T)
    back = dc.convert_text_enc_state_dict_v20(hf)
    assert back.keys() == open_clip.keys() and all(torch.equal(back[k], open_clip[k]) for k in back)


def test_unet_to_diffusers_names_our_unet_weights(session, tiny_sd1_ckpt):
    """Every LDM name the map gives for an SD1 UNet is one of its weights, and it agrees with
    the diffusers converter our loaders use."""
    import comfy.diffusers_convert as dc
    import comfy.utils as u
    from comfy_core.loading import load_checkpoint

    model, _clip, _vae = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
    names = {k[len("diffusion_model."):] for k in model.model_state_dict() if k.startswith("diffusion_model.")}
    config = {"num_res_blocks": [2] * 4, "channel_mult": [1, 2, 4, 4], "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
              "transformer_depth_output": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0], "transformer_depth_middle": 1}
    levels = len({n.split(".")[1] for n in names if n.startswith("input_blocks.")}) - 1
    if levels != 11:
        pytest.skip(f"tiny UNet has {levels + 1} input blocks, the config above is SD1's 12")
    mapping = u.unet_to_diffusers(config)
    present = {diff: ldm for diff, ldm in mapping.items() if ldm in names}
    assert set(present.values()) == names  # every weight is reached ...
    diffusers_sd = {diff: torch.zeros(1) for diff in present}
    assert set(dc.convert_unet_state_dict(diffusers_sd)) == names  # ... and converts back the same way


def test_unet_map_basic_edits_reach_unet_to_diffusers(session):
    import comfy.utils as u

    original = u.UNET_MAP_BASIC
    try:
        u.UNET_MAP_BASIC = original | {("encoder_hid_proj.weight", "encoder_hid_proj.weight")}
        config = {"num_res_blocks": [1], "channel_mult": [1], "transformer_depth": [0],
                  "transformer_depth_output": [0, 0], "transformer_depth_middle": 0}
        assert u.unet_to_diffusers(config)["encoder_hid_proj.weight"] == "encoder_hid_proj.weight"
    finally:
        u.UNET_MAP_BASIC = original
    assert "encoder_hid_proj.weight" not in u.unet_to_diffusers(config)


def test_progress_bar_global_hook(session):
    import comfy.utils as u

    seen = []
    u.set_progress_bar_global_hook(lambda value, total, preview, node_id=None: seen.append((value, total, node_id)))
    try:
        bar = u.ProgressBar(4, node_id="7")
        bar.update(1)
        bar.update_absolute(9)
    finally:
        u.set_progress_bar_global_hook(None)
    assert seen == [(1, 4, "7"), (4, 4, "7")]


def test_replaced_load_clipvision_from_sd_is_what_load_calls(session, tmp_path):
    import comfy.clip_vision
    from tests.fixtures.clip_vision import write_tiny_clip_vision

    path = write_tiny_clip_vision(tmp_path / "v.safetensors")
    original = comfy.clip_vision.load_clipvision_from_sd
    got = []
    comfy.clip_vision.load_clipvision_from_sd = lambda sd, *a, **k: got.append(sorted(sd)[:1]) or original(sd)
    try:
        vision = comfy.clip_vision.load(str(path))
    finally:
        comfy.clip_vision.load_clipvision_from_sd = original
    assert got and isinstance(vision, comfy.clip_vision.ClipVisionModel)


def test_reshape_mask_and_save_torch_file(session, tmp_path):
    import comfy.utils as u

    mask = torch.ones(1, 4, 4)
    out = u.reshape_mask(mask, (2, 3, 8, 8))
    assert out.shape == (2, 3, 8, 8) and torch.all(out == 1)
    u.save_torch_file({"x": torch.arange(3.0)}, tmp_path / "f.safetensors", metadata={"k": "v"})
    sd, meta = u.load_torch_file(tmp_path / "f.safetensors", return_metadata=True)
    assert sd["x"].tolist() == [0.0, 1.0, 2.0] and meta == {"k": "v"}
    assert u.safetensors_header(tmp_path / "f.safetensors").startswith(b"{")
