"""A node pack for the ComfyUI side of bench/pack_parity.py only: makes ComfyUI 0.3.64 accept the
tiny random checkpoints of tests/fixtures/checkpoints.py (the widths differ from real SD models;
the code paths do not). ComfyUI detects a family by comparing the UNet's widths with fixed
configs, and builds its VAE and CLIP from fixed widths, so the tiny widths are put there; its
CLIP vision loader picks a fixed config by layer count, so a 3-layer tower (the 224-px one
bench/pack_parity.py writes for IPAdapter_plus) gets a config of its own widths. It registers no
nodes.
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
