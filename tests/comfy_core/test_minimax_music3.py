"""MiniMax Music 3 (comfy_core/families/minimax_music3): the DiT with its condition encoder, the DAV
and the AR stage (LM + RVQ depth decoder, the whole generation) against diffusers' / transformers'
modules on tiny random weights mapped from ComfyUI's layout; the prompt; detection, sampling policy
and conditions; the text-encoder and VAE files through their loaders (pruned, int8 ConvRot)."""
from __future__ import annotations

import types

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.minimax_music3.ar import (AUDIO_CFG, AUDIO_CODE_OFFSET, AUDIO_END, C0_VOCAB_SIZE,
                                                   MiniMaxMusic3GenerationError, MusicARConfig, build_from_state,
                                                   derive_seed)
from comfy_core.families.minimax_music3.dav import (DavConfig, MiniMaxMusic3DAV, MiniMaxMusic3DavInputError,
                                                    MiniMaxMusic3DavPatcher, is_minimax_music3_dav)
from comfy_core.families.minimax_music3.dit import (MiniMaxMusic3Config, MiniMaxMusic3InputError, MiniMaxMusic3Model,
                                                    latent_length)
from comfy_core.families.minimax_music3.prompt import build_prompt, clean_caption, normalize_lyrics
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_minimax_music3 import (CODEBOOKS, TEXT_WIDTH, dav_state, dit_config, dit_state,
                                                           text_config, text_state, tokenizer_json, write_dav,
                                                           write_text_encoder)

UNET = "model.diffusion_model."
TOL = 1e-4


# --- the DiT ----------------------------------------------------------------------------------------------------

SMALL_DIT = MiniMaxMusic3Config(latent_channels=8, hidden=128, depth=2, ff_inner=32, rotary_dim=32, fourier_dim=16,
                                condition_dim=16, context_layers=3, context_width=12)


def _diffusers_dit(state: dict, config: MiniMaxMusic3Config):
    """diffusers' condition encoder and transformer holding ComfyUI's tensors (its fused to_qkv split)."""
    from diffusers import MiniMaxMusic3ConditionEncoder, MiniMaxMusic3Transformer1DModel

    transformer = MiniMaxMusic3Transformer1DModel(
        in_channels=config.latent_channels, condition_dim=config.condition_dim, num_layers=config.depth,
        num_attention_heads=config.heads, attention_head_dim=config.head_dim, ff_inner_dim=config.ff_inner,
        rotary_dim=config.rotary_dim, fourier_embedding_dim=config.fourier_dim).eval()
    encoder = MiniMaxMusic3ConditionEncoder(condition_hidden_dim=config.context_width,
                                            num_condition_layers=config.context_layers,
                                            out_dim=config.condition_dim).eval()
    t = "diffusion_transformer."
    mapped = {"time_proj.weight": state[t + "timestep_features.weight"],
              "preprocess_conv.weight": state[t + "preprocess_conv.weight"],
              "postprocess_conv.weight": state[t + "postprocess_conv.weight"],
              "proj_in.weight": state[t + "transformer.project_in.weight"],
              "proj_out.weight": state[t + "transformer.project_out.weight"]}
    for ours, theirs in (("0", "linear_1"), ("2", "linear_2")):
        for part in ("weight", "bias"):
            mapped[f"time_embed.{theirs}.{part}"] = state[f"{t}to_timestep_embed.{ours}.{part}"]
    for i in range(config.depth):
        r, b = f"{t}transformer.layers.{i}.", f"transformer_blocks.{i}."
        q, k, v = state[r + "self_attn.to_qkv.weight"].chunk(3, 0)
        mapped.update({b + "norm1.weight": state[r + "pre_norm.gamma"], b + "norm1.bias": state[r + "pre_norm.beta"],
                       b + "norm2.weight": state[r + "ff_norm.gamma"], b + "norm2.bias": state[r + "ff_norm.beta"],
                       b + "attn.to_q.weight": q, b + "attn.to_k.weight": k, b + "attn.to_v.weight": v,
                       b + "attn.to_out.0.weight": state[r + "self_attn.to_out.weight"],
                       b + "ff_in.weight": state[r + "ff.ff.0.proj.weight"],
                       b + "ff_in.bias": state[r + "ff.ff.0.proj.bias"],
                       b + "ff_out.weight": state[r + "ff.ff.2.weight"], b + "ff_out.bias": state[r + "ff.ff.2.bias"]})
    transformer.load_state_dict(mapped, strict=True)
    encoder.load_state_dict({"layer_weight_logits": state["cond_layer_logits"],
                             "layer_scale": state["cond_layer_scale"],
                             "proj.weight": state["latent_conditioners.0.weight"],
                             "proj.bias": state["latent_conditioners.0.bias"]}, strict=True)
    return encoder, transformer


def _ours_dit(state: dict, config: MiniMaxMusic3Config) -> MiniMaxMusic3Model:
    model = MiniMaxMusic3Model(config).eval()
    model.load_state_dict(state, strict=True)
    return model


def test_dit_equals_diffusers_condition_encoder_and_transformer():
    state = dit_state(seed=1, config=SMALL_DIT)
    assert MiniMaxMusic3Config.detect_from_weights(state) == SMALL_DIT
    assert MiniMaxMusic3Config.detect_from_weights({UNET + k: v for k, v in state.items()}, UNET) == SMALL_DIT
    ours = _ours_dit(state, SMALL_DIT)
    encoder, transformer = _diffusers_dit(state, SMALL_DIT)
    g = torch.Generator().manual_seed(0)
    frames, length = 10, 21  # the condition (latent_length(10) = 34 frames) cut to the latent's 21
    context = torch.randn(2, frames, SMALL_DIT.context_features, generator=g)
    x = torch.randn(2, SMALL_DIT.latent_channels, length, generator=g)
    sigma = torch.tensor([0.8, 0.25])
    scale = torch.tensor([1.0, 0.0]).reshape(2, 1, 1)  # the positive and ConditioningZeroOut's negative
    with torch.no_grad():
        got = ours(x, sigma, context, scale)
        condition = encoder(context)[:, :length] * scale  # diffusers: zeros for the unconditional branch
        want = -transformer(x, 1.0 - sigma, condition, return_dict=False)[0]  # ComfyUI's velocity on 1 - sigma
    assert latent_length(frames) == 34
    assert (got - want).abs().max() < TOL


def test_dit_pads_a_short_condition_and_runs_long_latents_in_windows():
    state = dit_state(seed=2, config=SMALL_DIT)
    ours = _ours_dit(state, SMALL_DIT)
    encoder, transformer = _diffusers_dit(state, SMALL_DIT)
    g = torch.Generator().manual_seed(3)
    context = torch.randn(1, 4, SMALL_DIT.context_features, generator=g)  # 13 latent frames of condition
    x = torch.randn(1, SMALL_DIT.latent_channels, 700, generator=g)  # over the 689-frame window
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        got = ours(x, sigma, context)
        condition = torch.nn.functional.pad(encoder(context), (0, 0, 0, 700 - 13))
        first = -transformer(x[..., :689], 1.0 - sigma, condition[:, :689], return_dict=False)[0]
        second = -transformer(x[..., 344:], 1.0 - sigma, condition[:, 344:], return_dict=False)[0]
    assert (latent_length(200), latent_length(100)) == (689, 344)
    assert (got[..., :344] - first[..., :344]).abs().max() < TOL  # one window only
    assert (got[..., 689:] - second[..., 689 - 344:]).abs().max() < TOL
    overlap = (first[..., 344:] + second[..., :689 - 344]) / 2  # windows averaged where they overlap
    assert (got[..., 344:689] - overlap).abs().max() < TOL


def test_dit_refuses_a_wrong_latent_or_conditioning():
    ours = _ours_dit(dit_state(seed=0, config=SMALL_DIT), SMALL_DIT)
    with pytest.raises(MiniMaxMusic3InputError, match="latent"):
        ours(torch.zeros(1, 4, 5), torch.tensor([0.5]), torch.zeros(1, 2, SMALL_DIT.context_features))
    with pytest.raises(MiniMaxMusic3InputError, match="MiniMaxMusic3TextEncode"):
        ours(torch.zeros(1, 8, 5), torch.tensor([0.5]), torch.zeros(1, 2, 7))


# --- the DAV ----------------------------------------------------------------------------------------------------

def test_dav_equals_diffusers_vocoder():
    from diffusers import MiniMaxMusic3Vocoder

    config = DavConfig(latent_channels=8, input_dim=16, hidden=32, strides=(2, 4))
    state = dav_state(seed=1, config=config)
    assert DavConfig.detect_from_weights(state) == config and is_minimax_music3_dav(state)
    ours = MiniMaxMusic3DAV(config).eval()
    ours.load_state_dict(state, strict=True)
    vocoder = MiniMaxMusic3Vocoder(latent_channels=8, decoder_input_dim=16, decoder_hidden_dim=32,
                                   upsampling_ratios=(2, 4)).eval()
    mapped = {"dec_in_proj.weight": state["dec_in_proj.weight"], "dec_in_proj.bias": state["dec_in_proj.bias"],
              "snake_out.alpha": state["decoder.model.3.alpha"]}

    def weight_norm(theirs: str, ours_name: str) -> None:
        for part in ("weight_g", "weight_v", "bias"):
            mapped[f"{theirs}.{part}"] = state[f"{ours_name}.{part}"]

    weight_norm("conv_in", "decoder.model.0")
    weight_norm("conv_out", "decoder.model.4")
    for i in range(2):
        r = f"decoder.model.{i + 1}.block."
        mapped[f"blocks.{i}.snake1.alpha"] = state[r + "0.alpha"]
        weight_norm(f"blocks.{i}.conv_t1", r + "1")
        for u in range(3):
            unit, ru = f"blocks.{i}.res_unit{u + 1}.", f"{r}{u + 2}.block."
            mapped[unit + "snake1.alpha"], mapped[unit + "snake2.alpha"] = state[ru + "0.alpha"], state[ru + "2.alpha"]
            weight_norm(unit + "conv1", ru + "1")
            weight_norm(unit + "conv2", ru + "3")
    vocoder.load_state_dict(mapped, strict=True)
    z = torch.randn(2, 8, 7, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = ours.decode(z), vocoder(z)
    assert got.shape == (2, 2, 56) and (got - want).abs().max() < TOL


def test_vaeloader_state_dict_is_the_dav_patcher(tmp_path):
    from safetensors.torch import load_file

    from comfy_core.patching.vae import VaePatcher

    path = write_dav(tmp_path / "minimax_music3_dav.safetensors")
    vae = VaePatcher(sd=load_file(str(path)))
    assert isinstance(vae, MiniMaxMusic3DavPatcher)
    assert (vae.latent_channels, vae.latent_dim, vae.upscale_ratio, vae.audio_sample_rate) == (128, 1, 512, 44100)
    latent = torch.randn(1, 128, 6, generator=torch.Generator().manual_seed(1))
    audio = vae.decode(latent)
    assert audio.shape == (1, 6 * 512, 2) and audio.abs().max() <= 1.0
    tiled = vae.decode_tiled(latent, tile_x=4, overlap=1)
    assert tiled.shape == audio.shape
    with pytest.raises(MiniMaxMusic3DavInputError, match="decoder only"):
        vae.encode(torch.zeros(1, 1024, 2))


# --- the AR stage -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def full_ar():
    """The tiny AR stage in the full layout with transformers' Qwen3 and diffusers' depth decoder holding its tensors."""
    from diffusers import MiniMaxMusic3RVQDepthDecoder
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = text_config(pruned=False)
    state = text_state(seed=7, config=config)
    model = build_from_state(state)
    assert MusicARConfig.detect_from_weights(state) == config
    hf_config = Qwen3Config(vocab_size=config.vocab_size, hidden_size=config.hidden, intermediate_size=config.intermediate,
                            num_hidden_layers=config.layers, num_attention_heads=config.heads,
                            num_key_value_heads=config.kv_heads, head_dim=config.head_dim, rope_theta=1e6,
                            rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=4096)
    hf_config._attn_implementation = "eager"
    lm = Qwen3ForCausalLM(hf_config).eval()
    lm.load_state_dict({("lm_head.weight" if k == "model.lm_head.weight" else k): v for k, v in state.items()
                        if not k.startswith("model.audio")}, strict=True)
    depth = MiniMaxMusic3RVQDepthDecoder(hidden_size=config.hidden, num_layers=config.decoder_layers,
                                         num_attention_heads=config.decoder_heads,
                                         intermediate_size=config.decoder_intermediate,
                                         audio_vocab_size=config.audio_vocab, num_codebooks=config.codebooks).eval()
    renames = (("self_attn.q_proj", "attn.to_q"), ("self_attn.k_proj", "attn.to_k"), ("self_attn.v_proj", "attn.to_v"),
               ("self_attn.o_proj", "attn.to_out"), ("mlp.", ""))
    mapped = {"audio_embeddings.weight": state["model.audio_extra_embedding.weight"]}
    for name, value in state.items():
        if name.startswith("model.audio_decoder."):
            name = name[len("model.audio_decoder."):]
            for old, new in renames:
                name = name.replace(old, new)
            mapped[name] = value
    depth.load_state_dict(mapped, strict=True)
    return types.SimpleNamespace(model=model, state=state, lm=lm, depth=depth, config=config)


PROMPT = [151644, 151671, 40, 41, 42, 43, 151672, 151673, 44, 45, 151674, 151645, 151669]


def test_lm_and_depth_decoder_equal_transformers_and_diffusers(full_ar):
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        got = full_ar.model.lm_forward(full_ar.model.embed_prompt(ids, torch.float32), 0, None)
        want = full_ar.lm.model(input_ids=ids).last_hidden_state
        sequence = torch.randn(2, 5, TEXT_WIDTH, generator=torch.Generator().manual_seed(0))
        depth = full_ar.model.model.audio_decoder(sequence)
    assert (got - want).abs().max() < TOL
    assert (depth - full_ar.depth(sequence)).abs().max() < TOL
    # a cached step continues the prompt as one causal pass does
    cache = full_ar.model.new_cache(len(PROMPT))
    with torch.no_grad():
        embeds = full_ar.model.embed_prompt(ids, torch.float32)
        full_ar.model.lm_forward(embeds[:, :9], 0, cache)
        tail = full_ar.model.lm_forward(embeds[:, 9:], 9, cache)
    assert (tail - want[:, 9:]).abs().max() < TOL


def test_generation_equals_diffusers_autoregressive_step(full_ar):
    from diffusers.modular_pipelines.minimax_music3.encoders import MiniMaxMusic3AutoregressiveStep
    from diffusers.modular_pipelines.modular_pipeline import PipelineState

    seed, frames = 1234, 12
    got = full_ar.model.generate(PROMPT, seed, frames)
    prompt = torch.tensor([PROMPT])
    unconditional = prompt.clone()
    unconditional[:, 1:-2] = AUDIO_CFG
    state = PipelineState()
    state.set("text_ids", torch.cat((prompt, unconditional)))
    state.set("audio_duration", frames / 25)
    state.set("generator", torch.Generator().manual_seed(derive_seed(seed, "ar")))  # ComfyUI's seed for the AR stage
    components = types.SimpleNamespace(language_model=full_ar.lm, rvq_depth_decoder=full_ar.depth, frame_rate=25.0)
    with torch.no_grad():
        _, state = MiniMaxMusic3AutoregressiveStep()(components, state)
    want = state.get("frame_hiddens")[0]
    assert got.shape == want.shape == (frames, CODEBOOKS * TEXT_WIDTH)
    assert (got - want).abs().max() < TOL
    again = full_ar.model.generate(PROMPT, seed, frames)
    assert torch.equal(got, again)
    assert not torch.equal(got, full_ar.model.generate(PROMPT, seed + 1, frames))


def test_pruned_fused_layout_scores_and_states_as_the_full_one(full_ar):
    state = dict(full_ar.state)
    table, head = state.pop("model.embed_tokens.weight"), state.pop("model.lm_head.weight")
    state["model.embed_tokens_prefill.weight"] = table[:AUDIO_CODE_OFFSET]
    state["model.embed_tokens_audio.weight"] = table[AUDIO_CODE_OFFSET:AUDIO_CODE_OFFSET + C0_VOCAB_SIZE]
    state["model.lm_head_pruned.weight"] = torch.cat((head[AUDIO_END:AUDIO_END + 1],
                                                      head[AUDIO_CODE_OFFSET:AUDIO_CODE_OFFSET + C0_VOCAB_SIZE]))
    layers = [f"model.layers.{i}." for i in range(2)] + [f"model.audio_decoder.layers.{i}." for i in range(2)]
    for prefix in layers:
        state[prefix + "self_attn.qkv_proj.weight"] = torch.cat([state.pop(f"{prefix}self_attn.{p}_proj.weight")
                                                                 for p in "qkv"])
        state[prefix + "mlp.gate_up_proj.weight"] = torch.cat([state.pop(f"{prefix}mlp.{p}_proj.weight")
                                                               for p in ("gate", "up")])
    pruned = build_from_state(state)
    assert pruned.config == text_config(pruned=True)
    full = full_ar.model
    ids = torch.tensor([PROMPT])
    codes = torch.tensor([[3, 1, 2, 5], [3, 1, 2, 5]])
    with torch.no_grad():
        a = full.lm_forward(full.embed_prompt(ids, torch.float32), 0, None)[:, -1]
        b = pruned.lm_forward(pruned.embed_prompt(ids, torch.float32), 0, None)[:, -1]
        scores = full.model.lm_head(a)
        assert (a - b).abs().max() < TOL
        assert (pruned.model.lm_head_pruned(b)[:, 1:] - scores[:, AUDIO_CODE_OFFSET:AUDIO_CODE_OFFSET + 16384]
                ).abs().max() < TOL
        assert (pruned.model.lm_head_pruned(b)[:, 0] - scores[:, AUDIO_END]).abs().max() < TOL
        assert (pruned.embed_frame(codes, torch.float32) - full.embed_frame(codes, torch.float32)).abs().max() < TOL
        seq = torch.randn(2, 3, TEXT_WIDTH, generator=torch.Generator().manual_seed(1))
        assert (pruned.model.audio_decoder(seq) - full.model.audio_decoder(seq)).abs().max() < TOL
    frames = pruned.generate(PROMPT, 5, 6)
    assert frames.shape == (6, CODEBOOKS * TEXT_WIDTH) and torch.isfinite(frames).all()


def test_generation_refuses_what_comfyui_refuses(full_ar):
    with pytest.raises(MiniMaxMusic3GenerationError, match="maximum is 5000"):
        full_ar.model.generate([1] * 5001, 0, 3)
    assert derive_seed(0, "ar") != derive_seed(1, "ar") and 0 <= derive_seed(2 ** 64 - 1, "ar") < 2 ** 63


# --- the prompt --------------------------------------------------------------------------------------------------

def test_prompt_is_comfyuis():
    caption = ("# Global Metadata\n- **Lo-fi**, *dusty* <|tempo 78 BPM|> <|warm|>\n\n\n---\n\u2022 Rhodes    chords\n"
               "## Vocal Details   \n+ hushed")
    # four spaces in a row go (ComfyUI's indentation strip), even inside a line
    assert clean_caption(caption) == "Global Metadata\nLo-fi, dusty tempo is 78 BPM warm\nRhodeschords\nVocal Details\nhushed"
    lyrics = "[Intro]\nMmm...\n\n[Verse]  Line one ^ line two\n[CHORUS]"
    assert normalize_lyrics(lyrics) == "[start]\n[intro]\nMmm...\n[verse]\nLine one\nline two\n[chorus]"
    assert build_prompt("a", "[verse] b") == ("<|im_start|><|caption_start|>a<|caption_end|><|lyrics_start|>"
                                              "[start]\n[verse]\nb<|lyrics_end|><|im_end|><|audio_start|>")


# --- the family and the files ----------------------------------------------------------------------------------

def test_diffusion_model_file_is_detected_with_comfyuis_policy(tmp_path):
    from comfy_core.models.model_sampling import model_type_of
    from comfy_core.split.diffusion_model import load_diffusion_model

    registry = default_registry()
    header = {UNET + k: v for k, v in dit_state().items()}
    assert registry.detect(header).family.name == "minimax_music3"
    assert registry.detect_diffusion_model(header).family.name == "minimax_music3"
    loaded = load_diffusion_model(save(dit_state(seed=2), tmp_path / "minimax_music3_dit_fp16.safetensors"))
    model = loaded.model
    assert model.family.name == "minimax_music3" and model.diffusion_model.config == dit_config()
    sampling = model.model_sampling
    assert str(model_type_of(sampling)).endswith("FLOW")
    assert float(sampling.timestep(torch.tensor(0.25))) == pytest.approx(0.25)  # multiplier 1, no shift
    assert type(model.model_config).__name__ == "MiniMaxMusic3"
    assert model.model_config.unet_config["audio_model"] == "minimax_music3"
    assert (model.latent_format.channels, model.latent_format.temporal_downscale_ratio) == (128, 512)
    family = registry.get("minimax_music3")
    assert family.comfy_model_class == "MiniMaxMusic3"
    scale = torch.zeros(1, 1, 1)
    assert family.conditioning.extra_conds(model, conditioning_scale=scale)["conditioning_scale"] is scale
    context = torch.randn(1, 3, CODEBOOKS * TEXT_WIDTH)
    latent = torch.randn(1, 128, 10)
    with torch.no_grad():  # the model's denoised output through apply_model (sigma 1: the pure velocity)
        denoised = model.apply_model(latent, torch.tensor([1.0]), c_crossattn=context, conditioning_scale=scale)
        direct = model.diffusion_model(latent, torch.tensor([1.0]), context, scale)
    assert (denoised - (latent - direct)).abs().max() < TOL


def test_int8_convrot_dit_file_stays_quantized(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_minimax_music3 import write_dit

    quantised = load_diffusion_model(write_dit(tmp_path / "minimax_music3_dit_int8_convrot.safetensors", int8=True))
    plain = load_diffusion_model(write_dit(tmp_path / "minimax_music3_dit_fp16.safetensors"))
    network = quantised.model.diffusion_model
    assert network.diffusion_transformer.transformer.layers[0].self_attn.to_qkv.weight.dtype == torch.int8
    g = torch.Generator().manual_seed(4)
    x, context = torch.randn(1, 128, 9, generator=g), torch.randn(1, 2, CODEBOOKS * TEXT_WIDTH, generator=g)
    dtype = plain.model.diffusion_model.cond_layer_logits.dtype
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x.to(dtype), torch.tensor([0.5]), context.to(dtype)).float()
                for m in (quantised, plain))
    assert (a - b).abs().max() < 5e-2 * b.abs().max()


@pytest.mark.parametrize("int8", [False, True])
def test_cliploader_builds_the_ar_text_encoder_from_its_file(tmp_path, int8):
    from comfy_core.families.minimax_music3.clip import MiniMaxMusic3TEModel, MiniMaxMusic3Tokenizer
    from comfy_core.split.text_encoder_files import load_text_encoders

    path = write_text_encoder(tmp_path / f"minimax_music3_text_encoder_pruned{'_int8_convrot' if int8 else ''}"
                                         f".safetensors", int8=int8)
    clip = load_text_encoders([str(path)], "minimax")
    assert isinstance(clip.cond_stage_model, MiniMaxMusic3TEModel)
    assert isinstance(clip.tokenizer, MiniMaxMusic3Tokenizer)
    ar = clip.cond_stage_model.ar
    assert ar.config == text_config() and ar.model.layers[0].self_attn.qkv_proj.weight.dtype == torch.bfloat16
    tokens = clip.tokenize("Lo-fi", lyrics="[verse] hi", seed=3, max_audio_frames=4, cfg_scale=1.5, top_k=50)
    ids = [pair[0] for pair in tokens["minimax_music3"][0]]
    assert ids[:2] == [151644, 151671] and ids[-3:] == [151674, 151645, 151669]
    assert (tokens["seed"], tokens["max_audio_frames"], tokens["cfg_scale"], tokens["top_k"]) == (3, 4, 1.5, 50)
    conditioning = clip.encode_from_tokens_scheduled(tokens)
    (cond, options), = conditioning
    assert cond.shape == (1, 4, CODEBOOKS * TEXT_WIDTH) and options["pooled_output"] is None
    assert torch.equal(cond, clip.encode_from_tokens_scheduled(tokens)[0][0])  # the seed fixes the song
    if int8:  # the dequantised int8 weights are close to the float file's
        from safetensors.torch import load_file

        stored = load_file(str(path))
        assert stored["model.layers.0.self_attn.qkv_proj.weight"].dtype == torch.int8
        float_ar = build_from_state(text_state(seed=3), torch.bfloat16)
        w = float_ar.model.layers[0].self_attn.qkv_proj.weight.float()
        assert (ar.model.layers[0].self_attn.qkv_proj.weight.float() - w).abs().max() < 0.05 * w.abs().max()


def test_tokenizer_must_fit_the_checkpoint():
    import json

    from comfy_core.families.minimax_music3.clip import MiniMaxMusic3Tokenizer, MiniMaxMusic3TokenizerError

    data = json.loads(tokenizer_json())
    data["model"]["vocab"]["<|audio_start|>"] = 300
    data["added_tokens"] = [t if t["content"] != "<|audio_start|>" else {**t, "id": 300} for t in data["added_tokens"]]
    with pytest.raises(MiniMaxMusic3TokenizerError, match="audio_start"):
        MiniMaxMusic3Tokenizer(json.dumps(data).encode())
    with pytest.raises(MiniMaxMusic3TokenizerError, match="missing tokenizer_json"):
        MiniMaxMusic3Tokenizer(None)
    tokenizer = MiniMaxMusic3Tokenizer(tokenizer_json())
    assert bytes(tokenizer.state_dict()["tokenizer_json"].tolist()) == tokenizer_json()
