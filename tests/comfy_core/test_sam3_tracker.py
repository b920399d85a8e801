"""SAM 3.1's multiplex video tracker (comfy_core/models/sam3: memory.py, multiplex.py, tracker.py) on
tiny random weights in ComfyUI's key layout: the memory encoder and the SAM 2-style memory attention
against transformers' `Sam3TrackerVideo` modules (1e-4), the multiplex parts (decoupled memory
attention, the multiplex decoder, mux / demux, the mask post-processing) against their equations
written here, and the propagation on tiny synthetic videos (detection cadence, new objects, the
object limit, the memory bank, SAM3_TRACK_DATA)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families.wan.scail_masks import pack_masks, unpack_masks
from comfy_core.loading import load_sam3
from comfy_core.models.sam3 import tracker as tracker_module
from comfy_core.models.sam3.config import Sam3Config
from comfy_core.models.sam3.memory import DecoupledMemoryAttnLayer, MemoryAttnEncoder, MemoryEncoder
from comfy_core.models.sam3.model import Sam3Model
from comfy_core.models.sam3.multiplex import (MultiplexMaskDecoder, MultiplexState, fill_holes, mask_overlap,
                                              nms_masks, non_overlap_constraint, suppress_recently_occluded)
from comfy_core.models.sam3.tracker import MultiplexTracker, temporal_sine
from tests.fixtures.template_models_sam3 import tiny_config, tiny_sam3_file_state

VIT_DIM = 48  # one ViT head (Sam3Config's reading): see the loaded-network fixture

S = 1008


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("weight") and p.ndim == 1 and "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="module")
def network():
    # a one-head ViT (vit_dim 48): the tracking behaviour under test does not depend on the trunk's heads,
    # and the 1008-pixel trunk runs ~10x faster on every frame
    with CheckpointFile(tiny_sam3_file_state(seed=3, vit_dim=VIT_DIM)) as file:
        model, _clip = load_sam3(file)[:2]
    net = model.model.diffusion_model.float().eval()
    assert net.can_track
    return net


# --- loading ----------------------------------------------------------------------------------------

def test_the_video_sizes_are_read_and_a_file_without_the_tracker_still_loads():
    state = tiny_sam3_file_state()
    config = Sam3Config.detect_from_weights(state)
    assert config == tiny_config() and config.video
    assert (config.multiplex_count, config.num_maskmem, config.mem_dim, config.mem_layers, config.mem_ffn,
            config.mask_channels, config.fuser_layers) == (4, 7, 32, 2, 48, (4, 8, 16, 32), 2)
    network = Sam3Model(config)
    names = set(network.state_dict())
    for key in ("tracker.transformer.encoder.layers.1.image_cross_attn_k_proj.weight",
                "tracker.sam_mask_decoder.mask_tokens.weight", "tracker.maskmem_backbone.mask_downsampler.encoder.12.weight",
                "tracker.maskmem_backbone.fuser.layers.1.gamma", "tracker.no_obj_embed_spatial",
                "tracker.image_pe_layer.positional_encoding_gaussian_matrix", "tracker.interactive_mask_downsample.weight",
                "tracker.output_invalid_embed", "tracker.obj_ptr_tpos_proj.weight", "tracker.no_obj_ptr_linear.weight"):
        assert key in names and key in state, key
    assert tuple(state["tracker.sam_mask_decoder.mask_tokens.weight"].shape) == (12, 32)  # M x 3 candidates
    assert tuple(state["tracker.maskmem_backbone.mask_downsampler.encoder.0.weight"].shape) == (4, 8, 3, 3)  # 2M in
    # the detection-only file: no video tensors -> no video tracker, loads all the same
    cut = {k: v for k, v in state.items() if not k.startswith(("tracker.transformer.", "tracker.sam_mask_decoder.",
                                                                "tracker.maskmem_backbone."))}
    assert not Sam3Config.detect_from_weights(cut).video
    with CheckpointFile(cut) as file:
        model = load_sam3(file)[0]
    assert not model.model.diffusion_model.can_track


# --- components against transformers ------------------------------------------------------------------

def test_the_memory_attention_is_transformers_sam3_tracker_video():
    from transformers.models.sam3_tracker_video.configuration_sam3_tracker_video import Sam3TrackerVideoConfig
    from transformers.models.sam3_tracker_video.modeling_sam3_tracker_video import Sam3TrackerVideoMemoryAttention

    grid, dim, kv, heads = 4, 32, 64, 1  # transformers' cross-attention keys are 64 wide, as SAM 3's memory
    ours = MemoryAttnEncoder(dim, heads, kv, 48, 2, grid).eval()
    _randomise(ours, 1)
    config = Sam3TrackerVideoConfig(memory_attention_hidden_size=dim, memory_attention_num_layers=2,
                                    memory_attention_feed_forward_hidden_size=48)
    config.memory_attention_rope_feat_sizes = [grid, grid]  # after the image size's setter
    config._attn_implementation = "eager"
    theirs = Sam3TrackerVideoMemoryAttention(config).eval()
    mine = ours.state_dict()
    mapped = {"layer_norm.weight": mine["norm.weight"], "layer_norm.bias": mine["norm.bias"]}
    for i in range(2):
        for part in ("self_attn", "cross_attn_image"):
            for a, b in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("o_proj", "out_proj")):
                for w in ("weight", "bias"):
                    mapped[f"layers.{i}.{part}.{a}.{w}"] = mine[f"layers.{i}.{part}.{b}.{w}"]
        for w in ("weight", "bias"):
            mapped[f"layers.{i}.linear1.{w}"] = mine[f"layers.{i}.linear1.{w}"]
            mapped[f"layers.{i}.linear2.{w}"] = mine[f"layers.{i}.linear2.{w}"]
            for n in (1, 2, 3):
                mapped[f"layers.{i}.layer_norm{n}.{w}"] = mine[f"layers.{i}.norm{n}.{w}"]
    theirs.load_state_dict(mapped, strict=False)
    g = torch.Generator().manual_seed(2)
    x, pos = torch.randn(1, grid * grid, dim, generator=g), torch.randn(1, grid * grid, dim, generator=g)
    pointers = 4
    memory = torch.randn(1, 2 * grid * grid + pointers, kv, generator=g)  # two memory frames, then pointers
    memory_pos = torch.randn(memory.shape, generator=g)
    with torch.no_grad():
        got = ours(x, memory, pos, memory_pos, exclude=pointers)
        want = theirs(x.transpose(0, 1), memory.transpose(0, 1), pos.transpose(0, 1), memory_pos.transpose(0, 1),
                      num_object_pointer_tokens=pointers).transpose(0, 1)
    assert torch.allclose(got, want.reshape(got.shape), atol=1e-4)


def test_the_memory_encoder_is_transformers_sam3_tracker_video():
    from transformers.models.sam3_tracker_video.configuration_sam3_tracker_video import Sam3TrackerVideoConfig
    from transformers.models.sam3_tracker_video.modeling_sam3_tracker_video import Sam3TrackerVideoMemoryEncoder

    dim, out = 32, 16
    ours = MemoryEncoder(dim, out, 1, (4, 16, 64, 256), 2).eval()  # SAM 3's layout: 1 mask plane, x4 channels
    ours.mask_downsampler.interpol_size = None  # transformers takes the masks at their size
    _randomise(ours, 3)
    config = Sam3TrackerVideoConfig(memory_encoder_hidden_size=dim, memory_encoder_output_channels=out,
                                    mask_downsampler_embed_dim=dim, memory_fuser_embed_dim=dim,
                                    memory_fuser_intermediate_dim=4 * dim)
    theirs = Sam3TrackerVideoMemoryEncoder(config).eval()
    for module in theirs.modules():  # ComfyUI's LayerNorms keep torch's eps
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 1e-5
    mine = ours.state_dict()
    mapped = {}
    for w in ("weight", "bias"):
        for i in range(4):
            mapped[f"mask_downsampler.layers.{i}.conv.{w}"] = mine[f"mask_downsampler.encoder.{3 * i}.{w}"]
            mapped[f"mask_downsampler.layers.{i}.layer_norm.{w}"] = mine[f"mask_downsampler.encoder.{3 * i + 1}.{w}"]
        mapped[f"mask_downsampler.final_conv.{w}"] = mine[f"mask_downsampler.encoder.12.{w}"]
        mapped[f"feature_projection.{w}"] = mine[f"pix_feat_proj.{w}"]
        mapped[f"projection.{w}"] = mine[f"out_proj.{w}"]
        for i in range(2):
            for a, b in (("depthwise_conv", "dwconv"), ("layer_norm", "norm"), ("pointwise_conv1", "pwconv1"),
                         ("pointwise_conv2", "pwconv2")):
                mapped[f"memory_fuser.layers.{i}.{a}.{w}"] = mine[f"fuser.layers.{i}.{b}.{w}"]
    for i in range(2):
        mapped[f"memory_fuser.layers.{i}.scale"] = mine[f"fuser.layers.{i}.gamma"]
    theirs.load_state_dict(mapped)
    g = torch.Generator().manual_seed(4)
    pix, masks = torch.randn(1, dim, 4, 4, generator=g), torch.randn(2, 1, 64, 64, generator=g)
    with torch.no_grad():
        got, pos = ours(pix, masks)
        want, _ = theirs(pix.expand(2, -1, -1, -1), masks)
    assert got.shape == (2, out, 4, 4) and torch.allclose(got, want, atol=1e-4)
    assert pos.shape == (2, out, 4, 4)


# --- the multiplex parts against their equations -------------------------------------------------------

def _rope(x: torch.Tensor, cols: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Axial RoPE as complex rotations: pair j of the first half turns by col * w_j, of the second by row * w_j."""
    d = x.shape[-1]
    quarter = d // 4
    w = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) * 4 / d)
    angles = torch.cat([cols[:, None] * w, rows[:, None] * w], -1)  # [N, d / 2]
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape).float()


def _mha(q, k, v, heads, rope_q=None, rope_k=None):
    b, n, c = q.shape
    d = c // heads
    q, k, v = (t.view(b, t.shape[1], heads, d).transpose(1, 2) for t in (q, k, v))
    if rope_q is not None:
        q = rope_q(q)
        k = rope_k(k)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1)
    return (w @ v).transpose(1, 2).reshape(b, n, c)


def test_the_decoupled_memory_layer_is_its_equations():
    grid, dim, heads, frames, pointers = 3, 16, 2, 2, 3
    layer = DecoupledMemoryAttnLayer(dim, heads, 24).eval()
    _randomise(layer, 5)
    g = torch.Generator().manual_seed(6)
    hw = grid * grid
    image, x = torch.randn(1, hw, dim, generator=g), torch.randn(1, hw, dim, generator=g)
    memory = torch.randn(1, frames * hw + pointers, dim, generator=g)
    memory_image = torch.randn(memory.shape, generator=g)
    memory_image_pos = torch.randn(memory.shape, generator=g)
    from comfy_core.models.sam3.backbone import axial_rope

    with torch.no_grad():
        got = layer(image, x, memory_image, memory, memory_image_pos, axial_rope(grid, grid, dim // heads), pointers)
    cells = torch.arange(hw, dtype=torch.float64)
    cols, rows = cells % grid, torch.div(cells, grid, rounding_mode="floor")
    kcols, krows = cols.repeat(frames), rows.repeat(frames)

    def rope_q(t):
        return _rope(t, cols, rows)

    def rope_k_self(t):
        return _rope(t, cols, rows)

    def rope_k_memory(t):  # memory frames rotated by their cell, pointers left alone
        return torch.cat([_rope(t[:, :, :frames * hw], kcols, krows), t[:, :, frames * hw:]], 2)

    L = {n: m for n, m in layer.named_children()}
    with torch.no_grad():
        y = L["norm1"](x)
        x1 = x + L["self_attn_out_proj"](_mha(L["self_attn_q_proj"](y), L["self_attn_k_proj"](y), L["self_attn_v_proj"](y),
                                              heads, rope_q, rope_k_self))
        y = L["norm2"](x1)
        q = L["image_cross_attn_q_proj"](image) + L["cross_attn_q_proj"](y)
        k = L["image_cross_attn_k_proj"](memory_image) + L["cross_attn_k_proj"](memory) + memory_image_pos
        x2 = x1 + L["cross_attn_out_proj"](_mha(q, k, L["cross_attn_v_proj"](memory), heads, rope_q, rope_k_memory))
        want = x2 + L["linear2"](F.gelu(L["linear1"](L["norm3"](x2))))
    assert torch.allclose(got, want, atol=1e-4)


def test_mux_and_demux_place_object_i_in_bucket_i_div_m_slot_i_mod_m():
    state = MultiplexState(5, 4)
    assert (state.count, state.buckets) == (5, 2)
    x = torch.arange(5.0)[:, None] + 1
    muxed = state.mux(x)
    assert muxed.shape == (2, 4, 1)
    for i in range(5):
        assert muxed[i // 4, i % 4, 0] == i + 1
    assert muxed[1, 1:].abs().sum() == 0  # empty slots
    assert torch.equal(state.demux(muxed), x)
    assert state.valid().tolist() == [[True] * 4, [True, False, False, False]]
    state.add(4)
    assert (state.count, state.buckets) == (9, 3)


def test_the_multiplex_decoder_is_its_equations():
    dim, m, g_ = 32, 2, 3
    decoder = MultiplexMaskDecoder(dim, 48, 2, m).eval()
    _randomise(decoder, 7)
    g = torch.Generator().manual_seed(8)
    image, pe = torch.randn(2, dim, g_, g_, generator=g), torch.randn(1, dim, g_, g_, generator=g)
    slot = torch.randn(2, m, dim, generator=g)
    high = [torch.randn(1, dim, 4 * g_, 4 * g_, generator=g), torch.randn(1, dim, 2 * g_, 2 * g_, generator=g)]
    with torch.no_grad():
        masks, iou, token, obj = decoder(image, pe, slot, high)
        # tokens: M object-score, M IoU, then each object's 3 mask tokens plus its slot embedding
        mask_tokens = decoder.mask_tokens.weight.view(m, 3, dim)
        tokens = torch.cat([decoder.obj_score_token.weight, decoder.iou_token.weight]).expand(2, -1, -1)
        tokens = torch.cat([tokens, (mask_tokens[None] + slot[:, :, None]).reshape(2, 3 * m, dim)], 1)
        hs, src = decoder.transformer(image.flatten(2).transpose(1, 2), pe.expand(2, -1, -1, -1).flatten(2).transpose(1, 2),
                                      tokens)
        src = src.transpose(1, 2).reshape(2, dim, g_, g_)
        up = decoder.output_upscaling
        feat = up[2](up[1](up[0](src) + decoder.conv_s1(high[1])))
        feat = up[4](up[3](feat) + decoder.conv_s0(high[0]))
        for b in range(2):
            for o in range(m):
                for c in range(3):
                    t = hs[b, 2 * m + 3 * o + c]
                    want = torch.einsum("c,chw->hw", decoder.output_hypernetworks_mlps[c](t), feat[b])
                    assert torch.allclose(masks[b, o, c], want, atol=1e-4)
                assert torch.allclose(iou[b, o], decoder.iou_prediction_head(hs[b, m + o]), atol=1e-5)
                assert torch.allclose(obj[b, o], decoder.pred_obj_score_head(hs[b, o]), atol=1e-5)
                assert torch.allclose(token[b, o], hs[b, 2 * m + 3 * o], atol=1e-6)
    assert masks.shape == (2, m, 3, 4 * g_, 4 * g_)


def test_the_pointer_distances_are_sine_encoded():
    got = temporal_sine(torch.tensor([0.0, 0.5, 1.0]), 8)
    for r, p in enumerate((0.0, 0.5, 1.0)):
        for i in range(4):
            freq = 10000 ** (2 * (i // 2) / 4)
            assert math.isclose(got[r, i], math.sin(p / freq), abs_tol=1e-6)
            assert math.isclose(got[r, 4 + i], math.cos(p / freq), abs_tol=1e-6)


def _box(h, w, y0, y1, x0, x1):
    m = torch.full((h, w), -5.0)
    m[y0:y1, x0:x1] = 5.0
    return m


def test_overlap_nms_and_the_cleaning_of_masks():
    a, b, small = _box(10, 10, 0, 4, 0, 4), _box(10, 10, 0, 4, 0, 2), _box(10, 10, 8, 10, 8, 10)
    ov = mask_overlap(torch.stack([a, b]), torch.stack([a, small]))
    assert ov[0, 0] == 1 and ov[1, 0] == 1  # b inside a: intersection over the smaller area
    assert ov[0, 1] == 0
    kept, scores = nms_masks(torch.stack([b, a, small]), torch.tensor([0.6, 0.9, 0.7]))
    assert scores.tolist() == pytest.approx([0.9, 0.7]) and torch.equal(kept[0], a)
    # a 2x2 hole filled (<= 4 cells), a 1-cell sprinkle removed, the big component kept
    m = _box(12, 12, 1, 9, 1, 9)
    m[4:6, 4:6] = -5.0
    m[11, 11] = 5.0
    cleaned = fill_holes(m[None, None], 4)[0, 0]
    assert (cleaned[4:6, 4:6] == 0.1).all() and cleaned[11, 11] == -0.1 and (cleaned[1:9, 1:9] > 0).all()
    assert torch.equal(fill_holes(m[None, None], 0), m[None, None])
    # diagonal neighbours are one component (8-connectivity): a 2-cell diagonal sprinkle survives a limit of 1
    d = torch.full((1, 1, 12, 12), -5.0)
    d[0, 0, :6, :6] = 5.0
    d[0, 0, 9, 9] = d[0, 0, 10, 10] = 5.0
    assert (fill_holes(d, 1)[0, 0, 9:11, 9:11].diagonal() > 0).all()


def test_non_overlap_and_the_suppression_of_recently_occluded_tracks():
    big, inner = _box(10, 10, 0, 6, 0, 6), _box(10, 10, 0, 2, 0, 2) * 0.5  # inner weaker than big everywhere
    out = non_overlap_constraint(torch.stack([big, inner])[:, None])
    assert torch.equal(out[0, 0], big) and (out[1] <= -10).all()  # inner keeps 0 % of its area
    far = _box(10, 10, 8, 10, 8, 10)
    assert torch.equal(non_overlap_constraint(torch.stack([big, far])[:, None]), torch.stack([big, far])[:, None])
    masks = torch.stack([big, _box(10, 10, 0, 5, 0, 5), far])[:, None]
    last = torch.tensor([3, 7, -1])
    out = suppress_recently_occluded(masks, last, 9)
    assert (out[1] == -10).all() and torch.equal(out[0], masks[0]) and torch.equal(out[2], masks[2])
    assert last.tolist() == [3, 9, -1]
    last = torch.tensor([-1, 7, -1])  # never occluded: nothing to compare with
    assert torch.equal(suppress_recently_occluded(masks, last, 9), masks)


# --- propagation --------------------------------------------------------------------------------------

def _square(size: int, y0: int, y1: int, x0: int, x1: int) -> torch.Tensor:
    m = torch.zeros(size, size)
    m[y0:y1, x0:x1] = 1.0
    return m


def test_initial_masks_are_frame_zero_and_the_memory_bank_grows_frame_by_frame(network, monkeypatch):
    seen = []
    encoder = network.tracker.transformer.encoder
    original = type(encoder).forward

    def spy(self, x, memory, memory_pos, src_pos, memory_image, memory_image_pos, exclude=0):
        seen.append((x.shape[0], memory.shape[1], memory_image.shape[1], exclude))
        return original(self, x, memory, memory_pos, src_pos, memory_image, memory_image_pos, exclude)

    monkeypatch.setattr(type(encoder), "forward", spy)
    frames = torch.rand(4, 3, S, S, generator=torch.Generator().manual_seed(0))
    masks = torch.stack([_square(72, 4, 20, 4, 20), _square(72, 40, 60, 30, 50)]).unsqueeze(1)
    with torch.inference_mode():
        out = network.forward_video(frames, masks, pack_masks)
    packed = out["packed_masks"]
    assert packed.shape == (4, 2, S, S // 8) and packed.dtype == torch.uint8
    assert out["n_frames"] == 4 and out["scores"] == [1.0, 1.0]
    first = unpack_masks(packed[0])
    want = F.interpolate(masks, size=(S, S), mode="bilinear", align_corners=False)[:, 0] > 0.5
    assert torch.equal(first, want)  # the conditioning frame outputs its masks
    hw = 72 * 72
    # frame t attends to the conditioning frame, frames 1..t-1, and their pointers (M = 4 slots each)
    assert seen == [(1, hw * t + 4 * t, hw * t, 4 * t) for t in (1, 2, 3)]


def test_detection_cadence_new_objects_and_the_object_limit(network, monkeypatch):
    calls: list[int] = []
    counter = {"frame": -1}
    square_a, square_b = _square(288, 10, 80, 10, 80) * 20 - 10, _square(288, 150, 260, 150, 260) * 20 - 10
    schedule = {0: [(square_a, 0.9)], 2: [(square_b, 0.7)]}
    original_features = MultiplexTracker.features

    def features(self, frame):
        counter["frame"] += 1
        return original_features(self, frame)

    def detect(self, feats, prompts, threshold):
        t = counter["frame"]
        calls.append(t)
        found = schedule.get(t, [])
        if not found:
            return torch.empty(0, 288, 288), torch.empty(0)
        return torch.stack([m for m, _ in found]), torch.tensor([p for _, p in found])

    monkeypatch.setattr(MultiplexTracker, "features", features)
    monkeypatch.setattr(MultiplexTracker, "detect", detect)
    prompt = [(torch.zeros(1, 3, VIT_DIM), torch.ones(1, 3, dtype=torch.int64))]
    frames = torch.rand(5, 3, S, S, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        out = network.forward_video(frames, None, pack_masks, prompt, 0.5, 0, 2)
    assert calls == [0, 2, 4]  # every detect_interval-th frame
    packed = out["packed_masks"]
    assert packed.shape[:2] == (5, 2) and out["scores"] == pytest.approx([0.9, 0.7])
    masks = unpack_masks(packed)
    big_a = F.interpolate(square_a[None, None], size=(S, S), mode="bilinear", align_corners=False)[0, 0] > 0
    assert torch.equal(masks[0, 0], big_a)  # first detection conditions the tracker: its mask out
    assert not masks[:2, 1].any()  # object 1 appears on frame 2: nothing before
    big_b = F.interpolate(square_b[None, None], size=(S, S), mode="bilinear", align_corners=False)[0, 0] > 0
    assert torch.equal(masks[2, 1], big_b)

    # at the limit, detection stops; a first detection is cut to the limit
    calls.clear()
    counter["frame"] = -1
    schedule = {0: [(square_a, 0.9), (square_b, 0.8)]}
    with torch.inference_mode():
        out = network.forward_video(frames[:3], None, pack_masks, prompt, 0.5, 1, 1)
    assert calls == [0] and out["packed_masks"].shape[1] == 1 and out["scores"] == pytest.approx([0.9])

    # nothing found on any frame: no masks
    calls.clear()
    counter["frame"] = -1
    schedule = {}
    with torch.inference_mode():
        out = network.forward_video(frames[:2], None, pack_masks, prompt, 0.5, 0, 1)
    assert out == {"packed_masks": None, "n_frames": 2, "scores": []} and calls == [0, 1]


def test_unmatched_tracks_lose_keep_alive_and_are_output_empty(network, monkeypatch):
    """Initial masks start at keep-alive 8: five detection frames that match nothing bring it to 3,
    still shown; a track that starts at 1 (detected) and is missed once is dropped from the output."""
    square = _square(288, 10, 80, 10, 80) * 20 - 10
    state = {"frame": -1}
    original_features = MultiplexTracker.features

    def features(self, frame):
        state["frame"] += 1
        return original_features(self, frame)

    def detect(self, feats, prompts, threshold):
        if state["frame"] == 0:
            return square[None], torch.tensor([0.6])
        return torch.empty(0, 288, 288), torch.empty(0)

    monkeypatch.setattr(MultiplexTracker, "features", features)
    monkeypatch.setattr(MultiplexTracker, "detect", detect)
    frames = torch.rand(2, 3, S, S, generator=torch.Generator().manual_seed(2))
    prompt = [(torch.zeros(1, 3, VIT_DIM), None)]
    with torch.inference_mode():
        out = network.forward_video(frames, None, pack_masks, prompt, 0.5, 0, 1)
    masks = unpack_masks(out["packed_masks"])
    assert masks[0, 0].any() and not masks[1, 0].any()  # keep-alive 1 -> 0 on frame 1: empty


def test_the_multiplexed_memory_is_masks_then_conditioning_planes_plus_absent_slots(network):
    """SAM 3.1's mask-memory fusion: one encoder pass per bucket over 2M planes (each slot's
    sigmoid(mask) x 2 - 1, then its conditioning flag), plus `no_obj_embed_spatial` of every slot
    holding no visible object (absent objects and empty slots)."""
    run = MultiplexTracker(network, 2)
    g = torch.Generator().manual_seed(9)
    pix = torch.randn(1, 32, 72, 72, generator=g)
    feats = tracker_module.FrameFeatures(torch.empty(0), [pix], pix.flatten(2).transpose(1, 2), pix.flatten(2).transpose(1, 2))
    masks = torch.randn(3, 1, 64, 64, generator=g) * 4
    scores = torch.tensor([[2.0], [-1.0], [0.5]])
    state = MultiplexState(3, 4)
    conditioning = torch.tensor([True, False, True])
    with torch.no_grad():
        memory, pos = run.encode_memory(feats, masks, scores, state, conditioning)
        planes = torch.zeros(1, 8, 64, 64)
        planes[0, :3] = torch.sigmoid(masks[:, 0]) * 2 - 1
        planes[0, 4:7] = conditioning.float()[:, None, None]
        want, want_pos = network.tracker.maskmem_backbone(pix, planes)
        embed = network.tracker.no_obj_embed_spatial
        want = want + (embed[1] + embed[3])[None, :, None, None]  # object 1 absent, slot 3 empty
    assert memory.shape == (1, 32, 72, 72) and torch.allclose(memory, want, atol=1e-5)
    assert torch.equal(pos, want_pos)


def test_the_memory_bank_keeps_the_conditioning_frame_the_last_six_and_fifteen_pointer_frames(monkeypatch):
    network = Sam3Model(tiny_config()).eval()
    with torch.no_grad():
        network.tracker.maskmem_tpos_enc.copy_(torch.arange(7.0).view(7, 1, 1, 1).expand(7, 1, 1, 32))
    run = MultiplexTracker(network, 21)
    state = MultiplexState(1, 4)
    hw = 72 * 72

    def output(frame: int) -> tracker_module.FrameOutput:
        zeros = torch.zeros(1, hw, 32)
        out = tracker_module.FrameOutput(torch.zeros(1, 1, 288, 288), torch.zeros(1, 1, S, S),
                                         torch.full((1, 4, 32), float(frame)), torch.ones(1, 1), zeros, zeros)
        out.memory, out.memory_pos = torch.zeros(1, 32, 72, 72), torch.zeros(1, 32, 72, 72)
        return out

    run.cond[0] = output(0)
    for t in range(1, 20):
        run.recent[t] = output(t)
    seen = {}

    def spy(self, x, memory, memory_pos, src_pos, memory_image, memory_image_pos, exclude=0):
        seen.update(memory=memory, memory_pos=memory_pos, exclude=exclude)
        return x

    monkeypatch.setattr(type(network.tracker.transformer.encoder), "forward", spy)
    feats = tracker_module.FrameFeatures(torch.empty(0), [torch.zeros(1, 32, 72, 72)], torch.zeros(1, hw, 32),
                                         torch.zeros(1, hw, 32))
    with torch.no_grad():
        run.conditioned_features(20, feats, state)
    spatial = seen["memory_pos"][0, :7 * hw, 0].view(7, hw)
    # the conditioning frame (20 frames back: the last temporal index), then frames 14..19 (indices 5..0)
    assert spatial[:, 0].tolist() == [6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0] and (spatial == spatial[:, :1]).all()
    pointers = seen["memory"][0, 7 * hw:, 0].view(-1, 4)[:, 0]
    assert pointers.tolist() == [0.0] + [float(t) for t in range(19, 4, -1)]  # conditioning, then 1..15 frames back
    assert seen["exclude"] == 16 * 4
