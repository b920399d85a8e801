"""Fibo 2.0 (comfy_core/families/fibo2): the network against diffusers' `BriaFibo2Transformer2DModel` on
tiny random weights (diffusers' names, the layout the family reads), detection and sampling policy, the
int8 ConvRot file, the text conditioning of CLIPLoader type "fibo2" against the pipeline's own
`_get_qwen_prompt_embeds` on a tiny Qwen3-VL, and the prompt / size rules against the pipeline's."""
from __future__ import annotations

import json

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.fibo2.dit import Fibo2Config, Fibo2ConfigError, Fibo2InputError, Fibo2Transformer, gist_count
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_fibo2 import quantized_fibo2, tiny_fibo2_config, tiny_fibo2_state_dict

UNET = "model.diffusion_model."
CAP = 3 * 64  # a bundle: three layers of the tiny Qwen3-VL
CTX = 6 * CAP  # the six bundles


def _network(seed: int = 0) -> Fibo2Transformer:
    network = Fibo2Transformer(tiny_fibo2_config())
    network.load_state_dict(tiny_fibo2_state_dict(seed))
    return network.eval()


def _unpatch(x: torch.Tensor) -> torch.Tensor:
    """Flux.2's `[B, 128, h, w]` -> the VAE's `[B, 32, 2h, 2w]` diffusers' network takes."""
    b, c, h, w = x.shape
    return x.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c // 4, 2 * h, 2 * w)


def _diffusers(state: dict) -> torch.nn.Module:
    from diffusers import BriaFibo2Transformer2DModel

    config = tiny_fibo2_config()
    reference = BriaFibo2Transformer2DModel(
        in_channels=32, patch_size=2, dim=config.dim, n_layers=config.layers, n_refiner_layers=config.refiner_layers,
        n_heads=config.heads, cap_feat_dim=config.cap_dim, injection_layer_ids=config.injection_layers,
        perceiver_num_layers=config.perceiver_layers, min_num_gist_tokens=config.min_gist,
        max_num_gist_tokens=config.max_gist, gist_step=config.gist_step, axes_dims=(8, 12, 12),
        axes_lens=(64, 64, 64))
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return reference.eval()


@pytest.mark.parametrize("text_length", [5, 700])
def test_dit_matches_diffusers_with_and_without_images_to_edit(text_length):
    state = tiny_fibo2_state_dict(seed=1)
    network, reference = _network(1), _diffusers(state)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 128, 3, 4, generator=generator)
    context = torch.randn(2, text_length, CTX, generator=generator)
    refs = [torch.randn(1, 128, 2, 3, generator=generator), torch.randn(1, 128, 4, 2, generator=generator)]
    sigma = torch.tensor([0.7, 0.3])
    assert gist_count(text_length, 4, 8, 1) == (4 if text_length == 5 else 5)
    with torch.no_grad():
        for references in (None, refs):
            out = network(x, sigma, context, ref_latents=references)
            expected = reference(hidden_states=_unpatch(x), timestep=sigma,
                                 encoder_hidden_states=context.reshape(2, text_length, 6, CAP).transpose(1, 2),
                                 context_latents=None if references is None else
                                 [_unpatch(r).repeat(2, 1, 1, 1) for r in references], return_dict=False)[0]
            assert out.shape == x.shape
            assert torch.allclose(_unpatch(out), expected, atol=1e-4, rtol=1e-4), (_unpatch(out) - expected).abs().max()


def test_padded_text_is_the_text_without_its_padding():
    network = _network(2)
    generator = torch.Generator().manual_seed(1)
    x, context = torch.randn(2, 128, 2, 2, generator=generator), torch.randn(2, 6, CTX, generator=generator)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    sigma = torch.tensor([0.5, 0.5])
    with torch.no_grad():
        padded = network(x, sigma, context, attention_mask=mask)
        first = network(x[:1], sigma[:1], context[:1, :4])
        second = network(x[1:], sigma[1:], context[1:])
        unmasked = network(x, sigma, context, attention_mask=torch.ones(1, 6, dtype=torch.bool))
    assert torch.allclose(padded, torch.cat([first, second]), atol=1e-5)
    assert torch.allclose(unmasked[1:], second, atol=1e-5) and not torch.allclose(unmasked[:1], first)


def test_config_is_read_from_names_and_shapes():
    state = tiny_fibo2_state_dict()
    config = tiny_fibo2_config()
    assert Fibo2Config.detect_from_weights(state) == config
    assert Fibo2Config.detect_from_weights({UNET + k: v for k, v in state.items()}, UNET) == config
    assert (config.min_gist, config.gist_step, config.bundles, config.context_width) == (4, 1, 6, CTX)
    assert Fibo2Config().min_gist == 256 and Fibo2Config().gist_step == 64 and Fibo2Config().context_width == 46080
    del state["perceiver.latent_queries"]
    with pytest.raises(Fibo2ConfigError, match="latent_queries"):
        Fibo2Config.detect_from_weights(state)


def test_wrong_inputs_are_typed_errors():
    network = _network()
    with pytest.raises(Fibo2InputError, match="CLIPLoader type 'fibo2'"):
        network(torch.zeros(1, 128, 2, 2), torch.tensor([0.5]), torch.zeros(1, 3, 100))
    with pytest.raises(Fibo2InputError, match="Flux.2's latents"):
        network(torch.zeros(1, 16, 2, 2), torch.tensor([0.5]), torch.zeros(1, 3, CTX))


# --- the family ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    path = tmp_path_factory.mktemp("fibo2") / "fibo2_edit_turbo_bf16.safetensors"
    return load_diffusion_model(save(tiny_fibo2_state_dict(seed=2), path))


def test_unetloader_file_is_detected_with_the_policy(loaded):
    from comfy_core.models.model_sampling import FluxModelSampling

    registry = default_registry()
    header = {UNET + k: v for k, v in tiny_fibo2_state_dict().items()}
    assert registry.detect(header).family.name == "fibo2"
    assert registry.detect_diffusion_model(header).family.name == "fibo2"
    model = loaded.model
    sampling = model.model_sampling
    assert type(sampling) is FluxModelSampling and sampling.shift == pytest.approx(1.15)
    assert float(sampling.timestep(torch.tensor(0.25))) == pytest.approx(0.25)
    assert model.latent_format.channels == 128 and type(model.model_config).__name__ == "Fibo2"
    family = registry.get("fibo2")
    assert family.text_encoders.clip_types == ("fibo2",)
    ref = torch.ones(1, 128, 2, 2)
    conds = family.conditioning.extra_conds(model, reference_latents=[ref], cross_attn=torch.zeros(1, 7, CTX))
    assert torch.allclose(conds["ref_latents"][0], model.process_latent_in(ref))
    assert conds["attention_mask"].shape == (1, 7) and bool(conds["attention_mask"].all())


def test_int8_convrot_file_stays_quantized_and_computes_like_its_dequantised_weights(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    state = tiny_fibo2_state_dict(seed=4)
    shapes = {k: tuple(v.shape) for k, v in state.items() if k.endswith(".weight")}
    tensors, metadata = quantized_fibo2(state)
    path = tmp_path / "q" / "fibo2_dev_int8_convrot.safetensors"
    path.parent.mkdir()
    save_file(tensors, str(path), metadata=metadata or None)
    quantised = load_diffusion_model(path)
    plain = load_diffusion_model(save(true_state(tensors, metadata, shapes), tmp_path / "p" / "f.safetensors"))
    assert quantised.model.diffusion_model.layers[1].cross_attention.to_k.weight.dtype == torch.int8
    generator = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 128, 2, 3, generator=generator), torch.randn(1, 4, CTX, generator=generator)
    with torch.no_grad():
        a, b = (m.model.diffusion_model(x, torch.tensor([0.5]), ctx) for m in (quantised, plain))
    assert (a - b).abs().max() < 1e-3 * b.abs().max()


# --- the Qwen3-VL text encoder (CLIPLoader type "fibo2") ---------------------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from comfy_core.split import load_text_encoders
    from tests.fixtures.qwen3vl_files import tiny_qwen3vl_state_dict, write_tiny_qwen3vl

    state = tiny_qwen3vl_state_dict(seed=7, layers=36)
    path = write_tiny_qwen3vl(tmp_path_factory.mktemp("qwen3vl") / "qwen3vl_4b_bf16.safetensors",
                              dtype=torch.float32, state=state, layers=36)
    return state, load_text_encoders([path], "fibo2")


class _Processor:
    """The pipeline's processor for a text prompt, given our tokenizer's ids (checked apart)."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, text, images=None, **kwargs):
        from transformers import BatchEncoding

        assert images is None and len(text) == 1
        return BatchEncoding({"input_ids": torch.tensor([self.ids]), "attention_mask": torch.ones(1, len(self.ids))})


def test_cliploader_fibo2_matches_the_pipelines_text_embeddings(encoder):
    from diffusers.pipelines.bria_fibo2.pipeline_bria_fibo2 import BriaFibo2Pipeline

    from comfy_core.families.fibo2.clip import FIBO2_TEMPLATE, Fibo2TEModel, Fibo2Tokenizer
    from tests.fixtures.qwen3vl_files import reference_model

    state, clip = encoder
    assert isinstance(clip.cond_stage_model, Fibo2TEModel) and isinstance(clip.tokenizer, Fibo2Tokenizer)
    prompt = '{"short_description":"a red fox in the snow"}'
    tokens = clip.tokenize(prompt)
    ids = [t[0] for t in next(iter(tokens.values()))[0]]
    assert clip.tokenizer.decode(ids, skip_special_tokens=False) == FIBO2_TEMPLATE.format(prompt)
    out = clip.encode_from_tokens(tokens, return_pooled=True, return_dict=True)
    with torch.no_grad():
        expected, mask = BriaFibo2Pipeline._get_qwen_prompt_embeds(reference_model(state), _Processor(ids), prompt,
                                                                   device=torch.device("cpu"))
    assert expected.shape == (1, 6, len(ids), CAP) and bool(mask.all())
    assert out["pooled_output"] is None and "attention_mask" not in out
    got = out["cond"].reshape(1, len(ids), 6, CAP).transpose(1, 2)
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), (got - expected).abs().max()


def test_edit_markers_become_images_and_textgenerate_gets_the_image_template(encoder):
    from comfy_core.families.fibo2.prompt import edit_prompt

    _state, clip = encoder
    image = torch.rand(1, 64, 64, 3)
    tokens = clip.tokenize(edit_prompt("make it blue", 1), images=[image])
    (row,) = tokens[next(iter(tokens))]
    entries = [i for i, pair in enumerate(row) if isinstance(pair[0], dict)]
    assert len(entries) == 1 and row[entries[0] - 1][0] == 151652
    out = clip.encode_from_tokens(tokens, return_dict=True)
    vision = clip.cond_stage_model.encoder(clip.cond_stage_model.slots[0]).image_token_count(image)
    assert out["cond"].shape == (1, len(row) - 1 + vision, 6 * CAP) and torch.isfinite(out["cond"]).all()
    generate = clip.tokenize("describe", image=image, system_prompt="be brief", thinking=False)
    ids = [p[0] for p in next(iter(generate.values()))[0]]
    text = clip.tokenizer.decode([i if not isinstance(i, dict) else 151655 for i in ids], skip_special_tokens=False)
    assert text == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>"
                    "<|vision_end|>describe<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_textgenerate_reads_an_image_on_the_fibo2_clip(encoder):
    """The templates' prompt enhancer: TextGenerate with the reference image on a CLIPLoader type "fibo2"
    CLIP. Greedy tokens with the key/value cache equal the argmax of the tower's uncached forward (its
    M-RoPE positions and DeepStack) recomputed over the whole sequence at each step, the new tokens at
    the prompt's largest position plus one on every axis."""
    from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip
    from comfy_core.text_encoders.qwen3vl import Qwen3VLTextEncoder

    _state, clip = encoder
    tower = clip.cond_stage_model.encoder(clip.cond_stage_model.slots[0])
    assert isinstance(tower, Qwen3VLTextEncoder) and "image" in tower.generation_media
    image = torch.rand(1, 64, 96, 3, generator=torch.Generator().manual_seed(4))
    tokens = clip.tokenize("describe it", image=image, system_prompt="be brief", thinking=False)
    got = generate_with_clip(clip, tokens, 3, SamplingOptions(do_sample=False))
    row = [pair[0] for pair in next(iter(tokens.values()))[0]]
    with torch.no_grad():
        x, prompt = tower.prompt_inputs(row)
        positions, visual = prompt.positions, prompt.visual
        expected = []
        for _ in range(3):
            hidden = tower.encode_embeds(x, None, False, None, positions, prompt.deepstack, visual)
            token = int(tower.logits(hidden[:, -1]).argmax())
            expected.append(token)
            x = torch.cat([x, tower.embed_ids(torch.tensor([[token]]))], dim=1)
            positions = torch.cat([positions, (positions.max() + 1).expand(3, 1)], dim=1)
            visual = torch.cat([visual, torch.zeros(1, 1, dtype=torch.bool)], dim=1)
    assert got == expected


def test_a_shallow_qwen3vl_is_refused(tmp_path):
    from comfy_core.split import load_text_encoders
    from comfy_core.text_encoders.errors import TokenizeError
    from tests.fixtures.qwen3vl_files import write_tiny_qwen3vl

    clip = load_text_encoders([write_tiny_qwen3vl(tmp_path / "qwen3vl_8b.safetensors", dtype=torch.float32)], "fibo2")
    with pytest.raises(TokenizeError, match="beyond this 3-block"):
        clip.encode_from_tokens(clip.tokenize("a fox"))


# --- prompts and sizes ------------------------------------------------------------------------------------------

CAPTIONS = [
    "a fox in the snow",
    '{"short_description":"a fox","objects":[{"description":"fox","x":""}],"lighting":{},"aesthetic_score":7,'
    '"aesthetics":{"preference_score":3,"mood":"calm"},"context":"","style_medium":"photo \u00e9t\u00e9"}',
    '{"short_description":"","text_render":[]}',
    "[1, 2]",
    "{}",
]
EDITS = ["Turn the coat into black leather", '{"short_description":"a fox","edit_instruction":"make it red"}',
         '{"structured_caption":"a red fox","edit_instruction":"make it red"}',
         '{"structured_caption":{"short_description":"a red fox","lighting":{}},"edit_instruction":"red"}']


def test_prompts_are_prepared_as_the_pipeline_prepares_them():
    from diffusers.pipelines.bria_fibo2.pipeline_bria_fibo2 import DEFAULT_NEGATIVE_PROMPT, BriaFibo2Pipeline

    from comfy_core.families.fibo2.prompt import NULL_CAPTION, Fibo2PromptError, edit_prompt, generation_prompt

    for prompt in CAPTIONS:
        caption, _ = BriaFibo2Pipeline._parse_prompt(prompt)
        expected = prompt if isinstance(caption, str) else json.dumps(caption or {}, separators=(",", ":"),
                                                                      ensure_ascii=False)
        assert generation_prompt(prompt) == expected
    for prompt in EDITS:
        for count in (1, 3):
            assert edit_prompt(prompt, count) == BriaFibo2Pipeline._get_edit_prompt(prompt, count)
    assert NULL_CAPTION == DEFAULT_NEGATIVE_PROMPT
    with pytest.raises(Fibo2PromptError, match="edit_instruction"):
        edit_prompt('{"short_description":"a fox"}', 1)


def test_bucket_sizes_are_the_pipelines():
    from diffusers.pipelines.bria_fibo2.image_processor import BriaFibo2ImageProcessor

    from comfy_core.families.fibo2.prompt import bucket_size

    processor = BriaFibo2ImageProcessor(vae_scale_factor=16)
    for aspect in (1.0, 4 / 3, 3 / 4, 16 / 9, 0.5, 2.35, 0.3):
        assert bucket_size(aspect) == processor.get_image_size(aspect), aspect
