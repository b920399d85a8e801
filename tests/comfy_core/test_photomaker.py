"""PhotoMaker v1 (comfy_core/clip_vision/photomaker.py, nodes/photomaker.py) on a tiny file in its
real layout (a pickle with the weights under `id_encoder`): the ID embedding against transformers'
CLIPVisionModelWithProjection built from the same tensors, the fuse module against its equations
written here, and PhotoMakerEncode's trigger-word handling as ComfyUI's."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.clip_vision.photomaker import load_photomaker
from comfy_core.clip_vision.preprocess import clip_preprocess
from comfy_core.checkpoint.errors import CheckpointError
from comfy_core.text_encoders.sd_tokenizer import SDTokenizer, TokenizerSpec
from comfy_core.text_encoders.tokenizer import ClipTokenizer
from nodes.errors import NodeInputError
from nodes.photomaker import drop_word, photomaker_encode, trigger_word_id
from tests.fixtures.clip_vision import clip_vision_state_dict

PROJECTION, SECOND = 16, 24
WIDTH = PROJECTION + SECOND  # the fuse module's width (SDXL's 2048 in the released file)


def _photomaker_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = clip_vision_state_dict("clip", "hf", width=32, layers=2, image_size=28, patch_size=14,
                                   projection_dim=PROJECTION, seed=seed)
    state["visual_projection_2.weight"] = torch.randn(SECOND, 32, generator=g) / 32 ** 0.5
    for name, width_in, hidden, width_out in (("mlp1", 2 * WIDTH, WIDTH, WIDTH), ("mlp2", WIDTH, WIDTH, WIDTH)):
        p = f"fuse_module.{name}."
        state[p + "layernorm.weight"] = 1 + 0.1 * torch.randn(width_in, generator=g)
        state[p + "layernorm.bias"] = 0.1 * torch.randn(width_in, generator=g)
        state[p + "fc1.weight"] = torch.randn(hidden, width_in, generator=g) / width_in ** 0.5
        state[p + "fc1.bias"] = 0.1 * torch.randn(hidden, generator=g)
        state[p + "fc2.weight"] = torch.randn(width_out, hidden, generator=g) / hidden ** 0.5
        state[p + "fc2.bias"] = 0.1 * torch.randn(width_out, generator=g)
    state["fuse_module.layer_norm.weight"] = 1 + 0.1 * torch.randn(WIDTH, generator=g)
    state["fuse_module.layer_norm.bias"] = 0.1 * torch.randn(WIDTH, generator=g)
    return state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photomaker")
    state = _photomaker_state()
    path = folder / "photomaker-v1.bin"
    torch.save({"id_encoder": state, "lora_weights": {"unet.lora.down.weight": torch.zeros(2, 2)}}, path)
    return path, state


@pytest.fixture(scope="module")
def encoder(files):
    return load_photomaker(files[0], torch.float32)


def _mlp(state, prefix, x, residual):
    y = F.layer_norm(x, x.shape[-1:], state[prefix + "layernorm.weight"], state[prefix + "layernorm.bias"])
    y = F.linear(F.gelu(F.linear(y, state[prefix + "fc1.weight"], state[prefix + "fc1.bias"])),
                 state[prefix + "fc2.weight"], state[prefix + "fc2.bias"])
    return y + x if residual else y


def test_the_id_embedding_is_both_projections_of_the_pooled_output(files, encoder):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    _, state = files
    config = CLIPVisionConfig(hidden_size=32, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=encoder.clip_vision.config.heads, image_size=28, patch_size=14,
                              hidden_act=encoder.clip_vision.config.activation, projection_dim=PROJECTION)
    reference = CLIPVisionModelWithProjection(config).eval()
    reference.load_state_dict({k: v for k, v in state.items() if k.startswith(("vision_model.", "visual_projection."))
                               and not k.startswith("visual_projection_2")}, strict=True)
    image = torch.rand(2, 40, 36, 3, generator=torch.Generator().manual_seed(1))
    pixels = clip_preprocess(image, 28)
    with torch.no_grad():
        out = reference(pixel_values=pixels)
        pooled = reference.vision_model(pixel_values=pixels).pooler_output
    want = torch.cat([out.image_embeds, pooled @ state["visual_projection_2.weight"].T], dim=-1)
    assert torch.allclose(encoder.id_embedding(image), want, atol=1e-5)


def test_the_fuse_module_rewrites_one_token(files, encoder):
    _, state = files
    prompt = torch.randn(1, 77, WIDTH, generator=torch.Generator().manual_seed(2))
    image = torch.rand(3, 28, 28, 3, generator=torch.Generator().manual_seed(3))
    out = encoder.fuse(prompt, image, 5)
    id_embeds = encoder.id_embedding(image[:1])[0]  # only the first image counts
    token = prompt[0, 5]
    fused = _mlp(state, "fuse_module.mlp1.", torch.cat([token, id_embeds]), residual=False) + token
    fused = _mlp(state, "fuse_module.mlp2.", fused, residual=True)
    fused = F.layer_norm(fused, (WIDTH,), state["fuse_module.layer_norm.weight"], state["fuse_module.layer_norm.bias"])
    assert torch.allclose(out[0, 5], fused, atol=1e-5)
    assert torch.equal(out[:, :5], prompt[:, :5]) and torch.equal(out[:, 6:], prompt[:, 6:])
    with pytest.raises(ValueError, match="wide"):
        encoder.fuse(torch.zeros(1, 77, 8), image, 1)


def test_files_that_are_not_photomaker_are_refused(tmp_path):
    path = tmp_path / "other.bin"
    state = _photomaker_state()
    del state["visual_projection_2.weight"]
    torch.save({"id_encoder": state}, path)
    with pytest.raises(CheckpointError, match="visual_projection_2"):
        load_photomaker(path)


def test_trigger_word_and_token_dropping_as_comfyui():
    assert trigger_word_id("photograph of a man photomaker") == 5
    assert trigger_word_id("photograph of a man  photomaker") == 6  # split on single spaces, as ComfyUI
    assert trigger_word_id("photograph of photomakers") == -1
    # ComfyUI's tokenizer numbers words per weighted segment (and embedding split), not per space:
    # in a plain prompt every token has word id 1, so the trigger's position (5) matches none and
    # nothing is dropped, exactly as in ComfyUI; the class token is still fused at position 4.
    tokenizer = SDTokenizer(ClipTokenizer.from_file(), TokenizerSpec(key="l", pad_token=49407, embedding_width=8,
                                                                     embedding_key="clip_l"))
    chunk = tokenizer.tokenize_with_weights("photograph of a man photomaker", return_word_ids=True)
    assert {t[2] for t in chunk[0]} == {0, 1}
    assert drop_word({"l": chunk}, 5)["l"] == chunk
    dropped = drop_word({"l": [[(1, 1.0, 1), (2, 1.0, 2), (3, 1.0, 2), (4, 1.0, 3), (9, 1.0, 0)]]}, 2)["l"]
    assert dropped == [[(1, 1.0, 1), (4, 1.0, 3), (9, 1.0, 0), (9, 1.0, 0), (9, 1.0, 0)]]


class RecordingClip:
    """Tokens with word ids (one token a word, as a plain CLIP gives for these words); encodes each
    token as a fixed random vector of its id, so dropped and kept tokens can be told apart."""

    def __init__(self) -> None:
        self.table = torch.randn(100, WIDTH, generator=torch.Generator().manual_seed(4))
        self.encoded = None

    def tokenize(self, text, return_word_ids=False):
        words = text.split(" ")
        chunk = [(0, 1.0, 0)] + [(i + 1, 1.0, i + 1) for i in range(len(words))] + [(99, 1.0, 0)]
        chunk += [(99, 1.0, 0)] * (77 - len(chunk))
        return {"g": [chunk]}

    def encode_from_tokens(self, tokens, return_pooled=False):
        self.encoded = tokens
        ids = torch.tensor([t[0] for t in tokens["g"][0]])
        return self.table[ids].unsqueeze(0), torch.zeros(1, 4)


def test_photomaker_encode_fuses_the_class_word(encoder):
    clip = RecordingClip()
    image = torch.rand(1, 28, 28, 3, generator=torch.Generator().manual_seed(5))
    ((cond, options),) = photomaker_encode(encoder, image, clip, "a man photomaker smiling")[0]
    kept = [t[0] for t in clip.encoded["g"][0]]
    assert kept[:5] == [0, 1, 2, 4, 99] and len(kept) == 77  # the trigger (word 3) dropped
    plain = clip.table[torch.tensor(kept)]
    assert torch.equal(cond[0, :2], plain[:2]) and torch.equal(cond[0, 3:], plain[3:])
    assert torch.allclose(cond[0, 2], encoder.fuse(plain.unsqueeze(0), image, 2)[0, 2])  # "man" fused
    assert not torch.allclose(cond[0, 2], plain[2])
    assert options["pooled_output"].shape == (1, 4)
    ((untouched, _),) = photomaker_encode(encoder, image, clip, "a man smiling")[0]
    assert torch.equal(untouched[0], clip.table[torch.tensor([t[0] for t in clip.tokenize("a man smiling")["g"][0]])])
    with pytest.raises(NodeInputError, match="photomaker"):
        photomaker_encode(object(), image, clip, "a photomaker")


def test_the_loader_node_reads_the_photomaker_folder(files, tmp_path):
    import shutil

    from graph.context import NodeContext, reset_current, set_current
    from nodes.environment import Environment
    from nodes.photomaker import photomaker_loader

    env = Environment.rooted_at(tmp_path / "base")
    env.ensure_dirs()
    folder = env.folders.paths("photomaker")[0]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(files[0], folder / "photomaker-v1.bin")
    token = set_current(NodeContext(prompt_id="p", node_id="1", display_node_id="1", list_index=None, env=env))
    try:
        (loaded,) = photomaker_loader("photomaker-v1.bin")
        with pytest.raises(NodeInputError, match="photomaker_model_name"):
            photomaker_loader("missing.bin")
    finally:
        reset_current(token)
    image = torch.rand(1, 28, 28, 3)
    assert torch.allclose(loaded.id_embedding(image), load_photomaker(files[0], torch.float32).id_embedding(image),
                          atol=1e-2)  # stored in the text-encoder dtype (float16 by default)
