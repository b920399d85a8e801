"""Z-Image Omni's DiT side as today's ComfyUI runs it (comfy/ldm/lumina/model.py NextDiT with
`siglip_feat_dim`, model_base.Lumina2.extra_conds, model_detection's `siglip_embedder.0.weight`):
detection from a tiny file with the real key names, the token layout and RoPE ids of reference
segments (checked against numbers worked out by hand), the whole forward against a reference
written here from the raw weights (ComfyUI's algorithm: timesteps doubled to `[0, t]`,
per-slice modulation, the SigLIP refiner), the plain forward kept without reference latents, and
the conditions that carry TextEncodeZImageOmni's values to the network."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.zimage import ZImageConditions, _detect, siglip_grid
from comfy_core.families.zimage.nextdit import NextDiTConfigError
from comfy_core.clip_vision.output import ClipVisionOutput
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.zimage_files import CAP_WIDTH, tiny_zimage_state_dict
from tests.fixtures.zimage_omni_files import SIGLIP_WIDTH, tiny_zimage_omni_state_dict

HEADS, AXES, THETA = 4, (4, 6, 6), 256.0


@pytest.fixture(scope="module")
def state():
    return tiny_zimage_omni_state_dict(seed=11)


@pytest.fixture(scope="module")
def omni(tmp_path_factory, state):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(save(state, tmp_path_factory.mktemp("omni") / "diffusion_models" / "omni.safetensors"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory, state):
    """The same weights without the SigLIP branch: a plain Z-Image file."""
    from comfy_core.split.diffusion_model import load_diffusion_model

    bare = {k: v for k, v in state.items() if not k.startswith("siglip_")}
    return load_diffusion_model(save(bare, tmp_path_factory.mktemp("plain") / "diffusion_models" / "plain.safetensors"))


# -- detection ----------------------------------------------------------------------------------------

def test_omni_file_is_detected_with_its_siglip_width(state, omni):
    config = _detect(state, "")
    assert config.siglip_feat_dim == SIGLIP_WIDTH and config.pad_tokens_multiple == 32
    unet = config.comfy_unet_config()
    assert unet["siglip_feat_dim"] == SIGLIP_WIDTH and unet["image_model"] == "lumina2"
    assert "siglip_feat_dim" not in _detect(tiny_zimage_state_dict(seed=1), "").comfy_unet_config()
    network = omni.model.diffusion_model
    assert omni.model.family.name == "zimage" and network.config.siglip_feat_dim == SIGLIP_WIDTH
    assert len(network.siglip_refiner) == 1 and not network.siglip_refiner[0].modulation
    assert torch.equal(network.siglip_pad_token.detach(), state["siglip_pad_token"])
    assert torch.equal(network.siglip_embedder[1].weight.detach(), state["siglip_embedder.1.weight"])
    prefixed = {"model.diffusion_model." + k: v for k, v in state.items()}
    assert _detect(prefixed, "model.diffusion_model.").siglip_feat_dim == SIGLIP_WIDTH


def _renumber_siglip_refiner(state):
    """siglip_refiner.0 renamed .1: a gap in the numbering."""
    for key in [k for k in state if k.startswith("siglip_refiner.0.")]:
        state[key.replace("siglip_refiner.0.", "siglip_refiner.1.")] = state.pop(key)


def _extra_siglip_refiner(state):
    """A second SigLIP refiner block where the file has one noise refiner block."""
    for key in [k for k in state if k.startswith("siglip_refiner.0.")]:
        state[key.replace("siglip_refiner.0.", "siglip_refiner.1.")] = state[key]


@pytest.mark.parametrize("change, message", [
    (_renumber_siglip_refiner, "siglip_refiner"),
    (_extra_siglip_refiner, "2 SigLIP refiner blocks but 1"),
    (lambda s: s.update({"siglip_embedder.1.weight": torch.zeros(64, SIGLIP_WIDTH + 1)}), "siglip_embedder.1.weight"),
    (lambda s: s.pop("siglip_pad_token"), "siglip_pad_token"),
])
def test_inconsistent_siglip_weights_are_typed_errors(state, change, message):
    broken = dict(state)
    change(broken)
    with pytest.raises(NextDiTConfigError, match=message):
        _detect(broken, "")


# -- a reference written from the weights (ComfyUI's algorithm) ---------------------------------------------

def _rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _lin(sd, name, x):
    y = x @ sd[name + ".weight"].T
    return y + sd[name + ".bias"] if name + ".bias" in sd else y


def _cis(ids):
    """Complex rotations `[L, D/2]` of position ids `[L, 3]` (per axis: theta^(-2i/d))."""
    parts = []
    for axis, d in enumerate(AXES):
        freqs = 1.0 / THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
        parts.append(torch.polar(torch.ones(len(ids), d // 2, dtype=torch.float64),
                                 ids[:, axis:axis + 1].double() * freqs))
    return torch.cat(parts, dim=1)


def _rotate(x, cis):
    b, n, h, d = x.shape
    z = torch.view_as_complex(x.double().reshape(b, n, h, d // 2, 2).contiguous()) * cis[None, :, None]
    return torch.view_as_real(z).reshape(b, n, h, d).float()


def _block(sd, name, x, cis, mods=None):
    """One block; `mods` per-token (scale_msa, gate_msa, scale_mlp, gate_mlp) `[B, L, dim]` or None."""
    def attention(h):
        b, n, dim = h.shape
        q, k, v = (h @ sd[name + ".attention.qkv.weight"].T).chunk(3, dim=-1)
        q = _rms(q.reshape(b, n, HEADS, -1), sd[name + ".attention.q_norm.weight"])
        k = _rms(k.reshape(b, n, HEADS, -1), sd[name + ".attention.k_norm.weight"])
        q, k = _rotate(q, cis), _rotate(k, cis)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.reshape(b, n, HEADS, -1).transpose(1, 2))
        return out.transpose(1, 2).reshape(b, n, dim) @ sd[name + ".attention.out.weight"].T

    def ffn(h):
        return (F.silu(h @ sd[name + ".feed_forward.w1.weight"].T) * (h @ sd[name + ".feed_forward.w3.weight"].T)) \
            @ sd[name + ".feed_forward.w2.weight"].T

    norm = {n: sd[f"{name}.{n}.weight"] for n in ("attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2")}
    if mods is None:
        x = x + _rms(attention(_rms(x, norm["attention_norm1"])), norm["attention_norm2"])
        return x + _rms(ffn(_rms(x, norm["ffn_norm1"])), norm["ffn_norm2"])
    s1, g1, s2, g2 = mods
    x = x + g1.tanh() * _rms(attention(_rms(x, norm["attention_norm1"]) * (1 + s1)), norm["attention_norm2"])
    return x + g2.tanh() * _rms(ffn(_rms(x, norm["ffn_norm1"]) * (1 + s2)), norm["ffn_norm2"])


def _t_embed(sd, t):
    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return _lin(sd, "t_embedder.mlp.2", F.silu(_lin(sd, "t_embedder.mlp.0", emb)))


def _per_slice(rows, slices, length):
    """ComfyUI's modulate: `rows` `[2B, dim]` = [clean; noisy]; tokens in `slices` take the noisy
    half, the others the clean half -> `[B, L, dim]`."""
    b = rows.shape[0] // 2
    out = rows[:b, None].expand(b, length, rows.shape[1]).clone()
    for start, end in slices:
        out[:, start:end] = rows[b:, None]
    return out


def _pad(tokens, pad, ids):
    extra = (-tokens.shape[1]) % 32
    tokens = torch.cat([tokens, pad[None].expand(tokens.shape[0], extra, -1)], dim=1)
    return tokens, torch.cat([ids, torch.zeros(extra, 3)])


def _patches(sd, latent, start):
    b, c, h, w = latent.shape
    tokens = latent.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 3, 5, 1).reshape(b, h * w // 4, 4 * c)
    ids = torch.tensor([[start, r, col] for r in range(h // 2) for col in range(w // 2)], dtype=torch.float32)
    return _pad(_lin(sd, "x_embedder", tokens), sd["x_pad_token"], ids)


def _caption(sd, text, offset):
    """(tokens, ids, unpadded length) of one caption segment."""
    if text is None:
        tokens, length = sd["cap_pad_token"][None].expand(1, 32, -1), 0
    else:
        emb = _lin(sd, "cap_embedder.1", _rms(text, sd["cap_embedder.0.weight"]))
        length = emb.shape[1]
        tokens, _ = _pad(emb, sd["cap_pad_token"], torch.zeros(length, 3))
    ids = torch.zeros(tokens.shape[1], 3)
    ids[:, 0] = torch.arange(tokens.shape[1]) + 1.0 + offset
    return tokens, ids, length


def _rep(t, b):
    return t if t.shape[0] == b else t.repeat(b, *([1] * (t.ndim - 1)))[:b]


def reference(sd, x, sigma, context, refs, texts, sigs):
    """ComfyUI's NextDiT omni forward, written from the weights `sd` (bare names)."""
    b, _, h, w = x.shape
    siglip = "siglip_embedder.0.weight" in sd
    vec = _t_embed(sd, (1.0 - torch.cat([sigma * 0, sigma])) * 1000.0)  # [2B, adaln]: clean then noisy
    caps, sig_parts, imgs = [], [], []
    offset = 0
    segments = [(r, texts[i] if i < len(texts) else None, sigs[i] if i < len(sigs) else None)
                for i, r in enumerate(refs)] + [(x, context, None)]
    for latent, text, sig in segments:
        tokens, ids, length = _caption(sd, text, offset)
        caps.append((_rep(tokens, b), ids))
        if siglip:
            end = offset + length
            if sig is None:
                sig_parts.append((_rep(sd["siglip_pad_token"][None].expand(1, 32, -1), b), torch.zeros(32, 3)))
            else:
                n, sh, sw, c = sig.shape
                flat = sig.permute(0, 3, 1, 2).reshape(n, sh * sw, c)  # as ComfyUI: channel-first memory
                emb = _lin(sd, "siglip_embedder.1", _rms(flat, sd["siglip_embedder.0.weight"]))
                rows = torch.linspace(0, sh * 8 - 1, sh).floor()
                cols = torch.linspace(0, sw * 8 - 1, sw).floor()
                ids = torch.tensor([[end + 2, float(r), float(q)] for r in rows for q in cols])
                sig_parts.append(tuple(_rep(t, b) if t.ndim == 3 else t
                                       for t in _pad(emb, sd["siglip_pad_token"], ids)))
        else:
            end = offset + tokens.shape[1]
        img, img_ids = _patches(sd, latent, end + 1)
        imgs.append((_rep(img, b), img_ids))
        offset = end + 2
    main_cap = caps[-1][0].shape[1]
    for text in texts[len(refs):]:
        tokens, ids, length = _caption(sd, text, offset)
        caps.append((_rep(tokens, b), ids))
        main_cap += tokens.shape[1]
        offset += length
    main_img = imgs[-1][0].shape[1]

    cap = torch.cat([c for c, _ in caps], 1)
    cap_cis = _cis(torch.cat([i for _, i in caps]))
    cap = _block(sd, "context_refiner.0", cap, cap_cis)
    parts, cis = [cap], [cap_cis]
    if sig_parts:
        sig_cis = _cis(torch.cat([i for _, i in sig_parts]))
        parts.append(_block(sd, "siglip_refiner.0", torch.cat([s for s, _ in sig_parts], 1), sig_cis))
        cis.append(sig_cis)
    img = torch.cat([i for i, _ in imgs], 1)
    img_cis = _cis(torch.cat([i for _, i in imgs]))
    n = img.shape[1]

    def mods(name, slices, length):
        rows = _lin(sd, name, vec).chunk(4, dim=1)
        return [_per_slice(r, slices, length) for r in rows]

    refiner_mods = mods("noise_refiner.0.adaLN_modulation.0", [(n - main_img, n)], n)
    img = _block(sd, "noise_refiner.0", img, img_cis, refiner_mods)
    seq = torch.cat(parts + [img], 1)
    cis = torch.cat(cis + [img_cis])
    total, ncap = seq.shape[1], cap.shape[1]
    slices = [(total - main_img, total), (ncap - main_cap, ncap)]
    for i in range(2):
        seq = _block(sd, f"layers.{i}", seq, cis, mods(f"layers.{i}.adaLN_modulation.0", slices, total))
    scale = _per_slice(_lin(sd, "final_layer.adaLN_modulation.1", F.silu(vec)), slices, total)
    out = _lin(sd, "final_layer.linear", F.layer_norm(seq, (seq.shape[-1],), eps=1e-6) * (1 + scale))
    start = total - main_img
    out = out[:, start:start + (h // 2) * (w // 2)]
    out = out.reshape(b, h // 2, w // 2, 2, 2, 16).permute(0, 5, 1, 3, 2, 4).reshape(b, 16, h, w)
    return -out


def _inputs(seed=21):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, 4, 4, generator=g)
    sigma = torch.tensor([0.7, 0.3])
    context = torch.randn(2, 9, CAP_WIDTH, generator=g)
    refs = [torch.randn(1, 16, 4, 6, generator=g), torch.randn(1, 16, 2, 2, generator=g)]
    texts = [torch.randn(1, n, CAP_WIDTH, generator=g) for n in (5, 7, 3)]  # the third follows the target
    sigs = [torch.randn(1, 2, 3, SIGLIP_WIDTH, generator=g)]  # the second reference has none
    return x, sigma, context, refs, texts, sigs


# -- layout and RoPE ids ------------------------------------------------------------------------------

def test_token_layout_and_rope_ids_follow_comfyui(omni):
    """Two references (text 5 / 7 tokens, SigLIP 2x3 for the first only), a 9-token prompt and a
    3-token closing text: ids worked out by hand from ComfyUI's embed_all."""
    network = omni.model.diffusion_model
    x, _, context, refs, texts, sigs = _inputs()
    with torch.no_grad():
        layout = network.omni_layout(x, context, refs, texts, sigs)
    assert [t.shape[1] for t in layout["cap"]] == [32, 32, 32, 32]
    assert [t.shape[1] for t in layout["siglip"]] == [32, 32, 32]  # 6 states padded; pad-only for ref 2 and target
    assert [t.shape[1] for t in layout["img"]] == [32, 32, 32]  # 6, 1 and 4 patches, padded
    assert all(t.shape[0] == 2 for key in ("cap", "siglip", "img") for t in layout[key])  # references repeated
    assert layout["main_cap_len"] == 64 and layout["main_img_len"] == 32
    first = lambda ids: ids[0, :, 0].tolist()  # noqa: E731
    # captions at offset + 1.. : reference 1 from 0, reference 2 from 0 + 5 + 2, target from 7 + 7 + 2,
    # the closing text from 16 + 9 + 2
    assert [first(ids)[0] for ids in layout["cap_ids"]] == [1.0, 8.0, 17.0, 28.0]
    assert all(first(ids) == [ids[0, 0, 0].item() + i for i in range(32)] for ids in layout["cap_ids"])
    # SigLIP of reference 1 at 5 + 2, rows floor(linspace(0, 15, 2)), cols floor(linspace(0, 23, 3))
    sig = layout["siglip_ids"][0][0]
    assert sig[:6].tolist() == [[7, 0, 0], [7, 0, 11], [7, 0, 23], [7, 15, 0], [7, 15, 11], [7, 15, 23]]
    assert not sig[6:].any() and not layout["siglip_ids"][1].any() and not layout["siglip_ids"][2].any()
    # images at end + 1 (end = offset + unpadded text): 6, 15, 26; pads at (0, 0, 0)
    img1, img2, img3 = (ids[0] for ids in layout["img_ids"])
    assert img1[:6].tolist() == [[6, r, c] for r in range(2) for c in range(3)] and not img1[6:].any()
    assert img2[:1].tolist() == [[15, 0, 0]] and not img2[1:].any()
    assert img3[:4].tolist() == [[26, r, c] for r in range(2) for c in range(2)] and not img3[4:].any()


def test_plain_zimage_with_references_counts_padded_text(plain):
    """Without a SigLIP branch ComfyUI takes the non-Omni layout per segment: images at the padded
    text length + 1, no SigLIP tokens."""
    x, _, context, refs, texts, sigs = _inputs()
    with torch.no_grad():
        layout = plain.model.diffusion_model.omni_layout(x, context, refs, texts, sigs)
    assert layout["siglip"] == [] and [ids[0, 0, 0].item() for ids in layout["cap_ids"]] == [1.0, 35.0, 69.0, 103.0]
    assert [ids[0, 0, 0].item() for ids in layout["img_ids"]] == [33.0, 67.0, 101.0]


# -- the forward ------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["omni", "plain"])
def test_forward_with_references_matches_the_reference(omni, plain, state, which):
    model = omni if which == "omni" else plain
    sd = state if which == "omni" else {k: v for k, v in state.items() if not k.startswith("siglip_")}
    x, sigma, context, refs, texts, sigs = _inputs()
    with torch.no_grad():
        ours = model.model.diffusion_model(x, sigma, context, ref_latents=refs, ref_contexts=texts, siglip_feats=sigs)
        expected = reference(sd, x, sigma, context, refs, texts, sigs)
    assert ours.shape == x.shape
    assert (ours - expected).abs().max() < 2e-4


def test_siglip_states_and_reference_timestep_matter(omni):
    network = omni.model.diffusion_model
    x, sigma, context, refs, texts, sigs = _inputs()
    with torch.no_grad():
        base = network(x, sigma, context, ref_latents=refs, ref_contexts=texts, siglip_feats=sigs)
        # (a scale alone would be normed away by siglip_embedder's RMSNorm)
        other = network(x, sigma, context, ref_latents=refs, ref_contexts=texts, siglip_feats=[sigs[0].flip(-1)])
        original = network.siglip_refiner[0].ffn_norm2.weight.detach().clone()
        network.siglip_refiner[0].ffn_norm2.weight.mul_(3.0)
        refined = network(x, sigma, context, ref_latents=refs, ref_contexts=texts, siglip_feats=sigs)
        network.siglip_refiner[0].ffn_norm2.weight.copy_(original)
    assert (base - other).abs().max() > 1e-4 and (base - refined).abs().max() > 1e-4


def test_without_reference_latents_the_omni_file_is_plain_zimage(omni, plain):
    """ComfyUI's omni path needs reference latents: without, the SigLIP weights are unused and text
    embeds / SigLIP states are ignored."""
    x, sigma, context, _, texts, sigs = _inputs(5)
    with torch.no_grad():
        ours = omni.model.diffusion_model(x, sigma, context)
        ignored = omni.model.diffusion_model(x, sigma, context, ref_latents=[], ref_contexts=texts, siglip_feats=sigs)
        theirs = plain.model.diffusion_model(x, sigma, context)
    assert torch.equal(ours, theirs) and torch.equal(ignored, theirs)


# -- conditions -------------------------------------------------------------------------------------

class _Model:
    def process_latent_in(self, latent):
        return latent * 10.0


def _vision(tokens, sizes=None):
    out = ClipVisionOutput()
    out["last_hidden_state"] = torch.arange(tokens * 4, dtype=torch.float32).reshape(1, tokens, 4)
    if sizes is not None:
        out["image_sizes"] = sizes
    return out


def test_conditions_carry_references_text_embeds_and_siglip_grids():
    conditions = ZImageConditions()
    refs, texts = [torch.ones(1, 16, 2, 2)], [torch.zeros(1, 5, CAP_WIDTH), torch.zeros(1, 3, CAP_WIDTH)]
    out = conditions.extra_conds(_Model(), cross_attn=torch.zeros(1, 9, CAP_WIDTH), reference_latents=refs,
                                 reference_latents_text_embeds=texts,
                                 clip_vision_outputs=[_vision(6, [(3, 32, 48)]), None, _vision(4)])
    assert out["num_tokens"] == 9 and torch.equal(out["ref_latents"][0], refs[0] * 10.0)
    assert out["ref_contexts"] == texts
    # image_sizes (C, H, W) -> H // 16 x W // 16 = 2 x 3 (ComfyUI); without: a square 2 x 2 grid
    first, second = out["siglip_feats"]
    assert first.shape == (1, 2, 3, 4) and torch.equal(first[0, 1, 2], torch.arange(20.0, 24.0))
    assert second.shape == (1, 2, 2, 4)
    unclip = conditions.extra_conds(_Model(), unclip_conditioning=[{"clip_vision_output": _vision(4)}, {}])
    assert [f.shape for f in unclip["siglip_feats"]] == [(1, 2, 2, 4)] and "ref_latents" not in unclip
    assert conditions.extra_conds(_Model(), cross_attn=torch.zeros(1, 3, CAP_WIDTH)) == {"num_tokens": 3}
    with pytest.raises(ValueError, match="square"):
        siglip_grid(_vision(5))


# -- diffusers' layout and LoRA names -------------------------------------------------------------------

def test_diffusers_layout_and_lora_names_cover_the_siglip_branch(state, omni):
    from comfy_core.families.zimage.keys import convert_diffusers_state_dict, diffusers_key_map, lora_key_map
    from tests.fixtures.zimage_files import to_diffusers_layout

    diffusers = to_diffusers_layout(state)
    assert "siglip_refiner.0.attention.to_q.weight" in diffusers and "siglip_embedder.1.weight" in diffusers
    back = convert_diffusers_state_dict(diffusers)
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    config = omni.model.diffusion_model.config
    mapping = diffusers_key_map(config, "diffusion_model.")
    qkv = "diffusion_model.siglip_refiner.0.attention.qkv.weight"
    assert mapping["siglip_refiner.0.attention.to_k.weight"] == (qkv, (0, 64, 64))
    assert mapping["siglip_embedder.1.weight"] == "diffusion_model.siglip_embedder.1.weight"
    assert not any(k.startswith("siglip") for k in diffusers_key_map(_detect(tiny_zimage_state_dict(seed=1), "")))
    names = ["diffusion_model." + k for k in state]
    keys = lora_key_map(config, names)
    assert keys["transformer.siglip_refiner.0.attention.to_v"] == (
        "diffusion_model.siglip_refiner.0.attention.qkv.weight", (0, 128, 64))
    assert keys["diffusion_model.siglip_embedder.1"] == "diffusion_model.siglip_embedder.1.weight"
