"""A node pack for the ComfyUI side of bench/pack_parity.py only: makes ComfyUI 0.3.64 accept the
tiny random checkpoints of tests/fixtures/checkpoints.py (the widths differ from real SD models;
the code paths do not). ComfyUI detects a family by comparing the UNet's widths with fixed
configs, and builds its VAE and CLIP from fixed widths, so the tiny widths are put there; its
CLIP vision loader picks a fixed config by layer count, so a 3-layer tower (the 224-px one
bench/pack_parity.py writes for IPAdapter_plus) gets a config of its own widths. Flux.1 and SD3
files (tests/fixtures/dit_checkpoints.py) get their widths from their weights (see below), and
so do Qwen-Image, HiDream-I1 and Lumina 2 with their LLM text encoders (Qwen2.5-VL, Llama 3.1,
Gemma 2; the last sections, with the Llama 3 tokenizer this checkout lacks and a later vision-
tower fix). It registers no nodes.
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
                    "d_ff": sd.get(p + "encoder.block.0.layer.1.DenseReluDense.wi_0.weight",  # T5 v1.1
                                   sd.get(p + "encoder.block.0.layer.1.DenseReluDense.wi.weight")).shape[0],
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


# --- Qwen-Image, HiDream-I1, Lumina 2 (image families with LLM text encoders) -----------------
# ComfyUI 0.3.64 builds their LLM towers (Qwen2.5-VL 7B and its 1280-wide vision tower, Llama 3.1
# 8B, Gemma 2 2B) from fixed dataclass widths and their DiTs from fixed configs (Qwen-Image 24
# heads of 128 over 3584-wide text; HiDream 20 heads, 16 + 32 blocks, 4096-wide texts; Lumina 2
# 2304 wide, 24 / 8 heads), the Wan 2.1 VAE at base width 96, and tells a Qwen2.5-VL 7B file by
# its 4 key/value heads and a T5-XXL by its 24th block. The tiny files (tests/fixtures'
# qwen25vl / llama / gemma / t5 towers, qwen_image / hidream / lumina2 DiTs, wan_vae) keep the
# real head widths, so every such constant becomes the width their weights show.
import comfy.ldm.wan.vae
import comfy.text_encoders.hidream
import comfy.text_encoders.hunyuan_video
import comfy.text_encoders.llama
import comfy.text_encoders.qwen_vl

_LLM_EMBED = "model.embed_tokens.weight"
_LLM_CLASSES = (comfy.text_encoders.llama.Llama2, comfy.text_encoders.llama.Qwen25_7BVLI,
                comfy.text_encoders.llama.Gemma2_2B)
_LLM_HEAD = {comfy.text_encoders.llama.Llama2: 128, comfy.text_encoders.llama.Qwen25_7BVLI: 128,
             comfy.text_encoders.llama.Gemma2_2B: 256}  # the configs' fixed head widths


def _llm_towers(state_dicts):
    """Decoder LLM towers (`model.layers.N...`) and Qwen2.5-VL vision towers (`visual.`) in `state_dicts`."""
    llm, visual = [], []
    for sd in state_dicts:
        if not isinstance(sd, dict):
            continue
        if _LLM_EMBED in sd and "model.layers.0.self_attn.q_proj.weight" in sd:
            keys = list(sd.keys())
            llm.append({"hidden_size": sd[_LLM_EMBED].shape[1], "vocab_size": sd[_LLM_EMBED].shape[0],
                        "intermediate_size": sd["model.layers.0.mlp.gate_proj.weight"].shape[0],
                        "num_hidden_layers": _count(keys, "model.layers."),
                        "q_rows": sd["model.layers.0.self_attn.q_proj.weight"].shape[0],
                        "kv_rows": sd["model.layers.0.self_attn.k_proj.weight"].shape[0]})
        if "visual.patch_embed.proj.weight" in sd:
            visual.append({"hidden_size": sd["visual.patch_embed.proj.weight"].shape[0],
                           "intermediate_size": sd["visual.blocks.0.mlp.gate_proj.weight"].shape[0],
                           "num_layers": _count(list(sd.keys()), "visual.blocks.")})
    return llm, visual


_towers_plain = _towers


def _towers_with_llms(state_dicts):
    state_dicts = list(state_dicts)
    found = _towers_plain(state_dicts)
    found["llm"], found["visual"] = _llm_towers(state_dicts)
    return found


_towers = _towers_with_llms  # read through the module global by _recording's wrapper


def _loaded(kind):
    return _loading[-1].get(kind, []) if _loading else []


_clip_init_before_llms = comfy.sd1_clip.SDClipModel.__init__


def _llm_clip_init(self, *args, textmodel_json_config=None, model_class=None, **kwargs):
    """An LLM tower at the widths of the weights being loaded (heads from the fixed head width)."""
    llm = _loaded("llm")
    if model_class in _LLM_CLASSES and llm:
        head = _LLM_HEAD[model_class]
        tower = llm[0]
        config = dict(textmodel_json_config or {}, hidden_size=tower["hidden_size"], vocab_size=tower["vocab_size"],
                      intermediate_size=tower["intermediate_size"], num_hidden_layers=tower["num_hidden_layers"],
                      num_attention_heads=tower["q_rows"] // head, num_key_value_heads=tower["kv_rows"] // head)
        return _clip_init(self, *args, textmodel_json_config=config, model_class=model_class, **kwargs)
    if model_class is not None:
        kwargs["model_class"] = model_class
    return _clip_init_before_llms(self, *args, textmodel_json_config=textmodel_json_config, **kwargs)


comfy.sd1_clip.SDClipModel.__init__ = _llm_clip_init

_vision_init = comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer.__init__


def _tiny_vision_init(self, *args, **kwargs):
    visual = _loaded("visual")
    if visual:
        kwargs.update(visual[0])
    _vision_init(self, *args, **kwargs)


comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer.__init__ = _tiny_vision_init

_detect_te_model = comfy.sd.detect_te_model


def _tiny_detect_te_model(sd):
    """A Qwen2.5-VL file with its vision tower is Qwen2.5-VL 7B whatever its key/value width."""
    found = _detect_te_model(sd)
    if "model.layers.0.self_attn.k_proj.bias" in sd and "visual.patch_embed.proj.weight" in sd:
        return comfy.sd.TEModel.QWEN25_7B
    return found


comfy.sd.detect_te_model = _tiny_detect_te_model

_hidream_load_sd = comfy.text_encoders.hidream.HiDreamTEModel.load_sd


def _tiny_hidream_load_sd(self, sd):
    """A T5 encoder shallower than 24 blocks goes to the T5 tower (ComfyUI looks for block 23)."""
    if "encoder.block.0.layer.0.SelfAttention.q.weight" in sd and self.t5xxl is not None:
        return self.t5xxl.load_sd(sd)
    return _hidream_load_sd(self, sd)


comfy.text_encoders.hidream.HiDreamTEModel.load_sd = _tiny_hidream_load_sd

_wan_vae_init = comfy.ldm.wan.vae.WanVAE.__init__


def _tiny_wan_vae_init(self, dim=128, *args, **kwargs):
    sd = _vae_loading[-1] if _vae_loading else {}
    if "encoder.conv1.weight" in sd:
        dim = sd["encoder.conv1.weight"].shape[0]
    _wan_vae_init(self, dim, *args, **kwargs)


comfy.ldm.wan.vae.WanVAE.__init__ = _tiny_wan_vae_init

_detect_before_llms = comfy.model_detection.detect_unet_config


def _llm_dit_detect_unet_config(state_dict, key_prefix, *args, **kwargs):
    """Qwen-Image, HiDream and Lumina 2 at the widths of their weights (see above). RoPE axes:
    Qwen-Image's 16 / 56 / 56 and HiDream's 64 / 32 / 32 scaled to the head, Lumina 2's thirds;
    HiDream block i reads Llama state min(i, 31) as ComfyUI's list does."""
    config = _detect_before_llms(state_dict, key_prefix, *args, **kwargs)
    model = (config or {}).get("image_model")
    p = key_prefix
    if model == "qwen_image":
        head = state_dict[f"{p}transformer_blocks.0.attn.norm_q.weight"].shape[0]
        hidden = state_dict[f"{p}img_in.weight"].shape[0]
        config.update(attention_head_dim=head, num_attention_heads=hidden // head,
                      joint_attention_dim=state_dict[f"{p}txt_in.weight"].shape[1],
                      axes_dims_rope=(head // 8, head * 7 // 16, head * 7 // 16))
    elif model == "hidream":
        keys = list(state_dict.keys())
        double, single = _count(keys, f"{p}double_stream_blocks."), _count(keys, f"{p}single_stream_blocks.")
        hidden = state_dict[f"{p}x_embedder.proj.weight"].shape[0]
        config.update(num_layers=double, num_single_layers=single, num_attention_heads=hidden // 128,
                      caption_channels=[  # T5's projection follows one per block for Llama's states
                          state_dict[f"{p}caption_projection.{double + single}.linear.weight"].shape[1],
                          state_dict[f"{p}caption_projection.0.linear.weight"].shape[1]],
                      text_emb_dim=state_dict[f"{p}p_embedder.pooled_embedder.linear_1.weight"].shape[1],
                      num_routed_experts=_count(keys, f"{p}double_stream_blocks.0.block.ff_i.experts."),
                      llama_layers=[min(i, 31) for i in range(double + single)])
    elif model == "lumina2":
        dim = state_dict[f"{p}x_embedder.weight"].shape[0]
        head = state_dict[f"{p}layers.0.attention.q_norm.weight"].shape[0]
        qkv = state_dict[f"{p}layers.0.attention.qkv.weight"].shape[0] // head
        ffn = state_dict[f"{p}layers.0.feed_forward.w1.weight"].shape[0]
        config.update(dim=dim, n_heads=dim // head, n_kv_heads=(qkv - dim // head) // 2,
                      n_refiner_layers=_count(list(state_dict.keys()), f"{p}noise_refiner."),
                      axes_dims=[head // 3] * 3, multiple_of=1, ffn_dim_multiplier=ffn / (4 * dim),
                      in_channels=state_dict[f"{p}x_embedder.weight"].shape[1] // 4)
    return config


comfy.model_detection.detect_unet_config = _llm_dit_detect_unet_config

# Llama 3's tokenizer: this ComfyUI checkout's comfy/text_encoders/llama_tokenizer/ holds only
# tokenizer_config.json (tokenizer.json, 9 MB, is not in it), and ComfyUI 0.3.64 reads the folder
# with LlamaTokenizerFast, which transformers 5 rebuilds as a SentencePiece-style tokenizer (wrong
# ids for Llama 3's byte-level BPE). So the folder is read with PreTrainedTokenizerFast, and a
# missing tokenizer.json is made from Meta's tokenizer.model (the `llama-models` package): byte-
# level BPE over Llama 3's split expression, ComfyUI's 259 added tokens from its config, and
# <|begin_of_text|> before each text, as Llama 3's own tokenizer.json has it.
_LLAMA_DIR = os.path.join(os.path.dirname(os.path.realpath(comfy.text_encoders.hunyuan_video.__file__)),
                          "llama_tokenizer")
_LLAMA_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_llama_built = []


def _llama_tokenizer_dir():
    if os.path.exists(os.path.join(_LLAMA_DIR, "tokenizer.json")):
        return _LLAMA_DIR
    if not _llama_built:
        import importlib.util
        import shutil

        from tokenizers import AddedToken, processors
        from transformers.convert_slow_tokenizer import TikTokenConverter

        config_path = os.path.join(_LLAMA_DIR, "tokenizer_config.json")
        added = sorted((int(k), v["content"]) for k, v in json.load(open(config_path))["added_tokens_decoder"].items())
        spec = importlib.util.find_spec("llama_models")
        model = os.path.join(list(spec.submodule_search_locations)[0], "llama3", "tokenizer.model")
        tokenizer = TikTokenConverter(vocab_file=model, pattern=_LLAMA_SPLIT).converted()
        first = tokenizer.get_vocab_size()
        assert [i for i, _ in added] == list(range(first, first + len(added))), "added ids must follow the ranks"
        tokenizer.add_special_tokens([AddedToken(content, special=True, normalized=False) for _, content in added])
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", added[0][0])])
        folder = tempfile.mkdtemp(prefix="llama3_tokenizer_")
        tokenizer.save(os.path.join(folder, "tokenizer.json"))
        shutil.copy(config_path, folder)
        _llama_built.append(folder)
    return _llama_built[0]


_sd_tokenizer_init = comfy.sd1_clip.SDTokenizer.__init__


def _tokenizer_init(self, tokenizer_path=None, *args, **kwargs):
    if tokenizer_path is not None and os.path.realpath(str(tokenizer_path)) == os.path.realpath(_LLAMA_DIR):
        from transformers import PreTrainedTokenizerFast

        tokenizer_path, kwargs["tokenizer_class"] = _llama_tokenizer_dir(), PreTrainedTokenizerFast
    _sd_tokenizer_init(self, tokenizer_path, *args, **kwargs)


comfy.sd1_clip.SDTokenizer.__init__ = _tokenizer_init

# A later fix, applied here so the rest is measured: ComfyUI 0.3.64's Qwen2.5-VL vision tower
# returns its merged tokens in window order; today's ComfyUI (and transformers) put them back in
# raster order (`argsort(window_index)` after the merger), which this engine does. Images smaller
# than one window (112 px) are the same either way.
import inspect

_vision_forward = comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer.forward
if "argsort" not in inspect.getsource(_vision_forward):
    def _raster_order_forward(self, pixel_values, image_grid_thw=None):
        merged = _vision_forward(self, pixel_values, image_grid_thw)
        window_index, _ = self.get_window_index(image_grid_thw)
        return merged[torch.argsort(window_index.to(merged.device)), :]

    comfy.text_encoders.qwen_vl.Qwen2VLVisionTransformer.forward = _raster_order_forward


# --- Stable Audio Open (tests/fixtures/stable_audio_files.py's tiny widths) ---------------------
# ComfyUI detects only `audio_model` "dit1.0" and builds the DiT at its release widths (1536 x 24,
# 768-wide text), the seconds embedders 768 wide and the Oobleck VAE at 128 channels: each is
# given the widths of the weights being loaded (the DiT's heads stay ComfyUI's 24).
import comfy.ldm.audio.autoencoder
import comfy.ldm.audio.embedders

_detect_before_audio = comfy.model_detection.detect_unet_config


def _audio_detect_unet_config(state_dict, key_prefix, *args, **kwargs):
    config = _detect_before_audio(state_dict, key_prefix, *args, **kwargs)
    if (config or {}).get("audio_model") == "dit1.0":
        p = key_prefix
        cond = state_dict[f"{p}to_cond_embed.0.weight"]
        config.update(io_channels=state_dict[f"{p}postprocess_conv.weight"].shape[0],
                      embed_dim=state_dict[f"{p}transformer.project_in.weight"].shape[0],
                      depth=_count(list(state_dict.keys()), f"{p}transformer.layers."),
                      cond_token_dim=cond.shape[1], project_cond_tokens=cond.shape[0] != cond.shape[1],
                      global_cond_dim=state_dict[f"{p}to_global_embed.0.weight"].shape[1])
    return config


comfy.model_detection.detect_unet_config = _audio_detect_unet_config
_seconds_width = []
_number_init = comfy.ldm.audio.embedders.NumberConditioner.__init__


def _tiny_number_init(self, output_dim, *args, **kwargs):
    _number_init(self, _seconds_width[-1] if _seconds_width else output_dim, *args, **kwargs)


comfy.ldm.audio.embedders.NumberConditioner.__init__ = _tiny_number_init
_stable_audio_get_model = comfy.supported_models.StableAudio.get_model


def _tiny_stable_audio_get_model(self, state_dict, prefix="", device=None):
    width = state_dict.get("conditioner.conditioners.seconds_start.embedder.embedding.1.weight")
    _seconds_width.append(768 if width is None else width.shape[0])
    try:
        return _stable_audio_get_model(self, state_dict, prefix, device)
    finally:
        _seconds_width.pop()


comfy.supported_models.StableAudio.get_model = _tiny_stable_audio_get_model


def _tiny_oobleck(*args, **kwargs):
    """ComfyUI's AudioOobleckVAE() at the widths of the VAE being built (`_vae_loading`)."""
    sd = _vae_loading[-1] if _vae_loading else {}
    first = sd.get("encoder.layers.0.weight_v", sd.get("encoder.layers.0.parametrizations.weight.original1"))
    if first is None:
        return comfy.ldm.audio.autoencoder.AudioOobleckVAE(*args, **kwargs)
    channels, blocks, mults, strides = first.shape[0], 1, [], []
    while any(k.startswith(f"encoder.layers.{blocks}.layers.4.") for k in sd):
        weight = sd.get(f"encoder.layers.{blocks}.layers.4.weight_v",
                        sd.get(f"encoder.layers.{blocks}.layers.4.parametrizations.weight.original1"))
        mults.append(weight.shape[0] // channels)
        strides.append(weight.shape[2] // 2)
        blocks += 1
    latent = sd.get("decoder.layers.0.weight_v", sd.get("decoder.layers.0.parametrizations.weight.original1")).shape[1]
    return comfy.ldm.audio.autoencoder.AudioOobleckVAE(channels=channels, c_mults=mults, strides=strides,
                                                       latent_dim=latent)


comfy.sd.AudioOobleckVAE = _tiny_oobleck


# --- LTX-Video 0.9 (bench/pack_parity.py's tiny_ltxv_ files) ------------------------------------
# A lone text-encoder file is T5-XXL to ComfyUI 0.3.64 only if it has a 24th block
# (`encoder.block.23...wi_1`, 4096 wide); the tiny gated T5 v1.1 encoder (2 blocks) would be taken
# for T5-base, which CLIPLoader routes to Stable Audio's tower whatever its type (no token mask,
# no LTX-Video tokenizer). So while CLIPLoader loads with type `ltxv`, a gated T5 encoder
# shallower than 24 blocks is T5-XXL (other types and loaders as before). The DiT and the VAE
# need nothing: the DiT's widths come from its weights and its caption width from the file's
# `config` metadata, the VAE's layout from that metadata's `vae` section.
_ltxv_text_loads = []  # per text-encoder load in progress: whether its type is `ltxv`
_load_te_before_ltxv = comfy.sd.load_text_encoder_state_dicts


@functools.wraps(_load_te_before_ltxv)
def _ltxv_load_text_encoder_state_dicts(*args, **kwargs):
    _ltxv_text_loads.append(kwargs.get("clip_type", args[2] if len(args) > 2 else None) == comfy.sd.CLIPType.LTXV)
    try:
        return _load_te_before_ltxv(*args, **kwargs)
    finally:
        _ltxv_text_loads.pop()


comfy.sd.load_text_encoder_state_dicts = _ltxv_load_text_encoder_state_dicts
_detect_te_before_ltxv = comfy.sd.detect_te_model


def _tiny_t5xxl_detect_te_model(sd):
    found = _detect_te_before_ltxv(sd)
    if (_ltxv_text_loads and _ltxv_text_loads[-1] and found == comfy.sd.TEModel.T5_BASE
            and "encoder.block.0.layer.1.DenseReluDense.wi_1.weight" in sd
            and "encoder.block.23.layer.0.SelfAttention.q.weight" not in sd):
        return comfy.sd.TEModel.T5_XXL
    return found


comfy.sd.detect_te_model = _tiny_t5xxl_detect_te_model


# --- HunyuanVideo 1.0 (bench/pack_parity.py's tiny_hv_ files) -----------------------------------
# ComfyUI 0.3.64's model_detection sets HunyuanVideo's pooled-text width (`vec_in_dim`) to CLIP-L's
# 768 whenever `vector_in` is there; the tiny CLIP-L's pooled vector is 32 wide, so the width is
# read from `vector_in.in_layer` instead. Nothing else: the tiny DiT keeps ComfyUI's 128-channel
# heads (num_heads = hidden // 128, RoPE axes 16 / 56 / 56), its text width is read from the
# weights, the Llama and CLIP-L towers get their widths above, and the VAE (ComfyUI's LDM
# AutoencoderKL with 3-D convolutions) is built by the tiny autoencoder above at 32 x [1, 2, 2, 2],
# one block per level, the widths of the tiny file.
_detect_before_hv = comfy.model_detection.detect_unet_config


def _hv_detect_unet_config(state_dict, key_prefix, *args, **kwargs):
    config = _detect_before_hv(state_dict, key_prefix, *args, **kwargs)
    vector = f"{key_prefix}vector_in.in_layer.weight"
    if (config or {}).get("image_model") == "hunyuan_video" and vector in state_dict:
        config["vec_in_dim"] = state_dict[vector].shape[1]
    return config


comfy.model_detection.detect_unet_config = _hv_detect_unet_config
