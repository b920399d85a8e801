"""Alibaba PAI's Z-Image Fun ControlNet: the 1.0 / 2.0 / 2.1 release layouts read by
ModelPatchLoader's loader (diffusers attention names fused as ComfyUI converts them), the control
stream wired through ZImageFunControlnet into a Z-Image MODEL loaded from a UNETLoader file
against the flow written out here (ComfyUI's `ZImage_Control` / `ZImageControlPatch`: Flux latent
normalisation with its published shift and scale, channel-last 2x2 patches, which refiner and
main blocks get which control block, `before_proj` on the main stream's block input), the
inpaint latent and mask, node errors and a 2-step sample."""
from __future__ import annotations

import pytest
import torch

from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.patch_files import load_model_patch
from comfy_core.model_patches.zimage_fun import ZImageFunControlNet
from nodes.diffsynth_controlnet import z_image_fun_controlnet
from nodes.errors import NodeInputError
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.model_patch_files import write_patch_file, zimage_fun_controlnet_state_dict
from tests.fixtures.vae16_files import write_tiny_vae16
from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict

FLUX_SHIFT, FLUX_SCALE = 0.1159, 0.3611  # Flux.1's latent normalisation (BFL's ae config)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from comfy_core.loading import load_vae
    from comfy_core.split.diffusion_model import load_diffusion_model

    root = tmp_path_factory.mktemp("zimage_fun")
    # two noise refiner blocks, as the released Z-Image (the 2.x control refiners follow them)
    model = load_diffusion_model(save(tiny_zimage_state_dict(3, refiners=2),
                                      root / "diffusion_models" / "zimage.safetensors"))
    vae = load_vae(write_tiny_vae16(root / "vae" / "ae.safetensors", seed=1))
    patches = {version: load_model_patch(write_patch_file(root / "model_patches" / f"fun_{version}.safetensors",
                                                          zimage_fun_controlnet_state_dict(version=version, seed=5)))
               for version in ("1.0", "2.0", "2.1")}
    return model, vae, patches


def test_the_release_layouts_are_read_and_fused(files):
    _, _, patches = files
    shapes = {v: (p.model.config.n_control_layers, p.model.config.refiner_control, p.model.config.additional_in_dim)
              for v, p in patches.items()}
    assert shapes == {"1.0": (6, False, 0), "2.0": (3, True, 17), "2.1": (15, True, 17)}
    network = patches["2.1"].model
    assert isinstance(network, ZImageFunControlNet) and network.config.blocks.n_heads == 4
    state = zimage_fun_controlnet_state_dict(version="2.1", seed=5)
    fused = network.control_layers[3].attention.qkv.weight
    assert torch.equal(fused, torch.cat([state[f"control_layers.3.attention.{p}.weight"]
                                         for p in ("to_q", "to_k", "to_v")]))
    assert torch.equal(network.control_layers[0].attention.out.weight,
                       state["control_layers.0.attention.to_out.0.weight"])
    assert not hasattr(network.control_layers[1], "before_proj")


def test_a_broken_21_release_is_told_apart_and_rerouted(files, tmp_path):
    """The 2.1 files whose first refiner skip is all zero ("broken"): told apart by that tensor's
    values, as ComfyUI does; their refiner steps run the control layers instead (refiner 0: control
    layer 0; refiner 1: the others, giving the first one's skip)."""
    _, _, patches = files
    assert not patches["2.1"].model.config.broken
    state = zimage_fun_controlnet_state_dict(version="2.1", seed=5)
    state["control_noise_refiner.0.after_proj.weight"] = torch.zeros_like(state["control_noise_refiner.0.after_proj.weight"])
    network = load_model_patch(write_patch_file(tmp_path / "broken.safetensors", state)).model
    assert network.config.broken

    def recorded(index, control, x, freqs, vec):  # stands in for each control layer's step
        calls.append(index)
        return torch.full_like(x, float(index)), control + 1

    calls: list[int] = []
    network.control_block = recorded
    control, x = torch.zeros(1, 4, 8), torch.zeros(1, 4, 8)
    skip, control = network.refiner_block(0, control, x, None, None)
    assert calls == [0] and torch.equal(skip, torch.zeros(1, 4, 8))
    skip, control = network.refiner_block(1, control, x, None, None)
    layers = network.config.n_control_layers
    assert calls == list(range(layers)) and torch.equal(skip, torch.ones(1, 4, 8))  # the first one's skip
    assert torch.equal(control, torch.full((1, 4, 8), float(layers)))


def test_inconsistent_files_are_typed_errors(tmp_path):
    state = zimage_fun_controlnet_state_dict(version="1.0")
    del state["control_layers.2.attention.to_k.weight"]
    with pytest.raises(ModelPatchError, match="to_k"):
        load_model_patch(write_patch_file(tmp_path / "a.safetensors", state))
    state = zimage_fun_controlnet_state_dict(version="1.0")
    state["control_layers.1.after_proj.weight"] = torch.zeros(64, 32)
    with pytest.raises(ModelPatchError, match="control_layers.1.after_proj.weight has shape"):
        load_model_patch(write_patch_file(tmp_path / "b.safetensors", state))
    state = zimage_fun_controlnet_state_dict(version="1.0")
    state["control_all_x_embedder.2-1.weight"] = torch.zeros(64, 4 * 20)
    with pytest.raises(ModelPatchError, match="takes 80 inputs"):
        load_model_patch(write_patch_file(tmp_path / "c.safetensors", state))


def _image(size=(32, 48), seed=0) -> torch.Tensor:
    return torch.rand(1, *size, 3, generator=torch.Generator().manual_seed(seed))


def _flow(network, vae, image, strength):
    """The control flow written out for the tiny 2-block Z-Image (ComfyUI spaces control layer k
    at main block k * round(30 / layers): with 2 blocks only control layer 0 reaches block 0)."""
    latent = (vae.encode(image) - FLUX_SHIFT) * FLUX_SCALE  # [1, 16, h, w]
    if network.additional_in_dim:  # inpaint models without an inpaint image: a zero mask, a grey image
        grey = (vae.encode(torch.full_like(image, 0.5)) - FLUX_SHIFT) * FLUX_SCALE
        latent = torch.cat([latent, torch.zeros_like(latent[:, :1]), grey], dim=1)
    b, c, h, w = latent.shape
    tokens = latent.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 3, 5, 1).reshape(b, h * w // 4, 4 * c)
    embedder = network.control_all_x_embedder["2-1"]
    state = {}

    def start(pe, vec):
        control = tokens @ embedder.weight.T + embedder.bias
        if not network.config.refiner_control:  # 1.0: the plain refiner blocks on the control tokens
            for block in network.control_noise_refiner:
                control = block(control, pe[:1, :control.shape[1]], vec)
        return control

    def refiner(args):
        img, pe, vec, i = args["img"], args["pe"], args["vec"], args["block_index"]
        if i == 0:
            state["c"] = start(pe, vec)
        if not network.config.refiner_control:
            return {}
        block = network.control_noise_refiner[i]
        c = state["c"]
        n = c.shape[1]
        if i == 0:
            c = block.before_proj(c) + args["img_input"][:, :n]
        c = block(c, pe[:1, :n], vec)
        state["c"] = c
        return {"img": torch.cat([img[:, :n] + strength * block.after_proj(c), img[:, n:]], dim=1)}

    def main(args):
        img, pe, vec, i = args["img"], args["pe"], args["vec"], args["block_index"]
        if i != 0:
            return {}
        block = network.control_layers[0]
        c = state["c"]
        n = c.shape[1]
        c = block(block.before_proj(c) + args["img_input"][:, :n], pe[:1, :n], vec)
        return {"img": torch.cat([img[:, :n] + strength * block.after_proj(c), img[:, n:]], dim=1)}

    return refiner, main


@pytest.mark.parametrize("version", ["1.0", "2.1"])
def test_the_control_stream_follows_comfyuis_flow(files, version):
    model, vae, patches = files
    patch = patches[version]
    with torch.no_grad():
        latent_shape = vae.encode(_image()).shape
    gen = torch.Generator().manual_seed(2)
    x, sigma = torch.randn(latent_shape, generator=gen), torch.tensor([0.6])
    context = torch.randn(1, 5, CAP_WIDTH, generator=gen)

    def run(patcher, patches_=None):
        options = dict(patcher.model_options["transformer_options"])
        if patches_ is not None:
            options["patches"] = patches_
        with torch.no_grad(), patcher.applied() as dm:
            return dm.diffusion_model(x, sigma, context, transformer_options=options)

    (patched,) = z_image_fun_controlnet(model, patch, vae, 0.8, image=_image())
    with torch.no_grad():
        refiner, main = _flow(patch.model, vae, _image(), 0.8)
        expected = run(model, {"noise_refiner": [refiner], "double_block": [main]})
    ours = run(patched)
    assert (ours - expected).abs().max() < 1e-5
    assert (ours - run(model)).abs().max() > 1e-3
    assert torch.equal(run(patched), ours)  # the control stream restarts with the next call


def test_the_qwen_image_diffsynth_node_applies_a_z_image_fun_patch_as_zimagefuncontrolnet(files):
    """ComfyUI's QwenImageDiffsynthControlnet dispatches on the patch's network (the Z-Image Fun
    union template wires the Z-Image patch through it)."""
    from nodes.diffsynth_controlnet import qwen_image_diffsynth_controlnet

    model, vae, patches = files
    (through_qwen,) = qwen_image_diffsynth_controlnet(model, patches["1.0"], vae, _image(), 0.8)
    (direct,) = z_image_fun_controlnet(model, patches["1.0"], vae, 0.8, image=_image())
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        x = torch.randn(vae.encode(_image()).shape, generator=gen)
    context = torch.randn(1, 5, CAP_WIDTH, generator=gen)
    outs = []
    for patcher in (through_qwen, direct, model):
        with torch.no_grad(), patcher.applied() as dm:
            outs.append(dm.diffusion_model(x, torch.tensor([0.6]), context,
                                           transformer_options=dict(patcher.model_options["transformer_options"])))
    assert torch.equal(outs[0], outs[1]) and (outs[0] - outs[2]).abs().max() > 1e-3


def test_a_bf16_patch_runs_in_the_models_dtype(files, tmp_path):
    """The releases are bfloat16 and the model computes in float32 here: the patch's layers cast
    their weights as they run (ComfyUI's `manual_cast`), giving the float32 patch's result up to
    the rounding of the weights."""
    model, vae, patches = files
    state = {k: v.to(torch.bfloat16) for k, v in zimage_fun_controlnet_state_dict(version="1.0", seed=5).items()}
    bf16 = load_model_patch(write_patch_file(tmp_path / "fun_bf16.safetensors", state))
    assert bf16.model.control_layers[0].attention.qkv.weight.dtype == torch.bfloat16
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        x = torch.randn(vae.encode(_image()).shape, generator=gen)
    context = torch.randn(1, 5, CAP_WIDTH, generator=gen)
    outs = []
    for patch in (bf16, patches["1.0"]):
        (patched,) = z_image_fun_controlnet(model, patch, vae, 1.0, image=_image())
        with torch.no_grad(), patched.applied() as dm:
            outs.append(dm.diffusion_model(x, torch.tensor([0.6]), context,
                                           transformer_options=dict(patched.model_options["transformer_options"])))
    assert outs[0].dtype == torch.float32 and (outs[0] - outs[1]).abs().max() < 5e-2


def test_inpaint_latent_and_mask(files):
    model, vae, patches = files
    mask = torch.zeros(1, 32, 48)
    mask[:, :, 24:] = 1.0  # repaint the right half
    inpaint = _image(seed=4)
    (patched,) = z_image_fun_controlnet(model, patches["2.1"], vae, 1.0, image=_image(), inpaint_image=inpaint,
                                        mask=mask)
    patch = patched.model_options["transformer_options"]["patches"]["double_block"][0]
    with torch.no_grad():
        latent = patch.control_latent(32, 48)
        keep = inpaint.clone()
        keep[:, :, 24:] = 0.5  # the repainted part grey
        h, w = latent.shape[-2:]
        assert latent.shape[1] == 33
        assert torch.allclose(latent[:, :16], (vae.encode(_image()) - FLUX_SHIFT) * FLUX_SCALE, atol=1e-6)
        assert torch.allclose(latent[:, 17:], (vae.encode(keep) - FLUX_SHIFT) * FLUX_SCALE, atol=1e-6)
        assert torch.equal(latent[0, 16, :, : w // 2], torch.ones(h, w // 2))
        assert torch.equal(latent[0, 16, :, w // 2:], torch.zeros(h, w - w // 2))
        (alone,) = z_image_fun_controlnet(model, patches["2.1"], vae, 1.0, inpaint_image=inpaint)
        grey = alone.model_options["transformer_options"]["patches"]["double_block"][0].control_latent(32, 48)
        assert torch.allclose(grey[:, :16], (vae.encode(torch.full_like(inpaint, 0.5)) - FLUX_SHIFT) * FLUX_SCALE,
                              atol=1e-6)
        assert torch.equal(grey[:, 16], torch.zeros_like(grey[:, 16]))  # no mask: zeros


def test_node_errors(files):
    model, vae, patches = files
    with pytest.raises(NodeInputError, match="Z-Image Fun ControlNet MODEL_PATCH"):
        z_image_fun_controlnet(model, vae, vae, 1.0, image=_image())
    with pytest.raises(NodeInputError, match="control image") as info:
        z_image_fun_controlnet(model, patches["1.0"], vae, 1.0, inpaint_image=_image())
    assert info.value.input_name == "image"
    with pytest.raises(NodeInputError, match="strength"):
        z_image_fun_controlnet(model, patches["1.0"], vae, -11.0, image=_image())


def test_a_patched_model_samples_two_steps(files):
    from comfy_core.sampling.ksampler import sample

    model, vae, patches = files
    (patched,) = z_image_fun_controlnet(model, patches["2.0"], vae, 1.0, image=_image())
    gen = torch.Generator().manual_seed(4)
    positive = [[torch.randn(1, 5, CAP_WIDTH, generator=gen), {}]]
    negative = [[torch.randn(1, 3, CAP_WIDTH, generator=gen), {}]]
    with torch.no_grad():
        shape = vae.encode(_image()).shape
    noise = torch.randn(shape, generator=gen)
    out = sample(patched, noise, 2, 2.0, "euler", "simple", positive, negative, torch.zeros(shape))
    plain = sample(model, noise, 2, 2.0, "euler", "simple", positive, negative, torch.zeros(shape))
    assert torch.isfinite(out).all() and (out - plain).abs().max() > 1e-4
