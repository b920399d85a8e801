"""Today's ComfyUI names and behaviours packs rely on (survey round 6, A4 A5 A9 A10):

- A4: `comfy.model_sampling` tables are `torch.nn.Module`s (buffers `sigmas` / `log_sigmas`), so a
  TCD-shaped `class X(ModelSamplingDiscreteDistilled, EPS)` registers its own buffer, moves with
  `.to()`, lists it in `state_dict()` and, installed by `add_object_patch("model_sampling", ...)`,
  drives KSampler with its own sigma table (ComfyUI-TCD's ModelSamplingDiscreteDistilledTCD).
- A5: `copy.deepcopy` of the VAE (and MODEL, CLIP) a loader node gives (seamless tiling's circular
  VAE: the copy's convolutions changed, the original's not).
- A9: `comfy.sampler_helpers.comfy`, `comfy.ldm.modules.diffusionmodules.openaimodel.th`,
  `comfy_extras.nodes_audio.load` / `f32_pcm`.
- A10: `comfy.text_encoders.ace15.ACE15Tokenizer` (ours is ComfyUI's) and `comfy.ldm.ace.ace_step15`
  (not provided: a typed ImportError, our network's structure differs).

Numbers are checked against independent computations; tiny random networks.
"""
from __future__ import annotations

import copy
import shutil
import wave

import numpy as np
import pytest
import torch

from tests.compat.api_pack_support import constant_cond

# -- shared fixtures -----------------------------------------------------------------------------


@pytest.fixture
def node_env(session, tiny_sd1_ckpt):
    """The session's environment as a running node sees it: a CPU memory manager and the tiny
    SD1 checkpoint in its checkpoints folder (what loader nodes read)."""
    from comfy_core.memory import MemoryManager
    from graph.context import NodeContext, reset_current, set_current

    env = session.env
    env.memory = MemoryManager(device="cpu")
    folder = env.folders.paths("checkpoints")[0]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, folder / "tiny_sd1.safetensors")
    token = set_current(NodeContext("p-six", "1", "1", None, env))
    try:
        yield env
    finally:
        reset_current(token)


@pytest.fixture
def loaded(node_env):
    import nodes

    return nodes.CheckpointLoaderSimple().load_checkpoint("tiny_sd1.safetensors")


def _table(betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent DDPM table: (alphas_cumprod [T], sigmas [T]) in float64 from betas."""
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
    return alphas_cumprod, ((1.0 - alphas_cumprod) / alphas_cumprod).sqrt()


def _sd1_betas() -> torch.Tensor:
    return torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2


# -- A4: model-sampling tables are nn.Modules ----------------------------------------------------


def test_every_table_class_is_an_nn_module_with_comfyuis_buffers(session):
    import comfy.model_base
    import comfy.model_sampling as cms
    import comfy_extras.nodes_model_advanced as nma
    from comfy_core.models import model_sampling as core

    expected = {  # ComfyUI's register_buffer calls (comfy/model_sampling.py)
        (cms.ModelSamplingDiscrete, cms.EPS): {"sigmas", "log_sigmas"},
        (cms.ModelSamplingDiscrete, cms.V_PREDICTION): {"sigmas", "log_sigmas"},
        (nma.ModelSamplingDiscreteDistilled, nma.LCM): {"sigmas", "log_sigmas"},
        (cms.ModelSamplingContinuousEDM, cms.EDM): {"sigmas", "log_sigmas"},
        (cms.ModelSamplingContinuousV, cms.V_PREDICTION): {"sigmas", "log_sigmas"},
        (cms.ModelSamplingDiscreteFlow, cms.CONST): {"sigmas"},
        (cms.ModelSamplingFlux, cms.CONST): {"sigmas"},
        (cms.StableCascadeSampling, cms.EPS): {"sigmas", "log_sigmas"},
    }
    for bases, buffers in expected.items():
        ms = type("PackSampling", bases, {})(None)
        assert isinstance(ms, torch.nn.Module), bases
        assert set(dict(ms.named_buffers())) == buffers, bases
        assert set(ms.state_dict()) == buffers and "sigmas" not in ms.__dict__, bases
        assert torch.equal(ms.state_dict()["sigmas"], ms.sigmas) and ms.sigma_max == ms.sigmas[-1], bases
    # comfy.model_base.model_sampling builds one too; the engine's own classes stay plain objects
    built = comfy.model_base.model_sampling(None, comfy.model_base.ModelType.EPS)
    assert isinstance(built, torch.nn.Module) and set(built.state_dict()) == {"sigmas", "log_sigmas"}
    assert not issubclass(core.ModelSampling, torch.nn.Module)
    assert not issubclass(core.FlowModelSampling, torch.nn.Module)


def test_tensor_assignment_and_set_sigmas_update_the_buffers(session):
    import comfy.model_sampling as cms

    class PackDiscrete(cms.ModelSamplingDiscrete, cms.EPS):
        pass

    ms = PackDiscrete(None)
    table = torch.linspace(0.1, 5.0, 20)
    ms.set_sigmas(table.double())  # a pack replacing the table (float32, as ComfyUI stores it)
    assert ms.state_dict()["sigmas"].dtype == torch.float32 and torch.equal(ms.state_dict()["sigmas"], table)
    assert torch.allclose(ms.state_dict()["log_sigmas"], table.log())
    ms.sigmas = torch.full((3,), 2.0)  # plain assignment replaces the buffer, as nn.Module does
    assert torch.equal(ms.state_dict()["sigmas"], torch.full((3,), 2.0)) and "sigmas" not in ms.__dict__
    ms.shift_note = "plain attribute"  # anything else stays a plain attribute
    assert ms.__dict__["shift_note"] == "plain attribute"
    twin = copy.copy(ms)  # a shallow copy given another table leaves the original's alone
    twin.set_sigmas(table)
    assert torch.equal(twin.sigmas, table) and torch.equal(ms.sigmas, torch.full((3,), 2.0))
    assert twin.shift_note == "plain attribute" and isinstance(twin, PackDiscrete)
    flow = type("PackFlow", (cms.ModelSamplingDiscreteFlow, cms.CONST), {})(None)
    flow.set_parameters(shift=3.0)
    t = torch.arange(1, 1001, dtype=torch.float32) / 1000
    assert torch.allclose(flow.state_dict()["sigmas"], 3.0 * t / (1 + 2.0 * t))  # SD3's shift, independently


class _Config:
    sampling_settings = {"beta_schedule": "linear", "linear_start": 0.00085, "linear_end": 0.012}


def _tcd_class():
    """A pack class in the shape of ComfyUI-TCD's ModelSamplingDiscreteDistilledTCD: the distilled
    table with EPS, plus its own `alphas_cumprod` buffer registered after `super().__init__`."""
    from comfy.ldm.modules.diffusionmodules.util import make_beta_schedule
    from comfy.model_sampling import EPS
    from comfy_extras.nodes_model_advanced import ModelSamplingDiscreteDistilled

    class TrajectoryConsistencySampling(ModelSamplingDiscreteDistilled, EPS):
        def __init__(self, model_config=None):
            super().__init__(model_config)
            settings = model_config.sampling_settings if model_config is not None else {}
            betas = make_beta_schedule(settings.get("beta_schedule", "linear"), n_timestep=1000,
                                       linear_start=settings.get("linear_start", 0.00085),
                                       linear_end=settings.get("linear_end", 0.012), cosine_s=8e-3)
            alphas_cumprod = torch.cumprod(1.0 - torch.as_tensor(betas), dim=0, dtype=torch.float32)
            self.register_buffer("alphas_cumprod", alphas_cumprod.clone().detach())

    return TrajectoryConsistencySampling


def test_a_tcd_shaped_subclass_registers_buffers_moves_and_saves(session):
    tcd = _tcd_class()(_Config())
    assert set(tcd.state_dict()) == {"sigmas", "log_sigmas", "alphas_cumprod"}
    alphas_cumprod, full = _table(_sd1_betas())
    torch.testing.assert_close(tcd.alphas_cumprod, alphas_cumprod.float())
    # the distilled table: 50 entries, every 20th timestep from the last (19, 39, ..., 999)
    torch.testing.assert_close(tcd.sigmas, full[19::20].float())
    assert tcd.timestep(tcd.sigmas[:1]).item() == 19 and tcd.timestep(tcd.sigmas[-1:]).item() == 999
    # what the TCD node computes from it
    import comfy.samplers

    sigmas = comfy.samplers.calculate_sigmas(tcd, "simple", 4)
    picks = [999, 759, 499, 259]  # ComfyUI's simple: entries 49, 37, 24, 12 of the 50
    torch.testing.assert_close(sigmas, torch.cat([full[picks].float(), torch.zeros(1)]))
    steps = torch.floor((1 - 0.3) * tcd.timestep(sigmas)).long()
    steps[-1] = 0
    torch.testing.assert_close(tcd.alphas_cumprod[steps], alphas_cumprod[steps].float())
    # nn.Module: .to() moves / casts every buffer, state_dict() round-trips into a fresh one
    assert tcd.to("cpu") is tcd
    wide = _tcd_class()(_Config()).to(torch.float64)
    assert {b.dtype for b in wide.buffers()} == {torch.float64}
    torch.testing.assert_close(wide.sigmas, full[19::20])
    other = _tcd_class()(None)
    other.alphas_cumprod.zero_()
    other.load_state_dict(tcd.state_dict())
    assert torch.equal(other.alphas_cumprod, tcd.alphas_cumprod)
    assert copy.deepcopy(tcd).state_dict().keys() == tcd.state_dict().keys()


def test_the_tcd_sampling_drives_ksampler_with_its_own_sigmas(session, loaded):
    import comfy.samplers
    import nodes
    from comfy_extras.nodes_custom_sampler import SamplerCustom

    model = loaded[0]
    engine_sampling = model.model.model_sampling
    tcd = _tcd_class()(model.model.model_config)
    patched = model.clone()
    patched.add_object_patch("model_sampling", tcd)
    assert patched.get_model_object("model_sampling") is tcd
    positive, negative = constant_cond(model, 0.3), constant_cond(model, -0.2)
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    ours = nodes.KSampler().sample(patched, 11, 3, 3.0, "euler", "simple", positive, negative, latent)[0]["samples"]
    base = nodes.KSampler().sample(model, 11, 3, 3.0, "euler", "simple", positive, negative, latent)[0]["samples"]
    # independently: the base model sampled over the schedule the TCD table implies (ComfyUI's
    # simple: entries 49, 33, 16 of the 50, timesteps 999, 679, 339; the base table's are 999, 666, 333)
    _, full = _table(_sd1_betas())
    schedule = torch.cat([full[[999, 679, 339]].float(), torch.zeros(1)])
    sampler = comfy.samplers.sampler_object("euler")
    reference = SamplerCustom().sample(model, True, 11, 3.0, positive, negative, sampler, schedule, latent)[0]["samples"]
    torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(ours, base, atol=1e-3)  # the base table's simple schedule is another one
    # the patch is gone again: the model holds the engine's plain sampling object, no child module
    assert model.model.model_sampling is engine_sampling
    assert "model_sampling" not in model.model._modules
    assert not isinstance(model.model.model_sampling, torch.nn.Module)


# -- A5: deepcopy of the loader's VAE / MODEL / CLIP ----------------------------------------------


def test_deepcopy_of_the_vae_gives_an_independent_vae_for_circular_padding(session, loaded):
    _, clip, vae = loaded
    latent = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    before = vae.decode(latent)  # used once: the memory manager knows it
    circular = copy.deepcopy(vae)
    assert type(circular) is type(vae) and circular.first_stage_model is not vae.first_stage_model
    assert circular.memory is vae.memory  # the process's memory manager is shared, not copied
    assert circular._state is not vae._state and circular.parent is None
    originals = dict(vae.first_stage_model.state_dict())
    for name, tensor in circular.first_stage_model.state_dict().items():
        assert torch.equal(tensor, originals[name]) and tensor.data_ptr() != originals[name].data_ptr()
    # seamless tiling's MakeCircularVAE: every Conv2d of the copy pads circularly
    convs = [m for m in circular.first_stage_model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs
    for layer in convs:
        layer.padding_mode = "circular"
    tiled = circular.decode(latent)
    assert tiled.shape == before.shape and not torch.allclose(tiled, before, atol=1e-4)
    assert torch.equal(vae.decode(latent), before)  # the original is untouched
    assert all(m.padding_mode == "zeros" for m in vae.first_stage_model.modules() if isinstance(m, torch.nn.Conv2d))
    # circular padding makes the decode periodic-aware: a latent rolled by one cell decodes to the
    # same image rolled by the VAE's factor, which zero padding does not give at the borders
    factor = vae.upscale_ratio if isinstance(vae.upscale_ratio, int) else 8
    rolled = circular.decode(torch.roll(latent, 1, dims=-1))
    torch.testing.assert_close(rolled, torch.roll(tiled, factor, dims=-2), rtol=1e-4, atol=1e-4)
    copy.deepcopy(clip)  # the CLIP a loader gives deep-copies too


def test_deepcopy_of_the_model_samples_as_the_original(session, loaded):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.sampling.noise import prepare_noise

    model = loaded[0]
    twin = copy.deepcopy(model)
    assert twin.model is not model.model and twin.memory is model.memory
    latent = torch.zeros(1, 4, 8, 8)
    positive, negative = constant_cond(model, 0.3), constant_cond(model, -0.2)

    def run(m):
        return sample(m, prepare_noise(latent, 5), 1, 3.0, "euler", "normal", positive, negative, latent, seed=5)

    torch.testing.assert_close(run(twin), run(model))
    with torch.no_grad():
        next(twin.model.diffusion_model.parameters()).add_(1.0)  # the copy's weights are its own
    assert not torch.allclose(run(twin), run(model))


# -- A9: module-level names packs reach through ---------------------------------------------------


def test_sampler_helpers_comfy_is_the_comfy_package(session, monkeypatch):
    import sys

    import comfy.sampler_helpers as sampler_helpers
    import compat.files_utils

    assert sampler_helpers.comfy is sys.modules["comfy"]
    original = sampler_helpers.comfy.utils.reshape_mask

    def one_d_aware(input_mask, output_shape):
        return ("pack", original(input_mask, output_shape))

    # RyanOnTheInside: `_sampler_helpers.comfy.utils.reshape_mask = _patched_reshape_mask`
    monkeypatch.setattr(sampler_helpers.comfy.utils, "reshape_mask", one_d_aware)
    import comfy.utils

    assert comfy.utils.reshape_mask is one_d_aware and compat.files_utils.reshape_mask is one_d_aware
    tag, mask = comfy.utils.reshape_mask(torch.ones(1, 4, 4), (1, 3, 8, 8))
    assert tag == "pack" and mask.shape == (1, 3, 8, 8)
    monkeypatch.undo()
    assert comfy.utils.reshape_mask is original


def test_openaimodel_th_is_torch(session):
    from comfy.ldm.modules.diffusionmodules.openaimodel import forward_timestep_embed, th, timestep_embedding

    assert th is torch and callable(forward_timestep_embed)
    emb = timestep_embedding(th.tensor([0.0, 10.0]), 8)
    half = th.exp(-np.log(10000) * th.arange(4, dtype=th.float32) / 4)  # independent: sin/cos of t * freq
    expected = th.cat([th.cos(th.tensor([[0.0], [10.0]]) * half), th.sin(th.tensor([[0.0], [10.0]]) * half)], dim=1)
    torch.testing.assert_close(emb, expected)


def _write_wav(path, samples: np.ndarray, rate: int) -> None:
    """`samples` int16 [S, C] as a PCM WAV (the standard library's writer, not our encoder)."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(samples.shape[1])
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(samples.astype("<i2").tobytes())


def test_nodes_audio_load_reads_float_pcm_as_comfyui(session, tmp_path):
    from comfy_extras.nodes_audio import NODE_CLASS_MAPPINGS, f32_pcm, load

    rng = np.random.default_rng(4)
    stereo = rng.integers(-32768, 32767, size=(1200, 2), dtype=np.int16)
    _write_wav(tmp_path / "stereo.wav", stereo, 22050)
    waveform, rate = load(str(tmp_path / "stereo.wav"))
    assert rate == 22050 and waveform.dtype == torch.float32 and waveform.shape == (2, 1200)
    torch.testing.assert_close(waveform, torch.from_numpy(stereo.T.astype(np.float32) / 32768.0))
    mono = rng.integers(-32768, 32767, size=(500, 1), dtype=np.int16)
    _write_wav(tmp_path / "mono.wav", mono, 16000)
    waveform, rate = load(str(tmp_path / "mono.wav"))
    assert rate == 16000 and waveform.shape == (1, 500)
    torch.testing.assert_close(waveform[0], torch.from_numpy(mono[:, 0].astype(np.float32) / 32768.0))
    (tmp_path / "not_audio.wav").write_bytes(b"plain text, no audio stream")
    with pytest.raises(ValueError):
        load(str(tmp_path / "not_audio.wav"))
    assert "LoadAudio" in NODE_CLASS_MAPPINGS  # the module's nodes are still there
    # ComfyUI's f32_pcm
    assert torch.equal(f32_pcm(torch.tensor([16384, -32768], dtype=torch.int16)), torch.tensor([0.5, -1.0]))
    assert torch.equal(f32_pcm(torch.tensor([2 ** 30], dtype=torch.int32)), torch.tensor([0.5]))
    floats = torch.tensor([0.25])
    assert f32_pcm(floats) is floats
    with pytest.raises(ValueError):
        f32_pcm(torch.tensor([1], dtype=torch.int8))


def test_nodes_audio_load_is_what_load_audio_gives(session, node_env):
    from comfy_extras.nodes_audio import load
    from nodes.audio import load_audio

    samples = np.random.default_rng(5).integers(-32768, 32767, size=(300, 2), dtype=np.int16)
    _write_wav(node_env.input_dir / "clip.wav", samples, 8000)
    (audio,) = load_audio("clip.wav")
    waveform, rate = load(str(node_env.input_dir / "clip.wav"))
    assert audio["sample_rate"] == rate and torch.equal(audio["waveform"], waveform.unsqueeze(0))


# -- A10: ACE-Step 1.5 module paths --------------------------------------------------------------


def test_ace_step15_network_module_raises_a_typed_import_error(session):
    import importlib

    from comfy_core.families.ace_step15.network import AceStep15Model
    from compat.ace_step15_api import AceStep15NetworkNotProvidedError

    forward = AceStep15Model.forward
    module = importlib.import_module("comfy.ldm.ace.ace_step15")  # the module itself imports
    with pytest.raises(AceStep15NetworkNotProvidedError) as caught:
        from comfy.ldm.ace.ace_step15 import AceStepConditionGenerationModel  # noqa: F401
    assert isinstance(caught.value, ImportError)
    assert "comfy_core.families.ace_step15.network.AceStep15Model" in str(caught.value)
    assert "prepare_condition" in str(caught.value)
    with pytest.raises(AceStep15NetworkNotProvidedError):
        module.AceStepConditionEncoder  # noqa: B018
    assert not hasattr(module, "_private")
    # an ImportError: the pack's guarded patch (RyanOnTheInside) skips, and our network is left alone
    assert AceStep15Model.forward is forward
    # why: our network has none of the structure a ComfyUI-shaped forward calls
    assert not hasattr(AceStep15Model, "prepare_condition")


@pytest.fixture(scope="module")
def ace_clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.ace_step_files import tiny_text_state_dict, write_safetensors

    folder = tmp_path_factory.mktemp("ace15_text")
    return load_text_encoders([write_safetensors(folder / "qwen_0.6b_ace15.safetensors", tiny_text_state_dict())],
                              "ace")


def test_ace15_tokenizer_is_the_one_the_text_encoders_use(session, ace_clip, monkeypatch):
    from comfy.text_encoders.ace15 import ACE15TEModel, ACE15Tokenizer
    from comfy_core.families.ace_step15 import clip as ours

    assert ACE15Tokenizer is ours.ACE15Tokenizer and ACE15TEModel is ours.ACE15TEModel
    assert isinstance(ace_clip.tokenizer, ACE15Tokenizer)
    plain = ace_clip.tokenize("soft piano", lyrics="la", bpm=90, duration=2, generate_audio_codes=False)
    assert set(plain) == {"lm_prompt", "lm_prompt_negative", "lyrics", "qwen3_06b", "lm_metadata"}

    original = ACE15Tokenizer.tokenize_with_weights

    def with_task(self, text, return_word_ids=False, **kwargs):  # the pack's wrapper, in its shape
        task = kwargs.get("task_type", "text2music")
        stock = {k: v for k, v in kwargs.items() if k != "task_type"}
        out = original(self, text, return_word_ids, **stock)
        out["qwen3_06b"] = self.qwen3_06b.tokenize_with_weights(f"# Instruction\n{task}\n{text}", return_word_ids,
                                                                disable_weights=True, **kwargs)
        out["task_type"] = task
        return out

    monkeypatch.setattr(ACE15Tokenizer, "tokenize_with_weights", with_task)
    tokens = ace_clip.tokenize("soft piano", lyrics="la", bpm=90, duration=2, generate_audio_codes=False,
                               task_type="repaint")
    assert tokens["task_type"] == "repaint"
    qwen = ace_clip.tokenizer.qwen3_06b
    ids = [p[0] for chunk in tokens["qwen3_06b"] for p in chunk]
    want = [p[0] for chunk in qwen.tokenize_with_weights("# Instruction\nrepaint\nsoft piano", disable_weights=True)
            for p in chunk]
    assert ids == want and tokens["lyrics"] == plain["lyrics"]
    cond = ace_clip.encode_from_tokens(tokens)  # the encoders take the wrapped tokenizer's output
    reference = ace_clip.encode_from_tokens({**plain, "qwen3_06b": tokens["qwen3_06b"]})
    assert torch.equal(cond, reference)
