"""Pieces of ComfyUI's contract the seventh pack survey's leads needed (/work/scratch/s7/REPORT.md),
each called the way the pack does, with a fixture or a direct call (the real packs are not needed):

- spacepxl/ComfyUI-VAE-Utils: `vars(comfy.latent_formats)` lists every format (its format table
  is built from it), and its `CustomVAE(comfy.sd.VAE)`, which copies ComfyUI's `VAE.__init__`
  without calling ours, sets ComfyUI's attributes and then encodes / decodes as ComfyUI's VAE;
- ComfyUI-Login / workspace-manager: `os.path.dirname(folder_paths.__file__)` is the server's base
  folder (ComfyUI's install root), not our source tree;
- LanPaint: `comfy.model_base.ModelType.FLOW_AV` and `comfy.model_sampling.ModelSamplingAV`;
- ComfyUI-NAG: a network `forward` replaced by one that runs the DIFFUSION_MODEL wrappers around
  `_forward` itself runs each wrapper once per call, as on ComfyUI.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures.checkpoints import _random_value, _VAEArch, vae_shapes

REPO = Path(__file__).resolve().parents[2]

# VAE-Utils' LDM config at the tiny fixture VAE's widths (tests/fixtures/checkpoints.py)
DDCONFIG = {"double_z": True, "z_channels": 4, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 32,
            "ch_mult": [1, 2, 2, 2], "num_res_blocks": 1, "attn_resolutions": [], "dropout": 0.0}


def _tiny_vae_sd(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: _random_value(k, s, gen) for k, s in sorted(vae_shapes(_VAEArch(), "").items())}


def _image(h: int = 32, w: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.rand(1, h, w, 3, generator=torch.Generator().manual_seed(seed))


# --- VAE-Utils (a): vars(comfy.latent_formats) ------------------------------------------------------------


def test_vars_of_latent_formats_lists_every_format_as_the_pack_builds_its_table(session):
    import comfy.latent_formats

    names = comfy.latent_formats._facade_names
    # nodes.py of VAE-Utils, at import:
    formats = {name: obj for name, obj in vars(comfy.latent_formats).items() if isinstance(obj, type)}
    del formats["LatentFormat"]
    assert set(formats) == set(names) - {"LatentFormat"}
    assert {"SD15", "SDXL", "SD3", "Flux", "Wan21", "Wan22", "HunyuanVideo", "LTXV", "Mochi"} <= set(formats)
    assert comfy.latent_formats.__dict__ is vars(comfy.latent_formats)
    # its ScaleLatents node: `latent_formats[latent_type]()` then process_in / process_out
    latent = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    sd15 = formats["SD15"]()
    torch.testing.assert_close(sd15.process_in(latent), latent * 0.18215)
    torch.testing.assert_close(sd15.process_out(sd15.process_in(latent)), latent)
    for cls in formats.values():
        assert isinstance(cls(), comfy.latent_formats.LatentFormat)


def test_vars_of_latent_formats_before_torch_is_loaded_imports_no_torch(tmp_path):
    """Importing the module, and asking for its dictionary, before torch is loaded leaves torch
    unloaded (the dictionary is then what was read so far); once torch is loaded it lists all."""
    code = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        import compat
        from graph.registry import Registry
        from nodes.environment import Environment

        env = Environment.rooted_at(Path({str(tmp_path)!r}))
        env.ensure_dirs()
        compat.install(env, Registry())
        import comfy.latent_formats
        before = sorted(n for n, v in vars(comfy.latent_formats).items() if isinstance(v, type))
        dir(comfy.latent_formats)
        torch_before = "torch" in sys.modules
        import torch
        after = sorted(n for n, v in vars(comfy.latent_formats).items() if isinstance(v, type))
        print(json.dumps({{"torch_before": torch_before, "before": before, "after": after}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch_before"] is False and result["before"] == []
    assert "LatentFormat" in result["after"] and "Wan22" in result["after"] and len(result["after"]) > 20


# --- VAE-Utils (b): a comfy.sd.VAE subclass that sets ComfyUI's attributes itself -------------------------


def _custom_vae_class():
    """VAE-Utils' `CustomVAE` (src/sd.py) for an SD-style state dict: ComfyUI's `VAE.__init__`
    copied, ours never called."""
    import comfy.model_management as model_management
    import comfy.model_patcher
    import comfy.sd
    from comfy.ldm.models.autoencoder import AutoencoderKL

    class CustomVAE(comfy.sd.VAE):
        def __init__(self, sd=None, device=None, config=None, dtype=None, metadata=None):
            self.memory_used_encode = lambda shape, dtype: (1767 * shape[2] * shape[3]) * model_management.dtype_size(dtype)
            self.memory_used_decode = lambda shape, dtype: (2178 * shape[2] * shape[3] * 64) * model_management.dtype_size(dtype)
            self.downscale_ratio = 8
            self.upscale_ratio = 8
            self.latent_channels = 4
            self.latent_dim = 2
            self.input_channels = 3
            self.output_channels = 3
            self.real_output_channels = 3
            self.pad_channel_value = None
            self.process_input = lambda image: image * 2.0 - 1.0
            self.process_output = lambda image: torch.clamp((image + 1.0) / 2.0, min=0.0, max=1.0)
            self.working_dtypes = [torch.bfloat16, torch.float32]
            self.disable_offload = False
            self.not_video = False
            self.size = None
            self.downscale_index_formula = None
            self.upscale_index_formula = None
            self.extra_1d_channel = None
            self.crop_input = True
            self.latent_channels = sd["decoder.conv_in.weight"].shape[1]
            self.first_stage_model = AutoencoderKL(ddconfig=dict(DDCONFIG), embed_dim=sd["post_quant_conv.weight"].shape[1])
            self.first_stage_model = self.first_stage_model.eval()
            missing, unexpected = self.first_stage_model.load_state_dict(sd, strict=False)
            assert missing == [] and unexpected == []
            if device is None:
                device = model_management.vae_device()
            self.device = device
            offload_device = model_management.vae_offload_device()
            if dtype is None:
                dtype = model_management.vae_dtype(self.device, self.working_dtypes)
            self.vae_dtype = dtype
            self.first_stage_model.to(self.vae_dtype)
            self.output_device = model_management.intermediate_device()
            self.patcher = comfy.model_patcher.ModelPatcher(self.first_stage_model, load_device=self.device,
                                                            offload_device=offload_device)

    return CustomVAE


def test_a_subclass_setting_comfyuis_attributes_encodes_and_decodes_as_our_vae(session):
    import comfy.sd

    sd = _tiny_vae_sd()
    vae = _custom_vae_class()(sd=sd)
    ours = comfy.sd.VAE(sd=sd)  # our loader's object for the same weights
    assert isinstance(vae, comfy.sd.VAE) and isinstance(ours, comfy.sd.VAE)
    assert vae.latent_channels == 4 and vae.latent_dim == 2 and vae.first_stage_model is vae.patcher.model
    assert vae.vae_dtype == torch.float32 and vae.is_video is False
    image = _image()
    latent = vae.encode(image)
    assert latent.shape == (1, 4, 4, 5)
    torch.testing.assert_close(latent, ours.encode(image), rtol=1e-5, atol=1e-6)
    # independent: ComfyUI's encode is the module's mean of process_input(pixels) in [B, C, H, W]
    with torch.no_grad():
        expected = vae.first_stage_model.encode(image.movedim(-1, 1) * 2 - 1)
    torch.testing.assert_close(latent, expected)
    pixels = vae.decode(latent)
    assert pixels.shape == (1, 32, 40, 3)
    torch.testing.assert_close(pixels, ours.decode(latent), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(pixels, ((vae.first_stage_model.decode(latent) + 1) / 2).clamp(0, 1).movedim(1, -1))
    # the tiled forms: three tilings averaged, close to the whole decode / encode on a smooth image
    tiled = vae.decode_tiled(latent, tile_x=4, tile_y=4, overlap=1)
    assert tiled.shape == pixels.shape and tiled.min() >= 0 and tiled.max() <= 1
    assert vae.encode_tiled(image, tile_x=32, tile_y=32, overlap=8).shape == latent.shape
    assert vae.spacial_compression_decode() == vae.spacial_compression_encode() == 8
    assert vae.temporal_compression_decode() is None
    assert set(vae.get_sd()) == set(sd)
    assert vae.cache_signature() is None and repr(vae).startswith("CustomVAE(AutoencoderKL")
    # an odd-sized image is cropped (centred) to whole latent cells, as ComfyUI's
    assert vae.encode(_image(35, 43)).shape == (1, 4, 4, 5)


def test_comfyuis_attributes_are_plain_instance_attributes_on_a_subclass(session):
    """Assignment as on ComfyUI: the instance's own value wins, for our computed attributes too;
    a subclass that calls our constructor keeps our values until it sets its own."""
    import comfy.sd

    class Ours(comfy.sd.VAE):
        def __init__(self, sd):
            super().__init__(sd=sd)

    vae = Ours(_tiny_vae_sd())
    assert vae.latent_channels == 4 and vae.downscale_ratio == 8 and vae.first_stage_model is vae.model
    vae.disable_offload = True
    vae.latent_channels = 16
    vae.upscale_ratio = (lambda a: a, 8, 8)
    assert vae.latent_channels == 16 and vae.upscale_ratio[1] == 8 and vae.disable_offload
    image = _image()
    torch.testing.assert_close(vae.decode(vae.encode(image)), comfy.sd.VAE(sd=_tiny_vae_sd()).decode(
        comfy.sd.VAE(sd=_tiny_vae_sd()).encode(image)))
    # ComfyUI's tiling passes on ours: our tiled decode / encode in ComfyUI's channels-first layout
    fresh = Ours(_tiny_vae_sd())
    latent = fresh.encode(image)
    torch.testing.assert_close(fresh.decode_tiled_(latent, 4, 4, 1), fresh.decode_tiled(latent, 4, 4, 1).movedim(-1, 1))
    torch.testing.assert_close(fresh.encode_tiled_(image.movedim(-1, 1), 32, 32, 8), fresh.encode_tiled(image, 32, 32, 8))
    torch.testing.assert_close(fresh.vae_encode_crop_pixels(_image(35, 43)), _image(35, 43)[:, 1:33, 1:41])
    with pytest.raises(NotImplementedError, match="decode_tiled_1d"):
        fresh.decode_tiled_1d(latent)
    # comfy.sd.VAE(...) itself is still our VAE object, and our VAEs are comfy.sd.VAE
    from comfy_core.patching.vae import VaePatcher

    plain = comfy.sd.VAE(sd=_tiny_vae_sd())
    assert type(plain) is VaePatcher and issubclass(VaePatcher, comfy.sd.VAE)
    assert not isinstance(object(), comfy.sd.VAE) and not isinstance(vae, _custom_vae_class())


def test_the_subclass_vae_runs_through_our_vae_nodes(session):
    """What the pack's loader node returns goes into our VAEEncode / VAEDecode nodes."""
    from nodes.latent import vae_decode, vae_encode

    vae = _custom_vae_class()(sd=_tiny_vae_sd())
    image = _image()
    latent = vae_encode(image, vae)[0]
    torch.testing.assert_close(latent["samples"], vae.encode(image))
    torch.testing.assert_close(vae_decode(latent, vae)[0], vae.decode(latent["samples"]))


# --- folder_paths.__file__ ------------------------------------------------------------------------------


WRITER = '''
import os
import folder_paths

ROOT = os.path.dirname(folder_paths.__file__)  # ComfyUI-Login's password folder, workspace-manager's files
os.makedirs(os.path.join(ROOT, "login"), exist_ok=True)
with open(os.path.join(ROOT, "login", "PASSWORD"), "w") as f:
    f.write("secret")
NODE_CLASS_MAPPINGS = {}
'''


def test_a_pack_writing_beside_folder_paths_writes_into_the_base_folder(session, tmp_path):
    from graph.packs import load_custom_nodes
    from graph.registry import Registry

    import folder_paths

    base = Path(folder_paths.base_path)
    assert Path(folder_paths.__file__) == base / "folder_paths.py"
    pack = tmp_path / "packs" / "login_like"
    pack.mkdir(parents=True)
    (pack / "__init__.py").write_text(WRITER)
    [result] = [r for r in load_custom_nodes(Registry(), [tmp_path / "packs"]) if r.name == "login_like"]
    assert result.ok, result.error
    assert (base / "login" / "PASSWORD").read_text() == "secret"
    assert result.module.ROOT == str(base)
    assert not (REPO / "compat" / "comfy_surface" / "login").exists()


def test_folder_paths_source_spec_and_reload_stay_the_modules_own(session):
    import folder_paths

    real = REPO / "compat" / "comfy_surface" / "folder_paths.py"
    assert Path(folder_paths.__spec__.origin) == real
    assert inspect.getsource(folder_paths) == real.read_text()
    assert Path(inspect.getsourcefile(folder_paths.get_filename_list)) == REPO / "compat" / "folders.py"
    reloaded = importlib.reload(folder_paths)
    assert reloaded is sys.modules["folder_paths"] and Path(reloaded.__file__).parent == Path(reloaded.base_path)
    assert reloaded.get_folder_paths("checkpoints")  # still the server's folders


def test_without_a_server_folder_paths_file_is_its_own():
    from compat.active import CompatNotInstalledError
    from compat.folders import FolderPathsModule

    module = FolderPathsModule("folder_paths_probe")
    module.__file__ = "/somewhere/folder_paths.py"
    with pytest.MonkeyPatch.context() as mp:
        def no_server():
            raise CompatNotInstalledError("none")
        mp.setattr("compat.folders.active", no_server)
        assert module.__file__ == "/somewhere/folder_paths.py"


# --- ModelType.FLOW_AV -------------------------------------------------------------------------------------


def test_flow_av_builds_the_av_flow_table_with_an_audio_shift(session):
    import comfy.model_base
    import comfy.model_sampling

    ModelType = comfy.model_base.ModelType
    assert ModelType.FLOW_AV.value == 13
    flow_types = (ModelType.FLOW, getattr(ModelType, "FLOW_AV", None))  # LanPaint's test
    assert ModelType.FLOW_AV in flow_types

    class Config:
        sampling_settings = {"shift": 3.0, "audio_shift": 1.5}

    sampling = comfy.model_base.model_sampling(Config(), ModelType.FLOW_AV)
    assert isinstance(sampling, comfy.model_sampling.ModelSamplingAV)
    assert isinstance(sampling, comfy.model_sampling.ModelSamplingDiscreteFlow)
    assert isinstance(sampling, comfy.model_sampling.CONST)
    t = torch.arange(1, 1001, dtype=torch.float64) / 1000
    expected = 3.0 * t / (1 + 2.0 * t)  # SD3's shift, computed here
    torch.testing.assert_close(sampling.sigmas.double(), expected, rtol=1e-6, atol=1e-7)
    assert sampling.audio_shift == 1.5 and sampling.audio_scale == pytest.approx(2.0)
    # CONST: x0 = x - sigma * v
    x, v, sigma = torch.ones(1, 2, 2, 2), torch.full((1, 2, 2, 2), 0.5), torch.tensor([0.4])
    torch.testing.assert_close(sampling.calculate_denoised(sigma, v, x), x - 0.4 * v)
    sampling.set_parameters(shift=2.0, audio_shift=None)
    assert sampling.audio_scale == 1.0 and sampling.shift == 2.0
    torch.testing.assert_close(sampling.sigmas.double(), 2.0 * t / (1 + t), rtol=1e-6, atol=1e-7)
    assert comfy.model_sampling.ModelSamplingAV().audio_shift is None


# --- ComfyUI-NAG: DIFFUSION_MODEL wrappers run once under a forward that runs them itself ----------------


@pytest.fixture(scope="module")
def sd1(tiny_sd1_ckpt):
    from comfy_core.loading import load_checkpoint
    from nodes.conditioning import clip_text_encode

    model, clip, _vae = load_checkpoint(tiny_sd1_ckpt)
    return model, clip_text_encode("a cat", clip)[0], clip_text_encode("blurry", clip)[0]


def _nag_style_forward(network, calls):
    """ComfyUI-NAG's `NAGUNetModel.forward` (sd/openaimodel.py), set on the instance as NAG does:
    the DIFFUSION_MODEL wrappers of the call's options run around the network's `_forward`."""
    import comfy.patcher_extension as pe

    def forward(x, timesteps=None, context=None, y=None, control=None, transformer_options={}, **kwargs):
        calls.append("forward")
        return pe.WrapperExecutor.new_class_executor(
            network._forward, network,
            pe.get_all_wrappers(pe.WrappersMP.DIFFUSION_MODEL, transformer_options),
        ).execute(x, timesteps, context, y, control, transformer_options, **kwargs)

    return forward


def _sample(model, pos, neg, steps=2):
    from nodes.sampling import ksampler

    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    return ksampler(model, 3, steps, 3.0, "euler", "normal", pos, neg, latent, 1.0)[0]["samples"]


def test_a_counting_wrapper_runs_once_per_network_call_under_a_nag_style_forward(session, sd1):
    import comfy.patcher_extension as pe

    model, pos, neg = sd1
    seen: list[tuple] = []

    def counting(executor, *args, **kwargs):
        seen.append((type(executor.class_obj).__name__, args[2].shape[0]))
        return executor(*args, **kwargs)

    patched = model.clone()
    patched.add_wrapper_with_key(pe.WrappersMP.DIFFUSION_MODEL, "count", counting)
    plain = _sample(patched, pos, neg)
    per_run = len(seen)
    assert per_run == 2  # 2 steps, cond and uncond in one batch
    network = patched.model.diffusion_model
    calls: list[str] = []
    network.forward = _nag_style_forward(network, calls)
    try:
        seen.clear()
        nag = _sample(patched, pos, neg)
    finally:
        del network.forward
    assert calls == ["forward"] * per_run
    assert len(seen) == per_run  # once each network call, not once by us and again by the pack
    assert torch.equal(nag, plain)


def test_the_same_chain_started_inside_its_own_call_runs_its_function_only(session):
    """The executor's rule, directly: inside the function a chain wraps, a new chain of the same
    wrappers around the same object calls its function; other objects' or other wrappers' chains
    run theirs."""
    import comfy.patcher_extension as pe

    order: list[str] = []
    owner, other = object(), object()

    def w1(executor, *args):
        order.append("w1")
        return executor(*args)

    def w2(executor, *args):
        order.append("w2")
        return executor(*args)

    def inner(x):
        order.append("inner")
        return x + 1

    def outer(x):
        order.append("outer")
        again = pe.WrapperExecutor.new_class_executor(inner, owner, [w1, w2]).execute(x)
        elsewhere = pe.WrapperExecutor.new_class_executor(inner, other, [w1]).execute(x)
        fewer = pe.WrapperExecutor.new_class_executor(inner, owner, [w2]).execute(x)
        return again + elsewhere + fewer

    assert pe.WrapperExecutor.new_class_executor(outer, owner, [w1, w2]).execute(1) == 6
    assert order == ["w1", "w2", "outer", "inner", "w1", "inner", "w2", "inner"]
    # after the call the same chain runs its wrappers again
    order.clear()
    assert pe.WrapperExecutor.new_class_executor(inner, owner, [w1, w2]).execute(1) == 2
    assert order == ["w1", "w2", "inner"]
