"""Krea 2 (comfy_core/families/krea2): the network against diffusers' `Krea2Transformer2DModel` on tiny
random weights mapped from ComfyUI's layout, detection and sampling policy, quantised and diffusers-layout
files, LoRA spellings, the reference-latent placements, and CLIPLoader type "krea2" against transformers'
Qwen3-VL hidden states."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.krea2.dit import Krea2Config, Krea2ConfigError, Krea2InputError, Krea2Transformer
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_krea2 import quantized_krea2, tiny_krea2_config, tiny_krea2_state_dict

UNET = "model.diffusion_model."
TXT = 64  # the tiny Qwen3-VL's width
CTX = 12 * TXT


def _network(seed: int = 0) -> Krea2Transformer:
    network = Krea2Transformer(tiny_krea2_config())
    network.load_state_dict(tiny_krea2_state_dict(seed))
    return network.eval()


def _patchify(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), c * 4)


def _diffusers(state: dict) -> torch.nn.Module:
    from diffusers import Krea2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    config = tiny_krea2_config()
    reference = Krea2Transformer2DModel(
        in_channels=config.channels * 4, num_layers=config.layers, attention_head_dim=config.head_dim,
        num_attention_heads=config.heads, num_key_value_heads=config.kvheads, intermediate_size=config.mlp_dim,
        timestep_embed_dim=config.tdim, text_hidden_dim=config.txtdim, num_text_layers=config.txtlayers,
        text_num_attention_heads=config.txtheads, text_num_key_value_heads=config.txtkvheads,
        text_intermediate_size=config.txt_mlp_dim, axes_dims_rope=(8, 12, 12), rope_theta=1000.0)
    converted = convert_krea2_transformer_checkpoint_to_diffusers({UNET + k: v.clone() for k, v in state.items()})
    missing, unexpected = reference.load_state_dict(converted, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    return reference.eval()


def test_dit_matches_diffusers():
    state = tiny_krea2_state_dict(seed=1)
    network, reference = _network(1), _diffusers(state)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 6, 8, generator=generator)
    context = torch.randn(2, 5, CTX, generator=generator)
    sigma = torch.tensor([0.7, 0.25])
    with torch.no_grad():
        out = network(x, sigma, context)
        rows, cols = 3, 4
        ids = torch.zeros(5 + rows * cols, 3)
        ids[5:, 1] = torch.arange(rows).repeat_interleave(cols).float()
        ids[5:, 2] = torch.arange(cols).repeat(rows).float()
        expected = reference(hidden_states=_patchify(x), encoder_hidden_states=context.reshape(2, 5, 12, TXT),
                             timestep=sigma, position_ids=ids, return_dict=False)[0]
    assert out.shape == x.shape
    assert torch.allclose(_patchify(out), expected, atol=1e-4, rtol=1e-4), (_patchify(out) - expected).abs().max()


def test_odd_sides_are_padded_and_cropped():
    network = _network()
    generator = torch.Generator().manual_seed(1)
    x, context = torch.randn(1, 16, 5, 7, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    with torch.no_grad():
        out = network(x, torch.tensor([0.5]), context)
        padded = network(torch.nn.functional.pad(x, (0, 1, 0, 1), mode="circular"), torch.tensor([0.5]), context)
    assert out.shape == x.shape
    assert torch.allclose(out, padded[:, :, :5, :7], atol=1e-5)


def test_reference_latents_need_a_method_and_sigma_zero_joins_the_two_placements():
    network = _network(2)
    generator = torch.Generator().manual_seed(2)
    x, context = torch.randn(1, 16, 4, 4, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    refs = [torch.randn(1, 16, 4, 6, generator=generator)]
    with torch.no_grad():
        plain = network(x, torch.tensor([0.6]), context)
        ignored = network(x, torch.tensor([0.6]), context, ref_latents=refs)  # ComfyUI: no method, no references
        index = network(x, torch.tensor([0.6]), context, ref_latents=refs, ref_latents_method="index")
        zero = network(x, torch.tensor([0.6]), context, ref_latents=refs, ref_latents_method="index_timestep_zero")
        index0 = network(x, torch.tensor([0.0]), context, ref_latents=refs, ref_latents_method="index")
        zero0 = network(x, torch.tensor([0.0]), context, ref_latents=refs, ref_latents_method="index_timestep_zero")
    assert torch.equal(plain, ignored)
    assert not torch.allclose(plain, index) and not torch.allclose(index, zero)
    assert torch.allclose(index0, zero0, atol=1e-6)  # at sigma 0 both modulations are the same


def test_reference_tokens_sit_at_their_index():
    """A reference through "index" is the same sequence as the image tokens followed by the reference's
    patches at (1, r, c): checked by running the blocks by hand."""
    network = _network(3)
    generator = torch.Generator().manual_seed(3)
    x, context = torch.randn(1, 16, 4, 4, generator=generator), torch.randn(1, 2, CTX, generator=generator)
    ref = torch.randn(1, 16, 2, 4, generator=generator)
    sigma = torch.tensor([0.4])
    with torch.no_grad():
        out = network(x, sigma, context, ref_latents=[ref], ref_latents_method="index")
        img = network.first(torch.cat([_patchify(x), _patchify(ref)], dim=1))
        ids = torch.zeros(1, 2 + 4 + 2, 3)
        ids[0, 2:6, 1], ids[0, 2:6, 2] = torch.tensor([0., 0, 1, 1]), torch.tensor([0., 1, 0, 1])
        ids[0, 6:, 0], ids[0, 6:, 2] = 1.0, torch.tensor([0., 1])
        t, vec = network._time(sigma, img.dtype)
        txt = network.txtmlp(network.txtfusion(context.reshape(1, 2, 12, TXT), {}))
        seq = torch.cat([txt, img], dim=1)
        pe = network.pe_embedder(ids)
        for block in network.blocks:
            seq = block(seq, vec, pe, {})
        expected = network.last(seq, t)[:, 2:6]
    assert torch.allclose(_patchify(out), expected, atol=1e-5)


def test_config_is_read_from_names_and_shapes():
    state = tiny_krea2_state_dict()
    assert Krea2Config.detect_from_weights(state) == tiny_krea2_config()
    assert Krea2Config.detect_from_weights({UNET + k: v for k, v in state.items()}, UNET) == tiny_krea2_config()
    assert tiny_krea2_config().comfy_unet_config()["txtlayers"] == 12
    del state["blocks.1.mod.lin"], state["blocks.1.prenorm.scale"]
    state = {k: v for k, v in state.items() if not k.startswith("blocks.1.")}
    state["blocks.2.mod.lin"] = torch.zeros(6 * 64)
    with pytest.raises(Krea2ConfigError, match="blocks"):
        Krea2Config.detect_from_weights(state)


def test_wrong_inputs_are_typed_errors():
    network = _network()
    with pytest.raises(Krea2InputError, match="CLIPLoader type 'krea2'"):
        network(torch.zeros(1, 16, 2, 2), torch.tensor([0.5]), torch.zeros(1, 3, 100))
    with pytest.raises(Krea2InputError, match="reference latents method"):
        network(torch.zeros(1, 16, 2, 2), torch.tensor([0.5]), torch.zeros(1, 3, CTX),
                ref_latents=[torch.zeros(1, 16, 2, 2)], ref_latents_method="sideways")


# --- the family ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("krea2") / "krea2_turbo_bf16.safetensors"
    return load_diffusion_model(save(tiny_krea2_state_dict(seed=2), path))


def test_unetloader_file_is_detected_with_comfyuis_policy(loaded):
    from comfy_core.models.model_sampling import FluxModelSampling

    registry = default_registry()
    header = {UNET + k: v for k, v in tiny_krea2_state_dict().items()}
    assert registry.detect(header).family.name == "krea2"
    assert registry.detect_diffusion_model(header).family.name == "krea2"
    model = loaded.model
    assert model.family.name == "krea2"
    sampling = model.model_sampling
    assert type(sampling) is FluxModelSampling and sampling.shift == pytest.approx(1.15)
    assert float(sampling.timestep(torch.tensor(0.25))) == pytest.approx(0.25)
    assert model.latent_format.channels == 16 and type(model.model_config).__name__ == "Krea2"
    assert model.model_config.unet_config["image_model"] == "krea2"
    family = registry.get("krea2")
    assert family.comfy_model_class == "Krea2" and family.text_encoders.clip_types == ("krea2",)
    ref = torch.ones(1, 16, 2, 2)
    conds = family.conditioning.extra_conds(model, reference_latents=[ref],
                                            reference_latents_method="index_timestep_zero")
    assert conds["ref_latents_method"] == "index_timestep_zero"
    assert torch.allclose(conds["ref_latents"][0], model.process_latent_in(ref))
    assert family.conditioning.extra_conds(model, cross_attn=torch.zeros(1, 3, CTX)) == {}


def test_quantized_files_stay_quantized_and_compute_like_their_dequantised_weights(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    state = tiny_krea2_state_dict(seed=4)
    shapes = {k: tuple(v.shape) for k, v in state.items() if k.endswith(".weight")}
    generator = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 16, 4, 4, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    for storage, dtype in (("fp8", torch.float8_e4m3fn), ("int8", torch.int8)):
        tensors, metadata = quantized_krea2(state, storage)
        path = tmp_path / storage / f"krea2_turbo_{storage}.safetensors"
        path.parent.mkdir()
        save_file(tensors, str(path), metadata=metadata or None)
        quantised = load_diffusion_model(path)
        plain = load_diffusion_model(save(true_state(tensors, metadata, shapes), tmp_path / storage / "f.safetensors"))
        network = quantised.model.diffusion_model
        assert network.blocks[0].attn.wq.weight.dtype == dtype
        with torch.no_grad():
            a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx) for m in (quantised, plain))
        assert (a - b).abs().max() < 1e-3 * b.abs().max(), storage


def test_diffusers_layout_file_loads_and_computes_alike(tmp_path):
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_krea2_state_dict(seed=5)
    comfy = load_diffusion_model(save(state, tmp_path / "a" / "krea2.safetensors"))
    converted = convert_krea2_transformer_checkpoint_to_diffusers({k: v.clone() for k, v in state.items()})
    diffusers = load_diffusion_model(save(converted, tmp_path / "b" / "transformer.safetensors"))
    assert diffusers.model.family.name == "krea2"
    generator = torch.Generator().manual_seed(3)
    x, ctx = torch.randn(1, 16, 4, 4, generator=generator), torch.randn(1, 3, CTX, generator=generator)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.3]), ctx) for m in (comfy, diffusers))
    assert torch.equal(a, b)


def test_lora_spellings_reach_the_layers(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    wq = "diffusion_model.blocks.1.attn.wq.weight"
    for name in ("diffusion_model.blocks.1.attn.wq", "lora_unet_blocks_1_attn_wq", "transformer.transformer_blocks.1.attn.to_q"):
        assert key_map[name] == wq
    assert key_map["transformer.transformer_blocks.0.ff.down"] == "diffusion_model.blocks.0.mlp.down.weight"
    assert key_map["transformer.text_fusion.refiner_blocks.0.attn.to_out.0"] == \
        "diffusion_model.txtfusion.refiner_blocks.0.attn.wo.weight"


# --- the Qwen3-VL 4B text encoder (CLIPLoader type "krea2") -------------------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    state = tiny_qwen3vl_state_dict(seed=7, layers=36)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_4b_fp8_scaled.safetensors",
                              dtype=torch.float32, state=state, layers=36)
    return state, load_text_encoders([path], "krea2")


def test_cliploader_krea2_taps_12_layers_after_the_template(encoder):
    from comfy_core.families.krea2.clip import KREA2_TAPS, KREA2_TEMPLATE, Krea2TEModel, Krea2Tokenizer
    from tests.fixtures.qwen3vl_files import reference_model

    state, clip = encoder
    assert isinstance(clip.cond_stage_model, Krea2TEModel) and isinstance(clip.tokenizer, Krea2Tokenizer)
    tokens = clip.tokenize("a red fox in the snow")
    (key,) = tokens
    ids = [t[0] for t in tokens[key][0]]
    text = clip.tokenizer.decode(ids, skip_special_tokens=False)
    assert text == KREA2_TEMPLATE.format("a red fox in the snow")  # no think block
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    with torch.no_grad():
        hidden = reference_model(state)(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    second = [i for i, t in enumerate(ids) if t == 151644][1]
    assert ids[second + 1:second + 3] == [872, 198]  # "user", "\n"
    start = second + 3  # the prompt's first token
    expected = torch.stack([hidden[k][0] for k in KREA2_TAPS], dim=1)[start:]  # [T', 12, W]
    assert out["pooled_output"] is None and "attention_mask" not in out
    assert out["cond"].shape == (1, len(ids) - start, 12 * 64)
    got = out["cond"][0].reshape(-1, 12, 64)
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), (got - expected).abs().max()


def test_images_enter_after_the_user_turn(encoder):
    from comfy_core.families.krea2.clip import template_end

    _state, clip = encoder
    image = torch.rand(1, 64, 64, 3)
    tokens = clip.tokenize("make it blue", images=[image])
    (row,) = tokens[next(iter(tokens))]
    entries = [i for i, pair in enumerate(row) if isinstance(pair[0], dict)]
    assert len(entries) == 1
    assert row[entries[0] - 1][0] == 151652 and row[entries[0] + 1][0] == 151653  # vision start / end
    assert template_end([p[0] for p in row], 10 ** 6) == entries[0] - 1  # the vision block is kept
    out = clip.encode_from_tokens(tokens, return_dict=True)
    vision = clip.cond_stage_model.encoder(clip.cond_stage_model.slots[0]).image_token_count(image)
    assert out["cond"].shape == (1, len(row) - 1 + vision - (entries[0] - 1), 12 * 64)
    assert torch.isfinite(out["cond"]).all()


def test_a_shallow_qwen3vl_is_refused(tmp_path):
    from comfy_core.split import load_text_encoders
    from comfy_core.text_encoders.errors import TokenizeError
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    clip = load_text_encoders([write_tiny_qwen3vl(tmp_path / "qwen3vl_4b.safetensors", dtype=torch.float32)], "krea2")
    with pytest.raises(TokenizeError, match="beyond this 3-block"):
        clip.encode_from_tokens(clip.tokenize("a fox"))


def test_textgenerate_on_the_krea2_clip_is_greedy_decoding_of_the_qwen3vl(encoder):
    """The templates' prompt enhancer: TextGenerate on the same CLIP, the prompt in Krea 2's template;
    greedy tokens equal transformers' argmax over `lm_head(last hidden state)` step by step."""
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip
    from tests.fixtures.qwen3vl_files import reference_model

    state, clip = encoder
    tokens = clip.tokenize("a fox", skip_template=False, min_length=1, thinking=True)
    ids = [t[0] for t in next(iter(tokens.values()))[0]]
    got = generate_with_clip(clip, tokens, 4, SamplingOptions(do_sample=False))
    reference, head = reference_model(state), state["lm_head.weight"].float()
    expected, row = [], list(ids)
    with torch.no_grad():
        for _ in range(4):
            hidden = reference(input_ids=torch.tensor([row])).last_hidden_state[0, -1]
            token = int((hidden @ head.T).argmax())
            expected.append(token)
            if token in (151643, 151645):
                break
            row.append(token)
    assert got == expected


def test_the_template_lora_reaches_every_block_linear(loaded, tmp_path):
    from safetensors.torch import load_file

    from comfy_core.lora import load_lora_for_models
    from tests.fixtures.template_models_krea2 import WRITERS_KREA2

    path = tmp_path / "krea2_style_reference.safetensors"
    WRITERS_KREA2["lora_krea2"](path)
    lora = load_file(str(path))
    _patched, _clip, report = load_lora_for_models(loaded, None, lora, 1.0, 0.0)
    assert report.unmatched == [] and report.skipped == [] and report.model_keys == len(lora) // 2 == 2 * 8
