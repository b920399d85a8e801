"""Today's ComfyUI names from survey round 5 (A1, A8, A10):

- A1 `comfy.sd1_clip.ClipTokenWeightEncoder` as ComfyUI's base-less mix-in (SeaArtLab Long-CLIP's
  `class SDLongClipModel(torch.nn.Module, ClipTokenWeightEncoder)`), its prompt-weighting maths
  checked by hand over a tiny encoder whose `encode` returns known tensors;
- A8 (MinusZoneAI Kolors-MZ): `comfy.model_base.{sdxl_pooled, unclip_adm, Timestep,
  CLIPEmbeddingNoiseAugmentation}`, `comfy.ldm.modules.encoders.noise_aug_modules`,
  `openaimodel.Timestep`, `comfy.model_detection.model_config_from_diffusers_unet`,
  `comfy.clip_vision.convert_to_transformers`;
- A10 (nunchaku, names): `comfy.sd.t5xxl_detect`, `comfy.text_encoders.flux.flux_clip`,
  `comfy.text_encoders.long_clipl.model_options_long_clip`, `comfy.ldm.qwen_image.model.apply_rotary_emb`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

# -- A1: ClipTokenWeightEncoder ---------------------------------------------------------------

SPECIAL = {"start": 49406, "end": 49407, "pad": 49407}
DIM = 4


def _table() -> torch.Tensor:
    return torch.randn(50000, DIM, generator=torch.Generator().manual_seed(7))


def _tiny_encoder_class(extra=None):
    """A pack-style encoder: `encode` maps ids through a fixed table and adds the position (so
    the empty prompt's row differs per position); pooled = the row's sum. Records its input."""
    from comfy.sd1_clip import ClipTokenWeightEncoder

    class TinyClip(torch.nn.Module, ClipTokenWeightEncoder):
        def __init__(self):
            super().__init__()
            self.special_tokens = dict(SPECIAL)
            self.table = _table()
            self.seen = []

        def encode(self, tokens):
            self.seen.append([list(t) for t in tokens])
            rows = torch.stack([self.table[torch.tensor(t)] + 0.1 * torch.arange(len(t))[:, None] for t in tokens])
            pooled = rows.sum(1)  # [N, D]
            if extra is not None:
                return rows, pooled, extra(rows)
            return rows, pooled

    return TinyClip


def test_the_mixin_has_no_base_and_mixes_with_a_module_as_long_clip_does(session):
    import comfy.sd1_clip as sd1_clip

    mixin = sd1_clip.ClipTokenWeightEncoder
    assert mixin.__bases__ == (object,)
    # the engine's encoders keep their own class
    assert sd1_clip.SDClipModel is not mixin and not issubclass(sd1_clip.SDClipModel, mixin)

    class SDLongClipModel(torch.nn.Module, mixin):  # Long-CLIP's line 12 (an MRO error before)
        LAYERS = ["last", "pooled", "hidden"]

        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Parameter(torch.eye(2))

    model = SDLongClipModel()
    assert isinstance(model, mixin) and isinstance(model, torch.nn.Module)
    assert [n for n, _ in model.named_parameters()] == ["proj"]


def _by_hand(table, sections, special):
    """ComfyUI's weighting, computed with explicit loops over positions."""
    length = max(len(s) for s in sections)
    empty_ids = [special["start"], special["end"]] + [special["pad"]] * (length - 2)
    empty = [table[t] + 0.1 * j for j, t in enumerate(empty_ids)]
    out = []
    for section in sections:
        for j, (token, weight) in enumerate(section):
            z = table[token] + 0.1 * j
            if weight != 1.0:
                z = (z - empty[j]) * weight + empty[j]
            out.append(z)
    return torch.stack(out)[None]


def test_weights_move_each_token_from_the_empty_prompt_and_sections_concatenate(session):
    encoder = _tiny_encoder_class()()
    a = [(49406, 1.0), (320, 1.2), (1125, 0.5), (49407, 1.0), (49407, 1.0)]
    b = [(49406, 1.0), (2368, 1.0), (49407, 2.0), (49407, 1.0), (49407, 1.0)]
    cond, pooled = encoder.encode_token_weights([a, b])

    # one call: the two sections and the empty-prompt row of the longest length
    assert encoder.seen == [[[t for t, _ in a], [t for t, _ in b], [49406, 49407, 49407, 49407, 49407]]]
    assert cond.shape == (1, 10, DIM)
    torch.testing.assert_close(cond, _by_hand(encoder.table, [a, b], SPECIAL))
    # weight-1 positions are the encoder's own rows, untouched
    torch.testing.assert_close(cond[0, 1 - 1], encoder.table[49406])
    # pooled: the first section's, on the intermediate device
    torch.testing.assert_close(pooled, torch.stack([encoder.table[t] + 0.1 * j for j, (t, _) in enumerate(a)]).sum(0)[None])
    from comfy.model_management import intermediate_device
    assert cond.device == pooled.device == intermediate_device()


def test_without_weights_no_empty_row_is_encoded_and_no_section_gives_the_empty_prompt(session):
    cls = _tiny_encoder_class()
    encoder = cls()
    a = [(49406, 1.0), (320, 1.0), (49407, 1.0)]
    cond, _ = encoder.encode_token_weights([a])
    assert encoder.seen == [[[49406, 320, 49407]]]
    torch.testing.assert_close(cond[0], torch.stack([encoder.table[t] + 0.1 * j for j, (t, _) in enumerate(a)]))

    encoder = cls()
    cond, pooled = encoder.encode_token_weights([])
    assert encoder.seen == [[[49406, 49407]]]  # gen_empty_tokens(special, 0): start and end
    torch.testing.assert_close(cond[0], torch.stack([encoder.table[49406], encoder.table[49407] + 0.1]))
    assert pooled.shape == (1, DIM)


def test_a_packs_own_empty_token_generator_and_the_extra_dict(session):
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    cls = _tiny_encoder_class(extra=lambda rows: {"attention_mask": mask[:rows.shape[0]], "other": "kept"})

    class OwnEmpty(cls):
        def gen_empty_tokens(self, special_tokens, length):
            return [special_tokens["pad"]] * length

    encoder = OwnEmpty()
    a = [(1, 1.0), (2, 3.0), (3, 1.0)]
    b = [(4, 1.0), (5, 1.0), (6, 1.0)]
    cond, pooled, extra = encoder.encode_token_weights([a, b])
    assert encoder.seen[0][-1] == [49407, 49407, 49407]
    assert extra["other"] == "kept"
    assert torch.equal(extra["attention_mask"], torch.tensor([[1, 1, 0, 1, 0, 0]]))  # sections only, flattened
    empty_1 = encoder.table[49407] + 0.1
    expected = (encoder.table[2] + 0.1 - empty_1) * 3.0 + empty_1
    torch.testing.assert_close(cond[0, 1], expected)


def test_fewer_pairs_than_positions_is_an_index_error(session):
    cls = _tiny_encoder_class()

    class Longer(cls):
        def encode(self, tokens):
            rows, pooled = super().encode(tokens)
            return torch.cat([rows, rows], 1), pooled

    with pytest.raises(IndexError, match="positions"):
        Longer().encode_token_weights([[(1, 1.0), (2, 2.0)]])


# -- A8: Timestep, the noise augmentors, sdxl_pooled ----------------------------------------------

def _sinusoid(t: float, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = [math.exp(-math.log(10000) * i / half) for i in range(half)]
    return torch.tensor([math.cos(t * f) for f in freqs] + [math.sin(t * f) for f in freqs])


def test_timestep_is_one_class_under_comfyuis_three_names_and_embeds_sinusoidally(session):
    import comfy.ldm.modules.diffusionmodules.openaimodel as openaimodel
    import comfy.ldm.modules.encoders.noise_aug_modules as noise_aug_modules
    from comfy.model_base import CLIPEmbeddingNoiseAugmentation, ModelType, Timestep, sdxl_pooled  # Kolors-MZ's line

    assert Timestep is openaimodel.Timestep is noise_aug_modules.Timestep
    assert CLIPEmbeddingNoiseAugmentation is noise_aug_modules.CLIPEmbeddingNoiseAugmentation
    assert callable(sdxl_pooled) and ModelType.EPS
    embedder = Timestep(256)  # KolorsSDXL.encode_adm's `self.embedder(torch.Tensor([height]))`
    out = embedder(torch.Tensor([1024.0]))
    assert out.shape == (1, 256)
    torch.testing.assert_close(out[0], _sinusoid(1024.0, 256), atol=2e-4, rtol=0)


def _linear_schedule(start: float, end: float, steps: int) -> np.ndarray:
    betas = np.linspace(start ** 0.5, end ** 0.5, steps, dtype=np.float64) ** 2
    return np.cumprod(1.0 - betas)


def test_kolors_augmentor_noises_by_its_linear_schedule_and_seed(session):
    from comfy.model_base import CLIPEmbeddingNoiseAugmentation

    aug = CLIPEmbeddingNoiseAugmentation(**{"noise_schedule_config": {"timesteps": 1100, "beta_schedule": "linear",
                                                                      "linear_start": 0.00085, "linear_end": 0.014},
                                            "timestep_dim": 1280})
    ac = _linear_schedule(0.00085, 0.014, 1100)
    assert aug.num_timesteps == 1100 and aug.max_noise_level == 1000
    np.testing.assert_allclose(aug.sqrt_alphas_cumprod.numpy(), np.sqrt(ac), rtol=1e-6)
    np.testing.assert_allclose(aug.sqrt_one_minus_alphas_cumprod.numpy(), np.sqrt(1 - ac), rtol=1e-6)
    assert "betas" in aug.state_dict() and "data_mean" not in aug.state_dict()  # ComfyUI's buffer kinds

    x = torch.randn(1280, generator=torch.Generator().manual_seed(1))
    z, emb = aug(x, noise_level=torch.tensor([250]), seed=42)
    noise = torch.randn(1, 1280, generator=torch.Generator().manual_seed(42))
    expected = math.sqrt(ac[250]) * x[None] + math.sqrt(1 - ac[250]) * noise
    torch.testing.assert_close(z, expected.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(emb[0], _sinusoid(250.0, 1280), atol=2e-4, rtol=0)
    with pytest.raises(TypeError, match="noise_level"):
        aug(x, noise_level=250)


def test_clip_statistics_normalise_before_noising(session, tmp_path):
    from comfy.ldm.modules.encoders.noise_aug_modules import CLIPEmbeddingNoiseAugmentation

    mean, std = torch.full((8,), 2.0), torch.full((8,), 4.0)
    torch.save((mean, std), tmp_path / "stats.pt")
    aug = CLIPEmbeddingNoiseAugmentation(noise_schedule_config={"timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"},
                                         clip_stats_path=str(tmp_path / "stats.pt"), timestep_dim=8)
    x = torch.arange(8.0)[None]
    noise = torch.randn(1, 8)
    z = aug.unscale(aug.q_sample(aug.scale(x), torch.tensor([100]), noise=noise))
    a, b = aug.sqrt_alphas_cumprod[100], aug.sqrt_one_minus_alphas_cumprod[100]
    torch.testing.assert_close(z, (a * (x - 2.0) / 4.0 + b * noise) * 4.0 + 2.0)


def _unclip_entry(embeds, strength, noise_augmentation):
    class Output:
        image_embeds = embeds

    return {"clip_vision_output": Output(), "strength": strength, "noise_augmentation": noise_augmentation}


def _sdxl_augmentor():
    from comfy.model_base import CLIPEmbeddingNoiseAugmentation

    return CLIPEmbeddingNoiseAugmentation(noise_schedule_config={"timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"},
                                          timestep_dim=1280)


def test_sdxl_pooled_is_the_pooled_output_or_the_image_half_of_unclip_adm(session):
    from comfy.model_base import sdxl_pooled
    from comfy_core.models import unclip  # the engine's own unCLIP maths, written apart

    pooled = torch.randn(1, 1280)
    assert sdxl_pooled({"pooled_output": pooled, "device": "cpu"}, _sdxl_augmentor()) is pooled

    embeds = torch.randn(1, 1280, generator=torch.Generator().manual_seed(5))
    cond = [_unclip_entry(embeds, 0.7, 0.3)]
    out = sdxl_pooled({"unclip_conditioning": cond, "device": "cpu", "seed": 30, "pooled_output": pooled},
                      _sdxl_augmentor())
    assert out.shape == (1, 1280)
    ours = unclip.unclip_adm(cond, "cpu", seed=20)  # seed - 10, as ComfyUI
    torch.testing.assert_close(out, ours[:, :1280], atol=1e-5, rtol=1e-5)


def test_unclip_adm_merges_several_embeddings_continuing_the_seeded_stream(session):
    from comfy.model_base import unclip_adm

    aug = _sdxl_augmentor()
    embeds = torch.randn(2, 1280, generator=torch.Generator().manual_seed(9))
    cond = [_unclip_entry(embeds, 0.5, 0.1)]
    out = unclip_adm(cond, "cpu", aug, noise_augment_merge=0.2, seed=4)

    # by hand: each row re-seeded with 4; the merge draws next from that stream
    sa, sb = aug.sqrt_alphas_cumprod.double(), aug.sqrt_one_minus_alphas_cumprod.double()
    gen = torch.Generator().manual_seed(4)
    level = round(999 * 0.1)
    rows = []
    for e in embeds:
        gen.manual_seed(4)
        noise = torch.randn(1, 1280, generator=gen).double()
        z = sa[level] * e.double()[None] + sb[level] * noise
        rows.append(torch.cat([z, _sinusoid(level, 1280).double()[None]], 1) * 0.5)
    total = rows[0] + rows[1]
    merge_level = round(999 * 0.2)
    merge_noise = torch.randn(1, 1280, generator=gen).double()
    image = sa[merge_level] * total[:, :1280] + sb[merge_level] * merge_noise
    expected = torch.cat([image, _sinusoid(merge_level, 1280).double()[None]], 1)
    torch.testing.assert_close(out.double(), expected, atol=2e-4, rtol=1e-4)


def test_the_upscaling_module_holds_the_augmentors_base(session):
    from comfy.ldm.modules.diffusionmodules.upscaling import (AbstractLowScaleModel, ImageConcatWithNoiseAugmentation,
                                                              SimpleImageConcat)
    from comfy.model_base import CLIPEmbeddingNoiseAugmentation, ImageConcatWithNoiseAugmentation as from_base

    assert from_base is ImageConcatWithNoiseAugmentation
    assert issubclass(CLIPEmbeddingNoiseAugmentation, ImageConcatWithNoiseAugmentation)
    assert issubclass(ImageConcatWithNoiseAugmentation, AbstractLowScaleModel)
    x = torch.randn(3, 4)
    same, level = SimpleImageConcat()(x)
    assert same is x and torch.equal(level, torch.zeros(3, dtype=torch.long))
    aug = ImageConcatWithNoiseAugmentation({"timesteps": 10, "beta_schedule": "linear"}, max_noise_level=10)
    z, level = aug(x)  # a random level per item
    assert level.shape == (3,) and int(level.max()) < 10 and z.shape == x.shape


# -- A8: model_config_from_diffusers_unet, convert_to_transformers -------------------------------

_SDXL_UNET = {"use_checkpoint": False, "image_size": 32, "out_channels": 4, "use_spatial_transformer": True,
              "legacy": False, "num_classes": "sequential", "adm_in_channels": 2816, "dtype": None, "in_channels": 4,
              "model_channels": 320, "num_res_blocks": [2, 2, 2], "transformer_depth": [0, 0, 2, 2, 10, 10],
              "channel_mult": [1, 2, 4], "transformer_depth_middle": 10, "use_linear_in_transformer": True,
              "context_dim": 2048, "num_head_channels": 64,
              "transformer_depth_output": [0, 0, 0, 2, 2, 2, 10, 10, 10],
              "use_temporal_attention": False, "use_temporal_resblock": False}


def test_model_config_from_diffusers_unet_reads_the_replaced_detection_and_models(session, monkeypatch):
    import comfy.model_detection as model_detection
    import comfy.supported_models as supported_models
    from compat.mp_detection import DetectionError

    with pytest.raises(DetectionError):  # diffusers UNets are not detected here unless a pack says how
        model_detection.model_config_from_diffusers_unet({})

    seen = []
    monkeypatch.setattr(model_detection, "unet_config_from_diffusers_unet",
                        lambda sd, dtype=None: seen.append(sd) or dict(_SDXL_UNET))
    state = {"conv_in.weight": torch.empty(1)}
    config = model_detection.model_config_from_diffusers_unet(state)
    assert seen == [state] and isinstance(config, supported_models.SDXL)

    class Kolors(supported_models.SDXL):  # Kolors-MZ's apply_kolors: `supported_models.models = [Kolors]`
        unet_config = {**supported_models.SDXL.unet_config, "adm_in_channels": 5632}

    monkeypatch.setattr(supported_models, "models", [Kolors])
    assert model_detection.model_config_from_diffusers_unet(state) is None  # 2816 matches no Kolors
    monkeypatch.setattr(model_detection, "unet_config_from_diffusers_unet",
                        lambda sd, dtype=None: {**_SDXL_UNET, "adm_in_channels": 5632})
    assert type(model_detection.model_config_from_diffusers_unet(state)) is Kolors
    monkeypatch.setattr(model_detection, "unet_config_from_diffusers_unet", lambda sd, dtype=None: None)
    assert model_detection.model_config_from_diffusers_unet(state) is None


def _openai_visual(prefix: str, width: int = 4, out: int = 3) -> dict:
    gen = torch.Generator().manual_seed(2)
    r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    sd = {f"{prefix}class_embedding": r(width), f"{prefix}conv1.weight": r(width, 3, 2, 2),
          f"{prefix}positional_embedding": r(5, width), f"{prefix}ln_pre.weight": r(width),
          f"{prefix}ln_pre.bias": r(width), f"{prefix}ln_post.weight": r(width), f"{prefix}ln_post.bias": r(width),
          f"{prefix}proj": r(width, out)}
    block = f"{prefix}transformer.resblocks.0."
    sd.update({block + "attn.in_proj_weight": r(3 * width, width), block + "attn.in_proj_bias": r(3 * width),
               block + "attn.out_proj.weight": r(width, width), block + "ln_1.weight": r(width),
               block + "mlp.c_fc.weight": r(2 * width, width)})
    return sd


def test_convert_to_transformers_renames_an_openai_visual_tower(session):
    from comfy.clip_vision import convert_to_transformers

    source = _openai_visual("visual.")
    original = {k: v.clone() for k, v in source.items()}
    out = convert_to_transformers(source, "visual.")
    assert out is source  # in place, as ComfyUI
    assert torch.equal(out["vision_model.embeddings.class_embedding"], original["visual.class_embedding"])
    assert torch.equal(out["vision_model.embeddings.patch_embedding.weight"], original["visual.conv1.weight"])
    assert torch.equal(out["vision_model.embeddings.position_embedding.weight"], original["visual.positional_embedding"])
    assert torch.equal(out["vision_model.pre_layrnorm.bias"], original["visual.ln_pre.bias"])
    assert torch.equal(out["vision_model.post_layernorm.weight"], original["visual.ln_post.weight"])
    assert torch.equal(out["visual_projection.weight"], original["visual.proj"].T)
    fused = original["visual.transformer.resblocks.0.attn.in_proj_weight"]
    layer = "vision_model.encoder.layers.0."
    assert torch.equal(out[layer + "self_attn.q_proj.weight"], fused[:4])
    assert torch.equal(out[layer + "self_attn.v_proj.weight"], fused[8:])
    assert torch.equal(out[layer + "self_attn.k_proj.bias"],
                       original["visual.transformer.resblocks.0.attn.in_proj_bias"][4:8])
    assert torch.equal(out[layer + "layer_norm1.weight"], original["visual.transformer.resblocks.0.ln_1.weight"])
    assert torch.equal(out[layer + "mlp.fc1.weight"], original["visual.transformer.resblocks.0.mlp.c_fc.weight"])
    assert not [k for k in out if k.startswith("visual.")]


def test_convert_to_transformers_strips_the_prefix_of_other_layouts(session):
    from comfy.clip_vision import convert_to_transformers

    t = torch.ones(2)
    out = convert_to_transformers({"clip.vision_model.post_layernorm.weight": t, "other": t}, "clip.")
    assert set(out) == {"vision_model.post_layernorm.weight", "other"}


# -- A10: nunchaku's names ----------------------------------------------------------------------------

_WI_1 = "encoder.block.23.layer.1.DenseReluDense.wi_1.weight"


def test_t5xxl_detect_probes_the_first_t5_xxl_state_dict(session):
    import comfy.sd

    clip_l = {"text_model.encoder.layers.1.mlp.fc1.weight": torch.empty(1)}
    t5 = {_WI_1: torch.empty(1, dtype=torch.float16), "encoder.final_layer_norm.weight": torch.empty(1, dtype=torch.bfloat16)}
    assert comfy.sd.t5xxl_detect([clip_l, t5]) == {"dtype_t5": torch.bfloat16}
    old = {"encoder.block.23.layer.1.DenseReluDense.wi.weight": torch.empty(1),
           "encoder.final_layer_norm.weight": torch.empty(1, dtype=torch.float16)}
    assert comfy.sd.t5xxl_detect([old, t5]) == {"dtype_t5": torch.float16}
    small_t5 = {"encoder.block.11.layer.1.DenseReluDense.wi_1.weight": torch.empty(1),
                "encoder.final_layer_norm.weight": torch.empty(1)}
    assert comfy.sd.t5xxl_detect([clip_l, small_t5]) == {}


def test_flux_clip_is_a_flux_clip_model_class_that_refuses_to_be_built(session):
    import comfy.sd
    import comfy.text_encoders.flux
    from compat.files_clip import UnsupportedTextEncoderError

    t5 = {_WI_1: torch.empty(1), "encoder.final_layer_norm.weight": torch.empty(1, dtype=torch.float16)}
    cls = comfy.text_encoders.flux.flux_clip(**comfy.sd.t5xxl_detect([t5]))  # nunchaku's call
    assert issubclass(cls, comfy.text_encoders.flux.FluxClipModel)
    assert cls.detected["dtype_t5"] == torch.float16
    assert comfy.text_encoders.flux.flux_clip(t5_quantization_metadata={"mixed_ops": True}).detected[
        "t5_quantization_metadata"] == {"mixed_ops": True}
    with pytest.raises(UnsupportedTextEncoderError, match="load_clip"):
        cls(device="cpu", dtype=None, model_options={})
    assert issubclass(UnsupportedTextEncoderError, NotImplementedError)


def test_model_options_long_clip_sizes_the_tower_it_finds(session):
    import comfy.text_encoders

    long_clipl = comfy.text_encoders.long_clipl  # nunchaku reads it as an attribute of the package
    import comfy.text_encoders.long_clipl as module
    assert long_clipl is module

    tokenizer_data, model_options = {"keep": 1}, {"dtype": "x"}
    sd = {"text_model.embeddings.position_embedding.weight": torch.empty(248, 2),
          "text_model.encoder.layers.1.mlp.fc1.weight": torch.empty(1)}
    td, mo = module.model_options_long_clip(sd, tokenizer_data, model_options)
    assert td == {"keep": 1, "clip_l_max_length": 248}
    assert mo == {"dtype": "x", "clip_l_model_config": {"max_position_embeddings": 248}}
    assert tokenizer_data == {"keep": 1} and model_options == {"dtype": "x"}  # copies

    big_g = {"text_model.embeddings.position_embedding.weight": torch.empty(77, 2),
             "text_model.encoder.layers.30.mlp.fc1.weight": torch.empty(1),
             "text_model.encoder.layers.1.mlp.fc1.weight": torch.empty(1)}
    td, mo = module.model_options_long_clip(big_g, {}, {})
    assert td == {"clip_g_max_length": 77} and mo["clip_g_model_config"]["max_position_embeddings"] == 77

    # prefixed towers are both named clip_l, as ComfyUI's branches name them
    for prefix in ("clip_l.", "clip_g."):
        td, _ = module.model_options_long_clip({f"{prefix}text_model.embeddings.position_embedding.weight":
                                                torch.empty(248, 2)}, {}, {})
        assert td == {"clip_l_max_length": 248}

    t5 = {"encoder.final_layer_norm.weight": torch.empty(1)}
    assert module.model_options_long_clip(t5, tokenizer_data, model_options) == (tokenizer_data, model_options)
    with pytest.raises(ValueError, match="cannot be"):
        module.model_options_long_clip({"text_model.embeddings.position_embedding.weight": torch.empty(3, 2)}, {}, {})


def test_qwen_apply_rotary_emb_is_a_complex_rotation(session):
    from comfy.ldm.qwen_image.model import apply_rotary_emb

    gen = torch.Generator().manual_seed(0)
    b, seq, heads, dim = 2, 5, 3, 8
    x = torch.randn(b, seq, heads, dim, generator=gen)
    theta = torch.randn(1, seq, 1, dim // 2, generator=gen)
    cos, sin = theta.cos(), theta.sin()
    freqs = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # [1, S, 1, D/2, 2, 2]
    out = apply_rotary_emb(x, freqs)
    pairs = torch.view_as_complex(x.reshape(b, seq, heads, dim // 2, 2).contiguous())
    expected = torch.view_as_real(pairs * torch.polar(torch.ones_like(theta), theta)).reshape(b, seq, heads, dim)
    torch.testing.assert_close(out, expected)
    assert out.dtype == x.dtype

    empty = torch.randn(2, 0, 3, 8)
    assert apply_rotary_emb(empty, freqs) is empty
