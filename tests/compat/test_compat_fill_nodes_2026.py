"""Today's (2026) ComfyUI names Fill-Nodes (filliptm/ComfyUI_Fill-Nodes) calls (survey 2026-12-07,
A2 and A9), called the way its nodes call them:

- `comfy.ldm.lumina.controlnet.ZImage_Control` / `ZImageControlTransformerBlock` and
  `comfy_extras.nodes_model_patch.z_image_convert` (nodes/wip/FL_ZImageControlNetPatch.py builds
  the Z-Image Fun ControlNet itself, in a `comfy.model_patcher.CoreModelPatcher`): adapters onto
  the engine's network (compat/lumina_controlnet.py);
- `comfy_extras.nodes_lt.LTXVAddGuide.get_latent_index` / `add_keyframe_index` /
  `append_keyframe` (nodes/wip/FL_LTXVMaskedICLoRAGuide.py) and the other guide class methods
  (compat/ltxv_guides.py over nodes/ltxv_nodes.py)."""
from __future__ import annotations

import itertools

import pytest
import torch

from tests.fixtures.dit_checkpoints import save
from tests.fixtures.model_patch_files import write_patch_file, zimage_fun_controlnet_state_dict
from tests.fixtures.vae16_files import write_tiny_vae16
from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict

TINY = dict(dim=64, n_heads=4, n_kv_heads=4, multiple_of=1)  # the fixtures' widths (SwiGLU int(64 * 8/3) = 170)
CONFIGS = {"1.0": dict(n_control_layers=6, additional_in_dim=0, refiner_control=False),
           "2.0": dict(n_control_layers=3, additional_in_dim=17, refiner_control=True),
           "2.1": dict(n_control_layers=15, additional_in_dim=17, refiner_control=True)}


# --- z_image_convert ---------------------------------------------------------------------------------

def test_z_image_convert_fuses_diffusers_attention_names(session):
    from comfy_extras.nodes_model_patch import z_image_convert

    g = torch.Generator().manual_seed(0)
    q, k, v, o, ff = (torch.randn(4, 4, generator=g) for _ in range(5))
    ob, nq, nk = (torch.randn(4, generator=g) for _ in range(3))
    sd = {"b.attention.to_v.weight": v, "b.attention.to_q.weight": q, "b.attention.to_k.weight": k,
          "b.attention.to_out.0.weight": o, "b.attention.to_out.0.bias": ob,
          "b.attention.norm_q.weight": nq, "b.attention.norm_k.weight": nk, "b.feed_forward.w1.weight": ff}
    before = dict(sd)
    out = z_image_convert(sd)
    assert list(out) == sorted(["b.attention.qkv.weight", "b.attention.out.weight", "b.attention.out.bias",
                                "b.attention.q_norm.weight", "b.attention.k_norm.weight", "b.feed_forward.w1.weight"])
    fused = out["b.attention.qkv.weight"]
    assert fused.shape == (12, 4)
    assert torch.equal(fused[:4], q) and torch.equal(fused[4:8], k) and torch.equal(fused[8:], v)
    assert out["b.attention.out.weight"] is o and out["b.attention.out.bias"] is ob
    assert out["b.attention.q_norm.weight"] is nq and out["b.attention.k_norm.weight"] is nk
    assert out["b.feed_forward.w1.weight"] is ff
    assert sd == before and out is not sd  # a new dict; the input is left as it was


# --- ZImage_Control / ZImageControlTransformerBlock ---------------------------------------------------------

def test_block_widths_follow_comfyuis_arguments():
    from compat.lumina_controlnet import block_config

    released = block_config(3840, 30, 30, 256, 8.0 / 3.0, 1e-5, True)  # ZImage_Control's defaults
    assert (released.ffn_hidden, released.adaln_dim, released.head_dim) == (10240, 256, 128)
    assert block_config(64, 4, 4, 256, 8.0 / 3.0, 1e-5, True).ffn_hidden == 256  # rounded up to multiple_of
    assert block_config(64, 4, 4, 1, 8.0 / 3.0, 1e-5, True).ffn_hidden == 170
    assert block_config(64, 4, 4, 1, None, 1e-5, True).ffn_hidden == 64
    assert block_config(512, 4, 4, 1, 2.0, 1e-6, True).adaln_dim == 256


@pytest.mark.parametrize("version", ["1.0", "2.0", "2.1"])
def test_zimage_control_takes_the_release_weights_under_comfyuis_names(session, version):
    import comfy.ldm.lumina.controlnet as controlnet
    import comfy.ldm.lumina.model
    import comfy.ops
    from comfy_core.model_patches.zimage_fun import ZImageFunControlNet
    from comfy_extras.nodes_model_patch import z_image_convert

    sd = z_image_convert(zimage_fun_controlnet_state_dict(version=version, seed=2))
    net = controlnet.ZImage_Control(device="cpu", dtype=torch.float32, operations=comfy.ops.manual_cast,
                                    **TINY, **CONFIGS[version])
    assert isinstance(net, ZImageFunControlNet) and set(net.state_dict()) == set(sd)
    assert net.load_state_dict(sd, assign=False) is not None
    layers = net.control_layers
    assert len(layers) == CONFIGS[version]["n_control_layers"] and len(net.control_noise_refiner) == 2
    assert all(type(b) is controlnet.ZImageControlTransformerBlock for b in layers)
    assert all(isinstance(b, comfy.ldm.lumina.model.JointTransformerBlock) for b in layers)
    assert [b.block_id for b in layers] == list(range(len(layers)))
    assert hasattr(layers[0], "before_proj") and not hasattr(layers[1], "before_proj")
    refiner_blocks = {type(b).__name__ for b in net.control_noise_refiner}
    assert refiner_blocks == ({"ZImageControlTransformerBlock"} if CONFIGS[version]["refiner_control"]
                              else {"JointTransformerBlock"})
    assert (net.n_control_layers, net.additional_in_dim, net.control_in_dim, net.broken) == (
        CONFIGS[version]["n_control_layers"], CONFIGS[version]["additional_in_dim"], 16, False)
    assert isinstance(net.control_all_x_embedder["2-1"], comfy.ops.manual_cast.Linear)
    assert torch.equal(layers[2].attention.qkv.weight, sd["control_layers.2.attention.qkv.weight"])


def test_a_control_block_built_alone_takes_comfyuis_arguments(session):
    import comfy.ldm.lumina.controlnet as controlnet
    import comfy.ops

    settings = {"operations": comfy.ops.manual_cast, "device": "cpu", "dtype": torch.float16}
    first = controlnet.ZImageControlTransformerBlock(0, 64, 4, 4, 1, 8.0 / 3.0, 1e-5, True, block_id=0,
                                                     operation_settings=settings)
    later = controlnet.ZImageControlTransformerBlock(3, 64, 4, 4, 1, 8.0 / 3.0, 1e-5, True, block_id=3,
                                                     operation_settings=settings)
    assert first.before_proj.weight.shape == (64, 64) and first.before_proj.weight.dtype == torch.float16
    assert not hasattr(later, "before_proj") and later.after_proj.bias.shape == (64,)
    assert first.feed_forward.w1.weight.shape == (170, 64) and first.adaLN_modulation[0].weight.shape == (256, 64)
    assert (later.layer_id, later.block_id, later.dim, later.head_dim) == (3, 3, 64, 16)


def _net(version, **extra):
    import comfy.ldm.lumina.controlnet as controlnet
    import comfy.ops
    from comfy_extras.nodes_model_patch import z_image_convert

    sd = z_image_convert(zimage_fun_controlnet_state_dict(version=version, seed=3))
    net = controlnet.ZImage_Control(operations=comfy.ops.manual_cast, **TINY, **{**CONFIGS[version], **extra})
    net.load_state_dict(sd)
    return net.eval()


def _inputs(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    c, x = torch.randn(1, n, 64, generator=g), torch.randn(1, n, 64, generator=g)
    freqs = torch.randn(1, n + 4, 1, 8, 2, 2, generator=g)  # longer than the control tokens: sliced to them
    vec = torch.randn(1, 64, generator=g)
    return c, x, freqs, vec


def _block(block, c, x, freqs, vec, first):
    """A control block written out: `c' = block(before_proj(c) + x)` (block 0), skip `after_proj(c')`."""
    from comfy_core.families.zimage.nextdit import JointTransformerBlock

    if first:
        c = c @ block.before_proj.weight.T + block.before_proj.bias + x
    c = JointTransformerBlock.forward(block, c, freqs[:, :c.shape[1]], vec)
    return c @ block.after_proj.weight.T + block.after_proj.bias, c


def test_comfyuis_forward_methods(session):
    net = _net("2.0")
    c, x, freqs, vec = _inputs()
    with torch.no_grad():
        skip, out = net.forward_control_block(0, c, x, None, freqs, vec)
        want_skip, want = _block(net.control_layers[0], c, x, freqs, vec, True)
        torch.testing.assert_close(skip, want_skip)
        torch.testing.assert_close(out, want)
        skip, out = net.forward_control_block(1, c, x, None, freqs, vec)
        want_skip, want = _block(net.control_layers[1], c, x, freqs, vec, False)
        torch.testing.assert_close(skip, want_skip)
        torch.testing.assert_close(out, want)
        skip, out = net.forward_noise_refiner_block(0, c, x, None, freqs, vec)
        want_skip, want = _block(net.control_noise_refiner[0], c, x, freqs, vec, True)
        torch.testing.assert_close(skip, want_skip)
        torch.testing.assert_close(out, want)
        # ComfyUI's block forward, called with its keywords
        skip, out = net.control_layers[1](c, x, x_mask=None, freqs_cis=freqs[:, :6], adaln_input=vec)
        torch.testing.assert_close(out, _block(net.control_layers[1], c, x, freqs, vec, False)[1])
        # forward: channel-last 2x2 patches through control_all_x_embedder (2.x: no refiner here)
        latent = torch.randn(1, 33, 4, 6, generator=torch.Generator().manual_seed(1))
        tokens = latent.view(1, 33, 2, 2, 3, 2).permute(0, 2, 4, 3, 5, 1).reshape(1, 6, 4 * 33)
        embedder = net.control_all_x_embedder["2-1"]
        torch.testing.assert_close(net(None, latent, freqs, vec), tokens @ embedder.weight.T + embedder.bias)


def test_the_plain_refiner_runs_in_forward_and_not_after_the_refiner_blocks(session):
    from comfy_core.families.zimage.nextdit import JointTransformerBlock

    net = _net("1.0")
    c, x, freqs, vec = _inputs(seed=4)
    latent = torch.randn(1, 16, 4, 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        tokens = latent.view(1, 16, 2, 2, 3, 2).permute(0, 2, 4, 3, 5, 1).reshape(1, 6, 64)
        want = tokens @ net.control_all_x_embedder["2-1"].weight.T + net.control_all_x_embedder["2-1"].bias
        for block in net.control_noise_refiner:
            want = JointTransformerBlock.forward(block, want, freqs[:, :6], vec)
        torch.testing.assert_close(net(None, latent, freqs, vec), want)
        skip, same = net.forward_noise_refiner_block(1, c, x, None, freqs, vec)
    assert skip is None and same is c


def test_broken_21_routes_the_refiner_through_the_control_layers(session):
    broken = _net("2.1", broken=True)
    c, x, freqs, vec = _inputs(seed=5)
    with torch.no_grad():
        skip0, c0 = broken.forward_noise_refiner_block(0, c, x, None, freqs, vec)
        want_skip0, want_c0 = _block(broken.control_layers[0], c, x, freqs, vec, True)
        torch.testing.assert_close(skip0, want_skip0)
        torch.testing.assert_close(c0, want_c0)
        skip1, c1 = broken.forward_noise_refiner_block(1, c0, x, None, freqs, vec)
        state, first = c0, None
        for block in list(broken.control_layers)[1:]:
            skip, state = _block(block, state, x, freqs, vec, False)
            first = skip if first is None else first
        torch.testing.assert_close(skip1, first)
        torch.testing.assert_close(c1, state)
        # not broken: the refiner's own control blocks
        plain = _net("2.1")
        skip, _ = plain.forward_noise_refiner_block(1, c0, x, None, freqs, vec)
        torch.testing.assert_close(skip, _block(plain.control_noise_refiner[1], c0, x, freqs, vec, False)[0])


# --- FL_ZImageControlNetPatch's flow, end to end on a tiny Z-Image ------------------------------------------

@pytest.fixture(scope="module")
def zimage(tmp_path_factory):
    from comfy_core.loading import load_vae
    from comfy_core.split.diffusion_model import load_diffusion_model

    root = tmp_path_factory.mktemp("fill_zimage")
    model = load_diffusion_model(save(tiny_zimage_state_dict(3, refiners=2), root / "zimage.safetensors"))
    vae = load_vae(write_tiny_vae16(root / "ae.safetensors", seed=1))
    return model, vae


def _fill_nodes_load_model_patch(name, n_control_layers=6, additional_in_dim=17, refiner_control=False):
    """FL_ZImageControlNetPatch.load_model_patch's calls (auto_config), with the tiny widths
    added to the constructor's keywords (the pack leaves them at the 3840-wide defaults)."""
    import comfy.ldm.lumina.controlnet
    import comfy.model_management
    import comfy.model_patcher
    import comfy.ops
    import comfy.utils
    import folder_paths
    from comfy_extras.nodes_model_patch import z_image_convert

    path = folder_paths.get_full_path_or_raise("model_patches", name)
    sd = comfy.utils.load_torch_file(path, safe_load=True)
    assert "control_all_x_embedder.2-1.weight" in sd
    dtype = comfy.utils.weight_dtype(sd)
    sd = z_image_convert(sd)
    layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("control_layers."))
    config = {"n_control_layers": layers,
              "additional_in_dim": sd["control_all_x_embedder.2-1.weight"].shape[1] // 4 - 16,
              "refiner_control": False}
    if "control_layers.4.adaLN_modulation.0.weight" not in sd:
        config.update(n_control_layers=3, additional_in_dim=17, refiner_control=True)
    model = comfy.ldm.lumina.controlnet.ZImage_Control(device=comfy.model_management.unet_offload_device(),
                                                       dtype=dtype, operations=comfy.ops.manual_cast,
                                                       **TINY, **config)
    model_patcher = comfy.model_patcher.CoreModelPatcher(
        model, load_device=comfy.model_management.get_torch_device(),
        offload_device=comfy.model_management.unet_offload_device())
    model.load_state_dict(sd, assign=model_patcher.is_dynamic())
    return (model_patcher,)


def _image(seed=0):
    return torch.rand(1, 32, 48, 3, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_fill_nodes_patch_loader_flow_samples_as_the_engines_loader(session, zimage, version):
    import comfy.model_patcher
    import folder_paths
    from comfy_core.model_patches.patch_files import load_model_patch
    from comfy_core.sampling.ksampler import sample
    from nodes.diffsynth_controlnet import z_image_fun_controlnet

    model, vae = zimage
    folder = folder_paths.get_folder_paths("model_patches")[0]
    file = write_patch_file(f"{folder}/fun_{version}.safetensors",
                            zimage_fun_controlnet_state_dict(version=version, seed=5))
    (patch,) = _fill_nodes_load_model_patch(file.name)
    assert isinstance(patch, comfy.model_patcher.CoreModelPatcher) and patch.is_dynamic() is False
    assert (patch.model.n_control_layers, patch.model.additional_in_dim) == (
        CONFIGS[version]["n_control_layers"], CONFIGS[version]["additional_in_dim"])
    engines = load_model_patch(file)
    for key, value in engines.model.state_dict().items():
        assert torch.equal(patch.model.state_dict()[key], value), key

    gen = torch.Generator().manual_seed(4)
    positive = [[torch.randn(1, 5, CAP_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 3, CAP_WIDTH, generator=gen), {}]]
    with torch.no_grad():
        shape = vae.encode(_image()).shape
    noise = torch.randn(shape, generator=gen)

    def run(model_patch):
        (patched,) = z_image_fun_controlnet(model, model_patch, vae, 0.8, image=_image())
        return sample(patched, noise, 2, 2.0, "euler", "simple", positive, negative, torch.zeros(shape))

    theirs, ours = run(patch), run(engines)
    plain = sample(model, noise, 2, 2.0, "euler", "simple", positive, negative, torch.zeros(shape))
    assert torch.isfinite(theirs).all() and (theirs - plain).abs().max() > 1e-4
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)


# --- LTXVAddGuide's class methods -------------------------------------------------------------------------

SCALE = (8, 32, 32)


def _cond():
    return [[torch.zeros(1, 3, 8), {"frame_rate": 24.0}]]


def _guide(frames=2, h=2, w=3, seed=0):
    return torch.randn(1, 128, frames, h, w, generator=torch.Generator().manual_seed(seed))


def _pixel_coords(frames, h, w, frame_idx, causal_fix, downscale=1):
    """The guide tokens' (t, y, x) pixel (start, end) positions written out: token order t, y, x;
    latent end = start + 1; x 8/32/32; the causal fix maps t to max(0, 8t + 1 - 8); the spatial
    ends of a dilated guide move by (factor - 1) x 32."""
    rows = {0: [], 1: [], 2: []}
    for t, y, x in itertools.product(range(frames), range(h), range(w)):
        for axis, (value, scale) in enumerate(zip((t, y, x), SCALE)):
            start, end = value * scale, (value + 1) * scale
            if axis == 0:
                if causal_fix:
                    start, end = max(0, start + 1 - scale), max(0, end + 1 - scale)
                start, end = start + frame_idx, end + frame_idx
            else:
                end += (downscale - 1) * scale
            rows[axis].append([start, end])
    return torch.tensor([rows[0], rows[1], rows[2]], dtype=torch.float32).unsqueeze(0)  # [1, 3, N, 2]


def test_get_latent_index(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    cond = _cond()
    assert LTXVAddGuide.get_latent_index(cond, 5, 1, 10, SCALE) == (10, 2)
    assert LTXVAddGuide.get_latent_index(cond, 5, 9, 10, SCALE) == (9, 2)  # snapped down to 8k + 1
    assert LTXVAddGuide.get_latent_index(cond, 5, 9, 0, SCALE) == (0, 0)
    assert LTXVAddGuide.get_latent_index(cond, 5, 1, -1, SCALE) == (32, 4)  # (5 - 1) * 8 + 1 - 1
    assert LTXVAddGuide.get_latent_index(cond, 5, 9, -1, SCALE) == (25, 4)
    assert LTXVAddGuide.get_latent_index(cond, 5, 1, -100, SCALE) == (0, 0)
    # one guide latent frame already appended: the latent's own frames are 4
    guided = LTXVAddGuide.add_keyframe_index(cond, 0, _guide(1), SCALE)
    assert LTXVAddGuide.get_latent_index(guided, 5, 1, -1, SCALE, latent_shape=(1, 128, 5, 2, 3)) == (24, 3)
    frame, latent = LTXVAddGuide.get_latent_index(cond=guided, latent_length=5, guide_length=1, frame_idx=-1,
                                                  scale_factors=SCALE)  # no shape: counted from keyframe_idxs
    assert (frame, latent) == (24, 3)


def test_add_keyframe_index(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    cond = _cond()
    one = LTXVAddGuide.add_keyframe_index(cond, 9, _guide(2), SCALE)  # causal_fix: frame 0 or one frame -> False
    torch.testing.assert_close(one[0][1]["keyframe_idxs"].float(), _pixel_coords(2, 2, 3, 9, False))
    assert "keyframe_idxs" not in cond[0][1] and one[0][1]["frame_rate"] == 24.0
    two = LTXVAddGuide.add_keyframe_index(one, 0, _guide(1, 2, 2), SCALE, 2)  # a dilated single frame
    idxs = two[0][1]["keyframe_idxs"].float()
    assert idxs.shape == (1, 3, 12 + 4, 2)
    torch.testing.assert_close(idxs[:, :, :12], _pixel_coords(2, 2, 3, 9, False))
    torch.testing.assert_close(idxs[:, :, 12:], _pixel_coords(1, 2, 2, 0, True, downscale=2))
    forced = LTXVAddGuide.add_keyframe_index(cond, 0, _guide(2), SCALE, causal_fix=False)
    torch.testing.assert_close(forced[0][1]["keyframe_idxs"].float(), _pixel_coords(2, 2, 3, 0, False))


def test_append_keyframe_as_fill_nodes_calls_it(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    positive, negative = _cond(), _cond()
    latent = torch.randn(1, 128, 4, 2, 3, generator=torch.Generator().manual_seed(7))
    noise_mask = torch.ones(1, 1, 4, 1, 1)
    guide = _guide(2)
    frame_idx, latent_idx = LTXVAddGuide.get_latent_index(positive, 4, 9, 9, SCALE)
    assert (frame_idx, latent_idx) == (9, 2)
    out_pos, out_neg, out_latent, out_mask = LTXVAddGuide.append_keyframe(
        positive=positive, negative=negative, frame_idx=frame_idx, latent_image=latent, noise_mask=noise_mask,
        guiding_latent=guide, strength=0.75, scale_factors=SCALE, guide_mask=None, latent_downscale_factor=1,
        causal_fix=False)
    assert torch.equal(out_latent, torch.cat([latent, guide], dim=2))
    assert out_mask.shape == (1, 1, 6, 1, 1) and torch.equal(out_mask[:, :, :4], noise_mask)
    assert torch.allclose(out_mask[:, :, 4:], torch.full((1, 1, 2, 1, 1), 0.25))
    for cond in (out_pos, out_neg):
        torch.testing.assert_close(cond[0][1]["keyframe_idxs"].float(), _pixel_coords(2, 2, 3, 9, False))
        assert "guide_attention_entries" not in cond[0][1]  # the caller adds its own entry
    # strength above 1: the mask is clamped at 0 (amplified only through attention)
    _, _, _, strong = LTXVAddGuide.append_keyframe(positive, negative, 0, latent, noise_mask, guide, 3.0, SCALE)
    assert torch.equal(strong[:, :, 4:], torch.zeros(1, 1, 2, 1, 1))


def test_append_keyframe_with_a_guide_mask_and_the_channel_check(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    positive, negative = _cond(), _cond()
    latent, noise_mask = torch.zeros(1, 128, 3, 4, 6), torch.full((1, 1, 3, 1, 1), 0.5)
    dilated, guide_mask = LTXVAddGuide.dilate_latent(_guide(1, 2, 3), 2)
    assert dilated.shape == (1, 128, 1, 4, 6) and torch.equal(dilated[..., ::2, ::2], _guide(1, 2, 3))
    assert torch.equal(dilated[..., 1::2, :], torch.zeros(1, 128, 1, 2, 6))
    assert guide_mask.shape == (1, 1, 1, 4, 6) and guide_mask.sum() == 6 * 1 - 18 * 1
    _, _, out_latent, out_mask = LTXVAddGuide.append_keyframe(positive, negative, 16, latent, noise_mask, dilated,
                                                              0.5, SCALE, guide_mask=guide_mask,
                                                              latent_downscale_factor=2)
    assert out_latent.shape == (1, 128, 4, 4, 6)
    assert out_mask.shape == (1, 1, 4, 4, 6) and torch.equal(out_mask[:, :, :3], torch.full((1, 1, 3, 4, 6), 0.5))
    torch.testing.assert_close(out_mask[:, :, 3:], guide_mask - 0.5)
    with pytest.raises(ValueError, match="128 channels"):
        LTXVAddGuide.append_keyframe(positive, negative, 0, torch.zeros(1, 16, 3, 4, 6), noise_mask,
                                     torch.zeros(1, 16, 1, 4, 6), 1.0, SCALE)
    assert LTXVAddGuide.append_keyframe(positive, negative, 0, torch.zeros(1, 16, 3, 4, 6), noise_mask,
                                        torch.zeros(1, 16, 1, 4, 6), 1.0, SCALE, in_channels=16)[2].shape[2] == 4


def test_attach_guide_latent_records_the_attention_entry(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    assert LTXVAddGuide.get_reference_downscale_factor({"reference_downscale_factor": 2.0}) == 2
    assert LTXVAddGuide.get_reference_downscale_factor(None) == 1
    positive, negative = _cond(), _cond()
    latent, noise_mask = torch.zeros(1, 128, 3, 4, 6), torch.ones(1, 1, 3, 1, 1)
    pos, neg, out_latent, out_mask = LTXVAddGuide.attach_guide_latent(positive, negative, latent, noise_mask,
                                                                      _guide(1, 2, 3), 0, 1.0, SCALE,
                                                                      latent_downscale_factor=2)
    assert out_latent.shape == (1, 128, 4, 4, 6) and out_mask.shape == (1, 1, 4, 4, 6)
    for cond in (pos, neg):
        (entry,) = cond[0][1]["guide_attention_entries"]
        assert entry["pre_filter_count"] == 24 and list(entry["latent_shape"]) == [1, 2, 3]
        torch.testing.assert_close(cond[0][1]["keyframe_idxs"].float(), _pixel_coords(1, 4, 6, 0, True, 2))


def test_a_subclass_override_of_add_keyframe_index_is_what_append_keyframe_calls(session):
    from comfy_extras.nodes_lt import LTXVAddGuide

    calls = []

    class Mine(LTXVAddGuide):
        @classmethod
        def add_keyframe_index(cls, cond, frame_idx, guiding_latent, scale_factors, latent_downscale_factor=1,
                               causal_fix=None):
            calls.append(frame_idx)
            return super().add_keyframe_index(cond, frame_idx, guiding_latent, scale_factors,
                                              latent_downscale_factor, causal_fix)

    Mine.append_keyframe(_cond(), _cond(), 9, torch.zeros(1, 128, 2, 2, 3), torch.ones(1, 1, 2, 1, 1), _guide(1),
                         1.0, SCALE)
    assert calls == [9, 9]


def test_a_broken_21_patch_is_rerouted_when_the_engines_node_samples_with_it(session, zimage):
    """Fill-Nodes (as ComfyUI's loader) passes `broken=True` for a 2.1 file whose
    `control_noise_refiner.0.after_proj` is all zero; the engine's Z-Image Fun patch then runs
    control layers 1.. after refiner block 1 (the tiny Z-Image's 2 main blocks reach only layer 0)."""
    import comfy.model_patcher
    from comfy_core.sampling.ksampler import sample
    from nodes.diffsynth_controlnet import z_image_fun_controlnet

    model, vae = zimage
    calls = {}
    for broken in (False, True):
        net = _net("2.1", broken=broken)
        patch = comfy.model_patcher.CoreModelPatcher(net, load_device="cpu", offload_device="cpu")
        counted = [0]
        handle = net.control_layers[5].register_forward_hook(lambda *_: counted.__setitem__(0, counted[0] + 1))
        (patched,) = z_image_fun_controlnet(model, patch, vae, 1.0, image=_image())
        gen = torch.Generator().manual_seed(1)
        positive = [[torch.randn(1, 5, CAP_WIDTH, generator=gen), {}]]
        with torch.no_grad():
            shape = vae.encode(_image()).shape
            sample(patched, torch.randn(shape, generator=gen), 1, 1.0, "euler", "simple", positive, positive,
                   torch.zeros(shape))
        handle.remove()
        calls[broken] = counted[0]
    assert calls[False] == 0 and calls[True] >= 1
