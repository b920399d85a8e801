"""Pieces of ComfyUI's surface that tests/compat/test_comfy_surface.py found missing (issue 31),
each as it behaves: folder kinds and the models folder made at start-up, folder_paths' listing
helpers, k-diffusion's utils (FolderOfImages), the latent distributions, the Perp-Neg guider class,
built-in node classes' attributes and ComfyUI names, re-exported names, the executing context,
RMSNorm, nodes.py's functions, the prediction mixins' maths, SAG helpers, GLIGEN, comfy.sd's
style/GLIGEN loaders, sub-quadratic attention."""
from __future__ import annotations

import pytest


def test_models_dir_and_every_kinds_folder_exist_after_the_first_start(tmp_path):
    from web.bootstrap import build_environment
    from web.config import ServerConfig

    extra = tmp_path / "extra.yaml"
    extra.write_text(f"mine:\n  base_path: {tmp_path / 'shared'}\n  loras: loras\n", encoding="utf-8")
    env, _ = build_environment(ServerConfig(base_dir=tmp_path / "base", extra_model_paths=(extra,)))
    models = tmp_path / "base" / "models"
    for sub in ("checkpoints", "loras", "clip", "unet", "text_encoders", "diffusion_models", "t2i_adapter",
                "model_patches", "audio_encoders", "classifiers", "photomaker", "latent_upscale_models"):
        assert (models / sub).is_dir(), sub
    assert not (tmp_path / "shared").exists()  # a yaml folder is the user's: never created
    assert not (tmp_path / "base" / "fonts").exists()  # beside models/, not a model folder
    build_environment(ServerConfig(base_dir=tmp_path / "base"))  # a second start finds them there


def test_folder_kinds_list_their_own_extensions(session, tmp_path):
    import folder_paths

    models = tmp_path / "models"
    for kind, names in {"configs": ("v1.yaml", "v1.ckpt"), "classifiers": ("classifier", "notes.txt"),
                        "model_patches": ("uso.safetensors", "readme.md")}.items():
        (models / kind).mkdir(parents=True)
        for name in names:
            (models / kind / name).write_bytes(b"x")
    (tmp_path / "fonts").mkdir()
    (tmp_path / "fonts" / "a.ttf").write_bytes(b"x")
    assert folder_paths.get_filename_list("configs") == ["v1.yaml"]
    assert folder_paths.get_filename_list("classifiers") == ["classifier"]  # files without an extension
    assert folder_paths.get_filename_list("model_patches") == ["uso.safetensors"]
    assert folder_paths.get_filename_list("fonts") == ["a.ttf"]
    assert folder_paths.folder_names_and_paths["configs"][1] == {".yaml"}
    assert folder_paths.folder_names_and_paths["custom_nodes"][1] == set()
    assert folder_paths.get_folder_paths("latent_upscale_models") == [str(models.resolve() / "latent_upscale_models")]
    assert folder_paths.map_legacy("unet") == "diffusion_models" and folder_paths.map_legacy("vae") == "vae"


def test_folder_paths_listing_helpers(session, tmp_path):
    import folder_paths

    loras = tmp_path / "models" / "loras"
    (loras / "sub" / ".git").mkdir(parents=True)
    (loras / "a.safetensors").write_bytes(b"x")
    (loras / "sub" / "b.pt").write_bytes(b"x")
    (loras / "sub" / ".git" / "c.pt").write_bytes(b"x")
    files, folders = folder_paths.recursive_search(str(loras), excluded_dir_names=[".git"])
    assert sorted(f.replace("\\", "/") for f in files) == ["a.safetensors", "sub/b.pt"]
    assert str(loras) in folders and str(loras / "sub") in folders
    names, _, _ = folder_paths.get_filename_list_("loras")
    assert names == ["a.safetensors", "sub/b.pt"]
    assert folder_paths.cached_filename_list_("loras") is None  # nothing kept between calls here
    with folder_paths.cache_helper:
        folder_paths.cache_helper.set("loras", (["kept"], {}, 0.0))
        assert folder_paths.cached_filename_list_("loras") == (["kept"], {}, 0.0)
    assert folder_paths.cached_filename_list_("loras") is None
    assert folder_paths.filter_files_content_types(["a.png", "b.webp", "c.mp4", "d.txt", "e.fbx"],
                                                   ["image", "model"]) == ["a.png", "b.webp", "e.fbx"]
    (tmp_path / "input" / "x" / "y").mkdir(parents=True)
    assert folder_paths.get_input_subfolders() == ["x", "x/y"]
    folder_paths.set_output_directory(str(tmp_path / "elsewhere"))
    assert folder_paths.get_output_directory() == str(tmp_path / "elsewhere")


def test_k_diffusion_utils_folder_of_images_and_training_helpers(session, tmp_path):
    import torch
    from PIL import Image

    from comfy.k_diffusion import utils

    (tmp_path / "imgs" / "sub").mkdir(parents=True)
    Image.new("RGB", (2, 2), (255, 0, 0)).save(tmp_path / "imgs" / "a.png")
    Image.new("L", (3, 1)).save(tmp_path / "imgs" / "sub" / "b.JPG")
    (tmp_path / "imgs" / "notes.txt").write_text("no")
    dataset = utils.FolderOfImages(tmp_path / "imgs")
    assert len(dataset) == 2 and isinstance(dataset, torch.utils.data.Dataset)
    (first,) = dataset[0]
    assert first.mode == "RGB" and first.size == (2, 2)
    sized = utils.FolderOfImages(str(tmp_path / "imgs"), transform=lambda im: im.size)
    assert sized[1] == ((3, 1),)

    torch.manual_seed(0)
    s = utils.rand_log_uniform((64,), 0.1, 10.0)
    assert s.min() >= 0.1 and s.max() <= 10.0
    v = utils.rand_v_diffusion((64,), sigma_data=0.5, min_value=0.2, max_value=3.0)
    assert v.min() >= 0.2 - 1e-5 and v.max() <= 3.0 + 1e-5
    ll = utils.rand_log_logistic((64,), min_value=0.5, max_value=2.0)
    assert ll.min() >= 0.5 - 1e-5 and ll.max() <= 2.0 + 1e-5
    assert utils.rand_log_normal((3, 2)).shape == (3, 2) and (utils.rand_split_log_normal((8,), 0.0, 1.0, 2.0) > 0).all()
    assert utils.append_dims(torch.ones(2), 4).shape == (2, 1, 1, 1)

    warm = utils.EMAWarmup(inv_gamma=1.0, power=1.0, max_value=0.9)
    assert warm.get_value() == 0.0
    warm.step()
    assert warm.get_value() == 0.5  # 1 - (1 + 1)^-1
    for _ in range(10):
        warm.step()
    assert warm.get_value() == 0.9  # clamped

    model, average = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    before = average.weight.detach().clone()
    utils.ema_update(model, average, 0.75)
    assert torch.allclose(average.weight, 0.75 * before + 0.25 * model.weight)
    assert utils.n_params(model) == 3
    model.train()
    with utils.eval_mode(model):
        assert not model.training
    assert model.training
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = utils.InverseLR(optimizer, inv_gamma=1.0, power=1.0)
    optimizer.step()
    schedule.step()
    assert optimizer.param_groups[0]["lr"] == 0.5  # (1 + 1/1)^-1


def test_ldm_distributions_are_the_kl_autoencoders(session):
    import math

    import torch

    from comfy.ldm.models import autoencoder
    from comfy.ldm.modules.distributions.distributions import DiagonalGaussianDistribution, normal_kl

    params = torch.zeros(1, 4, 2, 2)  # mean 0, logvar 0: the standard normal
    dist = DiagonalGaussianDistribution(params)
    assert torch.equal(dist.mode(), torch.zeros(1, 2, 2, 2)) and torch.equal(dist.kl(), torch.zeros(1))
    assert torch.allclose(dist.nll(torch.zeros(1, 2, 2, 2)), torch.tensor([0.5 * 8 * math.log(2 * math.pi)]))
    torch.manual_seed(1)
    assert dist.sample().shape == (1, 2, 2, 2)
    point = DiagonalGaussianDistribution(torch.cat([torch.ones(1, 2, 1, 1), torch.full((1, 2, 1, 1), 50.0)], 1),
                                         deterministic=True)
    assert torch.equal(point.sample(), torch.ones(1, 2, 1, 1)) and float(point.logvar.max()) == 20.0
    assert float(normal_kl(torch.tensor(0.0), 0.0, 0.0, 0.0)) == 0.0
    assert autoencoder.DiagonalGaussianDistribution is DiagonalGaussianDistribution  # ComfyUI's re-export


def test_perp_neg_guider_class_for_packs_to_subclass(session):
    import torch

    import comfy.samplers
    from comfy_core.sampling import perp_neg as core
    from comfy_extras import nodes_perpneg

    class PackGuider(nodes_perpneg.Guider_PerpNeg):  # Inspire-Pack's Guider_PerpNegAG does so
        def set_threshold(self, threshold):
            self.threshold = threshold

    guider = PackGuider(object())
    guider.set_cfg(7.0, 1.5)
    guider.set_threshold(0.3)
    assert isinstance(guider, comfy.samplers.CFGGuider) and (guider.cfg, guider.neg_scale) == (7.0, 1.5)
    pos, neg, empty = torch.randn(3, 1, 4, 2, 2)
    assert torch.equal(nodes_perpneg.perp_neg(None, pos, neg, empty, 1.5, 7.0), core.perp_neg(pos, neg, empty, 1.5, 7.0))
    assert "PerpNegGuider" in nodes_perpneg.NODE_CLASS_MAPPINGS


def test_builtin_node_classes_carry_comfyuis_class_attributes_and_names(session):
    import nodes
    from comfy_extras import nodes_primitive, nodes_sd3

    # ComfyUI 0.3.64's values (nodes.py): packs build their own combos from them (rgthree)
    assert nodes.ImageScale.upscale_methods == ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]
    assert nodes.ImageScale.crop_methods == ["disabled", "center"]
    assert nodes.LatentUpscale.upscale_methods == ["nearest-exact", "bilinear", "area", "bicubic", "bislerp"]
    assert nodes.CheckpointLoader.DEPRECATED is True and nodes.KSampler.DEPRECATED is False
    assert len(nodes.CLIPTextEncode.OUTPUT_TOOLTIPS) == 1 and nodes.CLIPTextEncode.OUTPUT_TOOLTIPS[0]
    # ComfyUI's class names in their modules, NODE_CLASS_MAPPINGS by node id as there
    assert nodes_primitive.Int is nodes_primitive.NODE_CLASS_MAPPINGS["PrimitiveInt"]
    assert "Int" not in nodes_primitive.NODE_CLASS_MAPPINGS
    # a V3 node's V1 method name of 0.3.64 (`generate = execute`), positional in ComfyUI's order
    (latent,) = nodes_sd3.EmptySD3LatentImage.generate(64, 32, 2)
    assert latent["samples"].shape == (2, 16, 4, 8)
    schema = nodes_sd3.EmptySD3LatentImage.define_schema()
    assert schema.node_id == "EmptySD3LatentImage" and [i.id for i in schema.inputs] == ["width", "height", "batch_size"]
    assert [o.io_type for o in schema.outputs] == ["LATENT"]
    # the node's own checks under ComfyUI's names, with ComfyUI's parameters
    from nodes.image import image_exists

    assert nodes.LoadImage.VALIDATE_INPUTS("missing.png") == image_exists("missing.png")
    with pytest.raises(TypeError, match="1 positional"):
        nodes.LoadImage.IS_CHANGED("a.png", "b.png")


def test_names_comfyuis_modules_import_from_each_other(session):
    import comfy.cli_args
    import comfy.k_diffusion.sampling
    import comfy.model_detection
    import comfy.model_management
    import comfy.samplers
    import comfy.sd
    import nodes

    assert comfy.samplers.k_diffusion_sampling is comfy.k_diffusion.sampling
    assert comfy.sd.model_detection is comfy.model_detection
    assert nodes.args is comfy.cli_args.args
    assert comfy.samplers.model_management is comfy.model_management
    original = comfy.k_diffusion.sampling
    comfy.samplers.k_diffusion_sampling = "changed"  # a module's own binding, as in ComfyUI
    try:
        assert comfy.samplers.k_diffusion_sampling == "changed" and comfy.k_diffusion.sampling is original
    finally:
        comfy.samplers.k_diffusion_sampling = original
    with pytest.raises(AttributeError):
        comfy.samplers.not_a_comfyui_name  # noqa: B018


def test_executing_context_rms_norm_and_nodes_module_functions(session, tmp_path):
    import torch

    import comfy.rmsnorm
    import nodes
    from comfy_execution import utils as exec_utils
    from graph.context import NodeContext, reset_current, set_current

    assert exec_utils.get_executing_context() is None
    token = set_current(NodeContext("p1", "7", "7", 2, None))
    try:
        assert exec_utils.get_executing_context() == ("p1", "7", 2)
        with exec_utils.CurrentNodeContext("p2", "9"):
            assert exec_utils.get_executing_context() == exec_utils.ExecutionContext("p2", "9", None)
        assert exec_utils.get_executing_context().node_id == "7"
    finally:
        reset_current(token)

    x = torch.tensor([[3.0, 4.0]])
    expected = x / torch.sqrt(torch.tensor(12.5) + 1e-6)
    assert torch.allclose(comfy.rmsnorm.rms_norm(x), expected)
    assert torch.allclose(comfy.rmsnorm.rms_norm(x, torch.tensor([2.0, 0.5], dtype=torch.float64)),
                          expected * torch.tensor([2.0, 0.5]))

    (tmp_path / "pack.py").write_text("")
    assert nodes.get_module_name(str(tmp_path / "pack.py")) == "pack"
    assert nodes.get_module_name(str(tmp_path / "folder_pack")) == "folder_pack"
    assert nodes.LOADED_MODULE_DIRS == {}  # no pack loaded in this session
    nodes.before_node_execution()  # outside a run: nothing to interrupt
    token = set_current(NodeContext("p", "1", "1", None, None, is_interrupted=lambda: True))
    try:
        from comfy.model_management import InterruptProcessingException

        with pytest.raises(InterruptProcessingException):
            nodes.before_node_execution()
    finally:
        reset_current(token)


def test_prediction_mixins_have_comfyuis_maths_for_packs_mixins(session):
    import torch

    import comfy.model_sampling as ms

    class DoubledEps(ms.EPS):  # a pack's mixin building on ComfyUI's
        def calculate_denoised(self, sigma, model_output, model_input):
            return super().calculate_denoised(sigma, model_output, model_input) * 2

    sigma, out, x = torch.tensor([2.0]), torch.ones(1, 1, 1, 1), torch.full((1, 1, 1, 1), 5.0)
    assert float(DoubledEps().calculate_denoised(sigma, out, x)) == 2 * (5.0 - 2.0)
    assert float(ms.V_PREDICTION().calculate_denoised(sigma, out, x)) == pytest.approx(5 / 5 - 2 / 5 ** 0.5)
    assert float(ms.X0().calculate_denoised(sigma, out, x)) == 1.0
    assert float(ms.EPS().calculate_input(sigma, x)) == pytest.approx(5 / 5 ** 0.5)
    assert float(ms.CONST().noise_scaling(torch.tensor([0.25]), out, x)) == 0.25 + 0.75 * 5
    assert float(ms.CONST().inverse_noise_scaling(torch.tensor([0.5]), x)) == 10.0
    assert float(ms.EPS().noise_scaling(sigma, out, x, max_denoise=True)) == pytest.approx(5 + 5 ** 0.5)
    # the module's functions under ComfyUI's parameters
    from comfy_core.models import model_sampling as core

    assert ms.flux_time_shift(mu=1.15, sigma=1.0, t=0.3) == pytest.approx(core.flux_time_shift(1.15, 0.3))
    assert ms.flux_time_shift(1.15, 2.0, 0.3) != pytest.approx(core.flux_time_shift(1.15, 0.3))
    assert ms.time_snr_shift(alpha=3.0, t=0.5) == pytest.approx(0.75)
    assert ms.reshape_sigma(torch.tensor([2.0]), 4).shape == () and ms.reshape_sigma(torch.ones(3), 4).shape == (3, 1, 1, 1)
    cascade = ms.StableCascadeSampling()
    cascade.set_parameters(shift=2.0)
    assert float(cascade.shift) == 2.0


def test_sag_helpers_and_gligen_class_packs_import(session, monkeypatch):
    import torch

    import comfy.gligen
    from comfy_core.gligen.model import PositionNet
    from comfy_core.model_patches import sag
    from comfy_extras import nodes_sag

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 6)
    out, sim = nodes_sag.attention_basic_with_sim(q, k, v, heads=2)
    ref_out, ref_sim = sag.attention_with_scores(q, k, v, 2)
    assert torch.equal(out, ref_out) and torch.equal(sim, ref_sim) and sim.shape == (4, 4, 4)
    keep = torch.tensor([[True, True, False, True], [True, False, True, True]])
    _, masked = nodes_sag.attention_basic_with_sim(q, k, v, heads=2, mask=keep)
    assert torch.all(masked[0:2, :, 2] == 0) and torch.all(masked[2:4, :, 1] == 0)  # hidden keys get no weight
    assert torch.allclose(masked.sum(-1), torch.ones(4, 4))
    x0 = torch.randn(1, 2, 8, 8)
    assert torch.equal(nodes_sag.create_blur_map(x0, sim[:2], threshold=-1.0),
                       sag.blur_where_attended(x0, sim[:2], 3.0, -1.0))
    assert torch.equal(nodes_sag.gaussian_blur_2d(x0, 3, 1.0), sag.gaussian_blur_2d(x0, 3, 1.0))
    assert "SelfAttentionGuidance" in nodes_sag.NODE_CLASS_MAPPINGS

    gligen = comfy.gligen.Gligen([comfy.gligen.GatedSelfAttentionDense(8, 4, 2, 4)], PositionNet(4, 4, 16), 4)
    calls = []

    def pack_set_position(self, boxes, masks, positive_embeddings):  # TiledDiffusion replaces it so
        calls.append(tuple(boxes.shape))
        return lambda x, extra_options: x

    monkeypatch.setattr(comfy.gligen.Gligen, "_set_position", pack_set_position)
    patch = gligen.set_position((2, 4, 8, 8), [(torch.zeros(1, 4), 4, 4, 0, 0)], "cpu")
    assert calls == [(2, 30, 4)] and callable(patch)


def test_comfy_sd_loads_style_models_and_gligen_by_path(session, tmp_path):
    import comfy.sd
    from comfy_core.gligen.model import GligenModel
    from comfy_core.style_models.style_model import StyleModel
    from tests.fixtures.checkpoints_variants import write_tiny_gligen
    from tests.fixtures.clip_vision import write_tiny_style_model

    style = comfy.sd.load_style_model(str(write_tiny_style_model(tmp_path / "style.safetensors")))
    assert isinstance(style, StyleModel)
    gligen = comfy.sd.load_gligen(ckpt_path=str(write_tiny_gligen(tmp_path / "gligen.safetensors")))
    assert isinstance(gligen.model, GligenModel)


def test_sub_quadratic_attention_and_union_controlnet_types(session):
    import torch

    from comfy.cldm.control_types import UNION_CONTROLNET_TYPES
    from comfy.ldm.modules.sub_quadratic_attention import efficient_dot_product_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 9, 4)  # [batch*heads, tokens, dim]
    mask = torch.zeros(9, 9)
    mask[:, 3] = -float("inf")  # an additive mask hiding key 3
    expected = torch.softmax(q @ k.transpose(-1, -2) / 2.0 + mask, dim=-1) @ v
    out = efficient_dot_product_attention(q, k.transpose(-1, -2), v, query_chunk_size=4, kv_chunk_size=2, mask=mask)
    assert out.shape == (2, 9, 4) and torch.allclose(out, expected, atol=1e-5)
    assert UNION_CONTROLNET_TYPES["repaint"] == 7 and len(UNION_CONTROLNET_TYPES) == 8


def test_cuda_only_ops_exist_and_answer_as_on_a_machine_without_them(session):
    import torch

    import comfy.ops

    assert comfy.ops.CUBLAS_IS_AVAILABLE is False  # as ComfyUI without the cublas_ops package
    layer = torch.nn.Linear(2, 2)
    assert comfy.ops.fp8_linear(layer, torch.ones(1, 2)) is None  # not fp8: the caller casts
    layer.weight.data = layer.weight.data.to(torch.float8_e4m3fn)
    with pytest.raises(comfy.ops.UnsupportedOperations, match="CUDA"):
        comfy.ops.fp8_linear(layer, torch.ones(1, 2))
