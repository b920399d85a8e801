"""A node pack for the ComfyUI side of bench/pack_parity.py only: makes ComfyUI 0.3.64 accept the
tiny random checkpoints of tests/fixtures/checkpoints.py (the widths differ from real SD models;
the code paths do not). ComfyUI detects a family by comparing the UNet's widths with fixed
configs, and builds its VAE and CLIP from fixed widths, so the tiny widths are put there; its
CLIP vision loader picks a fixed config by layer count, so a 3-layer tower (the 224-px one
bench/pack_parity.py writes for IPAdapter_plus) gets a config of its own widths. Flux.1 and SD3
files (tests/fixtures/dit_checkpoints.py) get their widths from their weights (see below). It
registers no nodes.
"""
import json
import os
import tempfile

import comfy.clip_vision
import comfy.sd
import comfy.sd1_clip
import comfy.supported_models

comfy.supported_models.SD15.unet_config.update(model_channels=32, context_dim=64)
comfy.supported_models.SDXL.unet_config.update(model_channels=64, transformer_depth=[0, 0, 1, 1, 2, 2],
                                               context_dim=128, adm_in_channels=1600)

_autoencoder = comfy.sd.AutoencoderKL


def _tiny_autoencoder(ddconfig, embed_dim, **kwargs):
    return _autoencoder(ddconfig=dict(ddconfig, ch=32, ch_mult=[1, 2, 2, 2], num_res_blocks=1), embed_dim=embed_dim,
                        **kwargs)


comfy.sd.AutoencoderKL = _tiny_autoencoder
_clip_init = comfy.sd1_clip.SDClipModel.__init__


def _tiny_clip_init(self, *args, textmodel_json_config=None, **kwargs):
    if textmodel_json_config is None:
        textmodel_json_config = os.path.join(os.path.dirname(comfy.sd1_clip.__file__), "sd1_clip_config.json")
        options = kwargs.get("model_options", {})
        if "model_name" not in options:
            kwargs["model_options"] = {**options, "model_name": "clip_l"}
    config = textmodel_json_config if isinstance(textmodel_json_config, dict) else json.load(open(textmodel_json_config))
    config = dict(config, hidden_size=64, intermediate_size=256, num_attention_heads=1, num_hidden_layers=3,
                  projection_dim=64)
    _clip_init(self, *args, textmodel_json_config=config, **kwargs)


comfy.sd1_clip.SDClipModel.__init__ = _tiny_clip_init
NODE_CLASS_MAPPINGS = {}


_load_clipvision_from_sd = comfy.clip_vision.load_clipvision_from_sd


def _tiny_clipvision_from_sd(sd, prefix="", convert_keys=False):
    tiny = ("vision_model.encoder.layers.2.layer_norm1.weight" in sd
            and "vision_model.encoder.layers.3.layer_norm1.weight" not in sd)
    if not tiny:
        return _load_clipvision_from_sd(sd, prefix, convert_keys)
    base = json.load(open(os.path.join(os.path.dirname(comfy.clip_vision.__file__), "clip_vision_config_h.json")))
    width = sd["vision_model.encoder.layers.0.layer_norm1.weight"].shape[0]
    patch = sd["vision_model.embeddings.patch_embedding.weight"].shape[-1]
    positions = sd["vision_model.embeddings.position_embedding.weight"].shape[0]
    config = dict(base, hidden_size=width, intermediate_size=4 * width, num_hidden_layers=3,
                  projection_dim=sd["visual_projection.weight"].shape[0], patch_size=patch,
                  image_size=patch * round((positions - 1) ** 0.5))
    path = os.path.join(tempfile.mkdtemp(), "tiny_clip_vision.json")
    with open(path, "w") as f:
        json.dump(config, f)
    model = comfy.clip_vision.ClipVisionModel(path)
    model.load_sd(sd)
    return model


comfy.clip_vision.load_clipvision_from_sd = _tiny_clipvision_from_sd


# --- Flux.1 and SD3/SD3.5 (tests/fixtures/dit_checkpoints.py's tiny widths) --------------------
# ComfyUI builds these models' text encoders before it loads their weights, from json configs of
# the real widths (CLIP-L 768, bigG 1280, T5-XXL 4096); it fixes Flux's hidden width, heads and
# context width in model_detection; it pads SD3's CLIP-L+G context to T5-XXL's 4096 channels; and
# it builds a 16-channel VAE without quant convs at 128 channels. So: the state dicts a load
# starts from are looked at first (shapes only), and every such constant becomes the width the
# weights have. Towers the weights do not show (open_clip, real widths) keep the fixed tiny
# config above.
import functools

import torch

import comfy.model_detection
import comfy.text_encoders.sd3_clip
import comfy.text_encoders.t5

_loading = []  # per load in progress: {"clip": [tower facts], "t5": [tower facts]}
_CLIP_LAYER0 = "text_model.encoder.layers.0.layer_norm1.weight"
_T5_BIAS = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"


def _count(keys, prefix):
    numbers = set()
    for key in keys:
        if key.startswith(prefix):
            head = key[len(prefix):].split(".", 1)[0]
            if head.isdigit():
                numbers.add(int(head))
    return len(numbers)


def _towers(state_dicts):
    """transformers-layout CLIP text towers and T5 encoders in `state_dicts`: their widths."""
    found = {"clip": [], "t5": []}
    for sd in state_dicts:
        if not isinstance(sd, dict):
            continue
        keys = list(sd.keys())
        for key in keys:
            if key.endswith(_CLIP_LAYER0):
                p = key[:-len(_CLIP_LAYER0)]
                width = sd[key].shape[0]
                projection = sd.get(p + "text_projection.weight")
                found["clip"].append({
                    "hidden_size": width,
                    "intermediate_size": sd[p + "text_model.encoder.layers.0.mlp.fc1.weight"].shape[0],
                    "num_hidden_layers": _count(keys, p + "text_model.encoder.layers."),
                    "num_attention_heads": width // 64 if width % 64 == 0 else 1,
                    "projection_dim": projection.shape[0] if projection is not None else width})
            elif key.endswith(_T5_BIAS):
                p = key[:-len(_T5_BIAS)]
                heads = sd[key].shape[1]
                found["t5"].append({
                    "d_model": sd[p + "shared.weight"].shape[1], "num_heads": heads,
                    "d_kv": sd[p + "encoder.block.0.layer.0.SelfAttention.q.weight"].shape[0] // heads,
                    "d_ff": sd[p + "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"].shape[0],
                    "num_layers": _count(keys, p + "encoder.block."),
                    "vocab_size": sd[p + "shared.weight"].shape[0]})
    return found


def _recording(function, state_dicts):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _loading.append(_towers(state_dicts(*args, **kwargs)))
        try:
            return function(*args, **kwargs)
        finally:
            _loading.pop()
    return wrapper


comfy.sd.load_state_dict_guess_config = _recording(comfy.sd.load_state_dict_guess_config,
                                                   lambda sd, *a, **k: [sd])
comfy.sd.load_text_encoder_state_dicts = _recording(
    comfy.sd.load_text_encoder_state_dicts, lambda *a, **k: list(k.get("state_dicts", a[0] if a else [])))


def _tower_from_weights(name):
    """The CLIP tower facts for `name` ("clip_l" / "clip_g") in the load in progress, or None.
    Several towers: CLIP-L is the shallowest, CLIP-G the deepest (ComfyUI tells a split CLIP-G
    file by its depth too); one tower is CLIP-L only."""
    towers = _loading[-1]["clip"] if _loading else []
    if name == "clip_l" and towers:
        return min(towers, key=lambda t: t["num_hidden_layers"])
    if name == "clip_g" and len(towers) >= 2:
        return max(towers, key=lambda t: t["num_hidden_layers"])
    return None


def _dit_clip_init(self, *args, textmodel_json_config=None, model_class=None, **kwargs):
    """T5 and CLIP towers of a DiT load at the widths their weights have; others as before."""
    name = kwargs.get("model_options", {}).get("model_name", "clip_l" if textmodel_json_config is None else None)
    if model_class is comfy.text_encoders.t5.T5:
        t5 = _loading[-1]["t5"] if _loading else []
        config = json.load(open(textmodel_json_config))
        if t5:
            config.update(t5[0])
        return _clip_init(self, *args, textmodel_json_config=config, model_class=model_class, **kwargs)
    if model_class is not None:
        kwargs["model_class"] = model_class
    tower = _tower_from_weights(name)
    if tower is None or (tower["hidden_size"], tower["num_hidden_layers"]) == (64, 3):  # the SD1/SDXL tiny CLIP
        return _tiny_clip_init(self, *args, textmodel_json_config=textmodel_json_config, **kwargs)
    if textmodel_json_config is None:
        textmodel_json_config = os.path.join(os.path.dirname(comfy.sd1_clip.__file__), "sd1_clip_config.json")
        options = kwargs.get("model_options", {})
        kwargs["model_options"] = {**options, "model_name": options.get("model_name", "clip_l")}
    config = textmodel_json_config if isinstance(textmodel_json_config, dict) else json.load(open(textmodel_json_config))
    layer_idx = kwargs.get("layer_idx")
    if kwargs.get("layer") == "hidden" and layer_idx is not None and abs(layer_idx) >= tower["num_hidden_layers"]:
        # ComfyUI asserts |layer_idx| < depth; SD3's CLIP-L asks for layer -2, which a 2-layer
        # tower has (layer 0): built as "last", then set as ComfyUI's set_clip_options would.
        _clip_init(self, *args, textmodel_json_config=dict(config, **tower), **dict(kwargs, layer="last", layer_idx=None))
        self.layer, self.layer_idx = "hidden", layer_idx
        self.options_default = (self.layer, self.layer_idx, self.return_projected_pooled)
        return None
    return _clip_init(self, *args, textmodel_json_config=dict(config, **tower), **kwargs)


comfy.sd1_clip.SDClipModel.__init__ = _dit_clip_init

_detect_unet_config = comfy.model_detection.detect_unet_config


def _dit_detect_unet_config(state_dict, key_prefix, *args, **kwargs):
    """Flux: hidden width, heads (a head is `query_norm.scale` wide), MLP ratio, context width
    and RoPE axes from the weights (Flux.1's axes split scaled to the head: 7/16 per spatial axis)."""
    config = _detect_unet_config(state_dict, key_prefix, *args, **kwargs)
    if config is None or config.get("image_model") != "flux":
        return config
    hidden = state_dict[f"{key_prefix}img_in.weight"].shape[0]
    head = state_dict[f"{key_prefix}double_blocks.0.img_attn.norm.query_norm.scale"].shape[0]
    spatial = (head * 7 // 16) // 2 * 2
    config.update(hidden_size=hidden, num_heads=hidden // head, axes_dim=[head - 2 * spatial, spatial, spatial],
                  context_in_dim=state_dict[f"{key_prefix}txt_in.weight"].shape[1],
                  mlp_ratio=state_dict[f"{key_prefix}double_blocks.0.img_mlp.0.weight"].shape[0] / hidden)
    return config


comfy.model_detection.detect_unet_config = _dit_detect_unet_config

_sd3_encode = comfy.text_encoders.sd3_clip.SD3ClipModel.encode_token_weights


def _sd3_encode_tiny(self, token_weight_pairs):
    """SD3's context: CLIP-L+G padded to the T5 width (ComfyUI pads to 4096): T5's output is
    padded to 4096 for ComfyUI's concatenation and the context cut back to the T5 width."""
    t5 = self.t5xxl
    width = t5.transformer.shared.weight.shape[1] if t5 is not None else 64  # no T5: dit_checkpoints.T5_WIDTH
    if width == 4096:
        return _sd3_encode(self, token_weight_pairs)
    if t5 is not None:
        plain = t5.encode_token_weights

        def padded(pairs):
            out = plain(pairs)
            return (torch.nn.functional.pad(out[0], (0, 4096 - out[0].shape[-1])),) + tuple(out[1:])
        t5.encode_token_weights = padded
    try:
        out = _sd3_encode(self, token_weight_pairs)
    finally:
        if t5 is not None:
            del t5.encode_token_weights
    return (out[0][..., :width],) + tuple(out[1:])


comfy.text_encoders.sd3_clip.SD3ClipModel.encode_token_weights = _sd3_encode_tiny

_vae_loading = []  # the VAE state dicts being loaded
_vae_init = comfy.sd.VAE.__init__


@functools.wraps(_vae_init)
def _recording_vae_init(self, sd=None, *args, **kwargs):
    _vae_loading.append(sd or {})
    try:
        _vae_init(self, sd, *args, **kwargs)
    finally:
        _vae_loading.pop()


comfy.sd.VAE.__init__ = _recording_vae_init
_engine = comfy.sd.AutoencodingEngine


def _tiny_engine(*args, encoder_config=None, decoder_config=None, **kwargs):
    """A 16-channel VAE without quant convs (SD3 / Flux): `ch`, `ch_mult` and `num_res_blocks`
    from the encoder's weights (ComfyUI builds it at 128 x [1, 2, 4, 4], 2 blocks)."""
    sd = _vae_loading[-1] if _vae_loading else {}
    target = "comfy.ldm.modules.diffusionmodules.model."
    if encoder_config and encoder_config.get("target") == target + "Encoder" and "encoder.conv_in.weight" in sd:
        ch = sd["encoder.conv_in.weight"].shape[0]
        levels = _count(sd, "encoder.down.")
        params = dict(encoder_config["params"], ch=ch, num_res_blocks=_count(sd, "encoder.down.0.block."),
                      ch_mult=[sd[f"encoder.down.{i}.block.0.conv2.weight"].shape[0] // ch for i in range(levels)])
        encoder_config = dict(encoder_config, params=params)
        decoder_config = dict(decoder_config, params=params)
    return _engine(*args, encoder_config=encoder_config, decoder_config=decoder_config, **kwargs)


comfy.sd.AutoencodingEngine = _tiny_engine
