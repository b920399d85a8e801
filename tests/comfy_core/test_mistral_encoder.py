"""FLUX.2 dev's Mistral Small 3 text encoder: detection (told apart from Llama 3.1 files), the tower
against transformers' MistralModel on tiny random weights (ComfyUI's layers 10 / 20 / 30 = the inputs
of those blocks), CLIPLoader type "flux2" on a tiny Mistral file (the file's own tekken tokenizer,
ComfyUI's template, the stacked conditioning) and a whole UNETLoader + CLIPLoader + VAELoader +
KSampler + VAEDecode run through the executor."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families.flux2.clip import MISTRAL_TEMPLATE, Flux2TEModel, Flux2Tokenizer
from comfy_core.split.text_encoder_files import load_text_encoders, text_encoder_config
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.llama import LlamaConfig
from comfy_core.text_encoders.mistral import MistralConfig, MistralTextEncoder, build_mistral_encoder
from comfy_core.text_encoders.tekken_tokenizer import MissingTekkenError
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.mistral_files import reference_model, tiny_mistral_state_dict, write_mistral_file

PROMPT = "a red fox in the snow"


@pytest.fixture(scope="module")
def state():
    return tiny_mistral_state_dict(seed=4)


@pytest.fixture(scope="module")
def path(tmp_path_factory, state):
    return write_mistral_file(tmp_path_factory.mktemp("mistral") / "mistral_3_small_flux2_tiny.safetensors", state,
                              dtype=torch.float32)


@pytest.fixture(scope="module")
def clip(path):
    return load_text_encoders([path], "flux2")


def _header(shapes: dict) -> dict:
    return {k: SimpleNamespace(shape=v, dtype="BF16") for k, v in shapes.items()}


def test_mistral_files_are_told_apart_from_llama_files(path, tmp_path):
    from tests.fixtures.llama_files import write_llama_file

    with CheckpointFile(path) as checkpoint:
        config = text_encoder_config(checkpoint)
    assert isinstance(config, MistralConfig) and config.slot == "mistral3_24b"
    assert (config.width, config.num_layers, config.num_heads, config.num_kv_heads) == (32, 31, 2, 1)
    assert config.rope_theta == 1e9 and not config.final_norm
    with CheckpointFile(write_llama_file(tmp_path / "llama.safetensors")) as checkpoint:
        llama = text_encoder_config(checkpoint)
    assert type(llama) is LlamaConfig
    # ComfyUI's test: 5120 wide (no tekken tensor, a Llama-sized table) is Mistral too.
    wide = {"model.embed_tokens.weight": (128_256, 5120), "model.norm.weight": (5120,)}
    for name, shape in MistralConfig("", 5120, 64, 1, 40, 8, 128_256).block_shapes(0).items():
        wide["model." + name] = shape
    assert MistralConfig.detect_from_weights(_header(wide)) is not None
    assert LlamaConfig.detect_from_weights(_header(wide)) is not None  # so the loader asks Mistral first
    assert MistralConfig.detect_from_weights(_header({**wide, "model.embed_tokens.weight": (128_256, 4096)})) is None


def test_stacked_layers_match_transformers_mistral(state):
    config = MistralConfig.detect_from_weights(state)
    tower = build_mistral_encoder(config, state)
    assert isinstance(tower, MistralTextEncoder) and tower.special_tokens == {"start": 1, "pad": 0}
    ids = torch.tensor([[1, 1003, 17, 5000, 131_071, 1200, 3, 77_000, 4], [11, 11, 1, 2000, 3000, 4000, 5, 6, 7]])
    mask = torch.tensor([[1] * 9, [0, 0] + [1] * 7])
    reference = reference_model(state)
    with torch.no_grad():
        hidden = reference(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        ours = tower.intermediate_states(ids, mask, (10, 20, 30, 31))
        last = {}
        handle = reference.layers[-1].register_forward_hook(lambda m, i, o: last.setdefault("x", o))
        reference(input_ids=ids, attention_mask=mask)
        handle.remove()
    for got, want in zip(ours[:3], (hidden[10], hidden[20], hidden[30])):
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)
    # layer 31 of a 31-block (pruned) model: the last block's output without the final norm (ComfyUI)
    out = last["x"][0] if isinstance(last["x"], tuple) else last["x"]
    torch.testing.assert_close(ours[3][mask.bool()], out[mask.bool()], atol=2e-5, rtol=1e-5)  # 31 blocks deep
    with pytest.raises(TokenizeError, match="outside"):
        tower.intermediate_states(ids, mask, (32,))


def test_cliploader_flux2_tokenizes_with_the_files_tekken_and_comfyuis_template(clip):
    assert isinstance(clip.cond_stage_model, Flux2TEModel) and isinstance(clip.tokenizer, Flux2Tokenizer)
    (chunk,) = clip.tokenize(PROMPT)["mistral3_24b"]
    ids = [t for t, _ in chunk]
    backend = clip.tokenizer.mistral3_24b.backend
    assert ids == [1] + backend.encode(MISTRAL_TEMPLATE.format(PROMPT), add_special_tokens=False).ids
    assert ids[1] == 17 and ids[-1] == 4 and 18 in ids and 3 in ids  # [SYSTEM_PROMPT] ... [INST] ... [/INST]
    custom = [t for t, _ in clip.tokenizer.tokenize_with_weights(PROMPT, llama_template="[INST]{}[/INST]")
              ["mistral3_24b"][0]]
    assert custom[:2] == [1, 3] and custom[-1] == 4


def test_clip_text_encode_stacks_comfyuis_layers(clip, state, tmp_path):
    from graph.context import NodeContext, reset_current, set_current
    from nodes.conditioning import clip_text_encode
    from nodes.environment import Environment

    ids = [t for t, _ in clip.tokenize(PROMPT)["mistral3_24b"][0]]
    token = set_current(NodeContext("p", "1", "1", None, Environment.rooted_at(tmp_path, mmap=False)))
    try:
        ((cond, extra),) = clip_text_encode(PROMPT, clip)[0]
    finally:
        reset_current(token)
    assert cond.shape == (1, len(ids), 96) and extra["pooled_output"] is None
    assert extra["attention_mask"].shape == (1, len(ids)) and extra["attention_mask"].all()
    with torch.no_grad():
        hidden = reference_model(state)(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    # 30 float32 blocks deep: the last layer's states move by ~1e-5 with the CPU's matmul kernels
    # (1.1e-5 on an Intel Xeon, under 1e-5 on AMD EPYC), so 5e-5 absolute.
    torch.testing.assert_close(cond, torch.cat([hidden[10], hidden[20], hidden[30]], dim=-1), atol=5e-5, rtol=1e-5)


def test_a_mistral_file_without_tekken_is_refused(state, tmp_path):
    bare = write_mistral_file(tmp_path / "bare.safetensors", state, with_tekken=False)
    with pytest.raises(MissingTekkenError, match="tekken_model"):
        load_text_encoders([bare], "flux2")


def test_unet_clip_vae_loaders_and_ksampler_run_flux2_dev(tmp_path, state):
    """The loader nodes' functions (CLIPLoader's combo does not list "flux2" yet: see nodes/loaders.py),
    then CLIPTextEncode, a 2-step KSampler and VAEDecode, as a Flux.2 dev workflow wires them."""
    from graph.context import NodeContext, reset_current, set_current
    from nodes.conditioning import clip_text_encode
    from nodes.environment import Environment
    from nodes.latent import vae_decode
    from nodes.loaders import clip_loader, unet_loader, vae_loader
    from nodes.sampling import ksampler
    from tests.fixtures.dit_checkpoints import save
    from tests.fixtures.flux2_files import tiny_flux2_state_dict, write_flux2_vae

    models = tmp_path / "models"
    unet = tiny_flux2_state_dict(0, guidance=True, context=96)  # context: 3 x the tiny Mistral's 32
    save(unet, models / "diffusion_models" / "flux2_dev_tiny.safetensors")
    write_mistral_file(models / "text_encoders" / "mistral_tiny.safetensors", state)
    write_flux2_vae(models)
    token = set_current(NodeContext("p", "1", "1", None, Environment.rooted_at(tmp_path, mmap=False)))
    try:
        (model,) = unet_loader("flux2_dev_tiny.safetensors", "default")
        (clip,) = clip_loader("mistral_tiny.safetensors", "flux2")
        (vae,) = vae_loader("flux2_vae_tiny.safetensors")
        assert model.model.family.name == "flux2" and isinstance(clip.cond_stage_model, Flux2TEModel)
        (positive,) = clip_text_encode(PROMPT, clip)
        (negative,) = clip_text_encode("", clip)
        latent = {"samples": torch.zeros(1, 128, 3, 4)}
        (samples,) = ksampler(model, 3, 2, 2.0, "euler", "simple", positive, negative, latent, 1.0)
        (images,) = vae_decode(samples, vae)
    finally:
        reset_current(token)
    assert samples["samples"].shape == (1, 128, 3, 4) and torch.isfinite(samples["samples"]).all()
    assert images.shape == (1, 12, 16, 3) and torch.isfinite(images).all()  # the tiny 2-level VAE: 4x
