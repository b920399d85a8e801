"""TextEncodeZImageOmni (nodes/zimage_omni_nodes.py), today's ComfyUI (comfy_extras/nodes_zimage.py):
the prompt in the Omni template with images, one text per reference plus a closing one encoded on
their own, each image through the image encoder and (resized to about a megapixel at multiples of
8 when asked) the VAE; on the tiny Qwen3-4B CLIP loaded as CLIPLoader type "lumina2". Then the
node in a workflow through the executor, with one and with two reference images, sampling the tiny
Z-Image Omni file: the Omni forward receives what the node put on the conditioning."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from comfy_core.families.zimage.nextdit import NextDiT
from nodes.errors import NodeInputError
from nodes.zimage_omni_nodes import text_encode_zimage_omni
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.nodes.workflow_2026 import Runner, node

PROMPT = "the cat from the first image on the sofa of the second"
TEMPLATE = "<|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n<|vision_start|>"


def _tiny_qwen3_state(seed: int = 0) -> dict:
    """tests/fixtures/qwen3_files' tiny Qwen3-4B (its TINY_QWEN3 sizes, Hugging Face `Qwen3Model`
    names under `model.`) with random values scaled as there, written out here so the test does
    not import transformers (seconds)."""
    from tests.fixtures.qwen3_files import TINY_QWEN3 as q

    hidden, head, inner = q["hidden_size"], q["head_dim"], q["intermediate_size"]
    heads, kv = q["num_attention_heads"], q["num_key_value_heads"]
    shapes = {"embed_tokens.weight": (q["vocab_size"], hidden), "norm.weight": (hidden,)}
    for i in range(q["num_hidden_layers"]):
        block = f"layers.{i}."
        shapes.update({block + "self_attn.q_proj.weight": (heads * head, hidden),
                       block + "self_attn.k_proj.weight": (kv * head, hidden),
                       block + "self_attn.v_proj.weight": (kv * head, hidden),
                       block + "self_attn.o_proj.weight": (hidden, heads * head),
                       block + "self_attn.q_norm.weight": (head,), block + "self_attn.k_norm.weight": (head,),
                       block + "mlp.gate_proj.weight": (inner, hidden), block + "mlp.up_proj.weight": (inner, hidden),
                       block + "mlp.down_proj.weight": (hidden, inner),
                       block + "input_layernorm.weight": (hidden,),
                       block + "post_attention_layernorm.weight": (hidden,)})
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in shapes.items():
        value = torch.randn(shape, generator=gen)
        if name.endswith("norm.weight"):
            value = 1.0 + 0.2 * value
        elif name.endswith("proj.weight"):
            value = 0.15 * value
        state["model." + name] = value
    return state


@pytest.fixture(scope="module")
def te_file(tmp_path_factory):
    from tests.fixtures.qwen3_files import write_qwen3_file

    return write_qwen3_file(tmp_path_factory.mktemp("zomni_te") / "qwen_3_4b.safetensors", _tiny_qwen3_state(),
                            dtype=torch.float32)


@pytest.fixture(scope="module")
def clip(te_file):
    from comfy_core.split import load_text_encoders

    return load_text_encoders([te_file], "lumina2")


@pytest.fixture
def calls(clip, monkeypatch):
    seen = []
    tokenize = clip.tokenize

    def recording(text, return_word_ids=False, **kwargs):
        seen.append((text, kwargs))
        return tokenize(text, return_word_ids, **kwargs)

    monkeypatch.setattr(clip, "tokenize", recording)
    return seen


class RecordingVAE:
    """A VAE's surface: records the pixels it encodes, returns a latent of their mean."""

    def __init__(self):
        self.seen = []

    def encode(self, pixels):
        self.seen.append(pixels)
        return torch.full((pixels.shape[0], 16, pixels.shape[1] // 8, pixels.shape[2] // 8), float(pixels.mean()))

    def decode(self, latent):
        raise AssertionError("not used")


class RecordingEncoder:
    """A CLIP_VISION's surface: records the images, returns a marker per call."""

    def __init__(self):
        self.seen = []

    def encode_image(self, image, crop=True):
        self.seen.append(image)
        return ("encoded", len(self.seen))


def _image(height, width, seed=0, channels=3):
    return torch.rand(1, height, width, channels, generator=torch.Generator().manual_seed(seed))


def _encode(clip, text, template):
    return clip.encode_from_tokens_scheduled(clip.tokenize(text, llama_template=template))


def test_two_images_give_the_omni_template_texts_latents_and_encodings(clip, calls):
    first, third = _image(40, 60, seed=1), _image(64, 64, seed=2, channels=4)
    vae, encoder = RecordingVAE(), RecordingEncoder()
    (conditioning,) = text_encode_zimage_omni(clip, PROMPT, image_encoder=encoder, vae=vae, image1=first,
                                              image3=third)
    texts = ["<|im_start|>user\n<|vision_start|>", "<|vision_end|><|vision_start|>", "<|vision_end|><|im_end|>"]
    assert calls == [(PROMPT, {"llama_template": TEMPLATE})] + [(t, {"llama_template": "{}"}) for t in texts]
    # 40x60 -> 1024^2 pixels at multiples of 8: scale 20.90, 836.1 / 8 = 104.5 -> 105 * 8, 1254.1 / 8 -> 157 * 8
    assert [tuple(p.shape) for p in vae.seen] == [(1, 840, 1256, 3), (1, 1024, 1024, 4)]
    expected = torch.nn.functional.interpolate(first.movedim(-1, 1), size=(840, 1256), mode="area").movedim(1, -1)
    assert torch.allclose(vae.seen[0], expected, atol=1e-6)
    assert [img is src for img, src in zip(encoder.seen, (first, third))] == [True, True]  # encoded as given
    ((cond, options),) = conditioning
    prompt_cond = _encode(clip, PROMPT, TEMPLATE)[0][0]
    assert torch.equal(cond, prompt_cond)
    assert [tuple(r.shape) for r in options["reference_latents"]] == [(1, 16, 105, 157), (1, 16, 128, 128)]
    assert options["clip_vision_outputs"] == [("encoded", 1), ("encoded", 2)]
    embeds = options["reference_latents_text_embeds"]
    assert len(embeds) == 3 and all(torch.equal(e, _encode(clip, t, "{}")[0][0]) for e, t in zip(embeds, texts))


def test_without_images_the_prompt_is_plain_and_nothing_is_added(clip, calls):
    (conditioning,) = text_encode_zimage_omni(clip, PROMPT, image_encoder=RecordingEncoder(), vae=RecordingVAE())
    assert calls == [(PROMPT, {"llama_template": None})]
    ((cond, options),) = conditioning
    assert torch.equal(cond, _encode(clip, PROMPT, None)[0][0])
    assert not {"reference_latents", "clip_vision_outputs", "reference_latents_text_embeds"} & set(options)


def test_one_image_without_resize_encoder_or_vae(clip, calls):
    image = _image(24, 16, seed=3)
    vae = RecordingVAE()
    (with_vae,) = text_encode_zimage_omni(clip, PROMPT, auto_resize_images=False, vae=vae, image2=image)
    assert vae.seen[0] is image and [t for t, _ in calls[1:]] == ["<|im_start|>user\n<|vision_start|>",
                                                                  "<|vision_end|><|im_end|>"]
    assert "clip_vision_outputs" not in with_vae[0][1]
    (text_only,) = text_encode_zimage_omni(clip, PROMPT, image1=image)  # no VAE: no latents, texts still set
    assert "reference_latents" not in text_only[0][1] and len(text_only[0][1]["reference_latents_text_embeds"]) == 2


def test_refuses_what_is_not_an_image_encoder(clip):
    with pytest.raises(NodeInputError, match="'image_encoder'"):
        text_encode_zimage_omni(clip, PROMPT, image_encoder="siglip", image1=_image(8, 8))


# -- in a workflow ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory, te_file):
    import shutil

    from tests.fixtures.clip_vision import write_tiny_clip_vision
    from tests.fixtures.vae16_files import write_tiny_vae16
    from tests.fixtures.zimage_omni_files import write_zimage_omni_unet

    root = tmp_path_factory.mktemp("zomni_root")
    models = root / "models"
    (models / "text_encoders").mkdir(parents=True)
    shutil.copy(te_file, models / "text_encoders" / "qwen_3_4b.safetensors")
    write_tiny_vae16(models / "vae" / "ae.safetensors")
    write_tiny_clip_vision(models / "clip_vision" / "siglip_tiny.safetensors", kind="siglip")
    write_zimage_omni_unet(models, seed=4)
    inputs = root / "input"
    inputs.mkdir()
    for i, (h, w) in enumerate(((32, 48), (48, 32))):
        pixels = (np.random.default_rng(i).random((h, w, 3)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(inputs / f"ref{i + 1}.png")
    return root


def _prompt(references: int) -> dict:
    prompt = {
        "unet": node("UNETLoader", unet_name="z_image_omni_tiny.safetensors", weight_dtype="default"),
        "clip": node("CLIPLoader", clip_name="qwen_3_4b.safetensors", type="lumina2", device="default"),
        "vae": node("VAELoader", vae_name="ae.safetensors"),
        "siglip": node("CLIPVisionLoader", clip_name="siglip_tiny.safetensors"),
        "omni": node("TextEncodeZImageOmni", clip=["clip", 0], image_encoder=["siglip", 0], prompt=PROMPT,
                     auto_resize_images=False, vae=["vae", 0]),
        "neg": node("CLIPTextEncode", clip=["clip", 0], text=""),
        "latent": node("EmptySD3LatentImage", width=32, height=32, batch_size=1),
        "sample": node("KSampler", model=["unet", 0], seed=1, steps=1, cfg=2.0, sampler_name="euler",
                       scheduler="simple", positive=["omni", 0], negative=["neg", 0], latent_image=["latent", 0],
                       denoise=1.0),
        "save": node("SaveLatent", samples=["sample", 0], filename_prefix=f"omni{references}"),
    }
    for i in range(references):
        prompt[f"load{i + 1}"] = node("LoadImage", image=f"ref{i + 1}.png")
        prompt["omni"]["inputs"][f"image{i + 1}"] = [f"load{i + 1}", 0]
    return prompt


@pytest.mark.parametrize("references", [1, 2])
async def test_workflow_samples_with_reference_images(models, monkeypatch, references):
    seen = []
    forward_omni = NextDiT.forward_omni

    def recording(self, x, timesteps, context, *args, **kwargs):
        seen.append({key: kwargs.get(key) for key in ("ref_latents", "ref_contexts", "siglip_feats")})
        return forward_omni(self, x, timesteps, context, *args, **kwargs)

    monkeypatch.setattr(NextDiT, "forward_omni", recording)
    runner = Runner(models)
    out = await runner.run(_prompt(references))
    assert out.status == "success", out.error
    assert "omni" in runner.ran and "sample" in runner.ran
    assert len(seen) == 1  # one step; the negative (no references) runs the plain forward
    (call,) = seen
    # 32x48 and 48x32 pixels -> 4x6 and 6x4 latents; text embeds: one per image and the closing one;
    # the tiny SigLIP's 28 px in 14 px patches: a 2x2 grid of 32-wide states per image
    assert [tuple(r.shape) for r in call["ref_latents"]] == [(1, 16, 4, 6), (1, 16, 6, 4)][:references]
    assert len(call["ref_contexts"]) == references + 1
    assert [tuple(f.shape) for f in call["siglip_feats"]] == [(1, 2, 2, 32)] * references
    saved = list((models / "output").glob(f"omni{references}_*.latent"))
    assert len(saved) == 1
