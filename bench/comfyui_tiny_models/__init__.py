"""A node pack for the ComfyUI side of bench/pack_parity.py only: makes ComfyUI 0.3.64 accept the
tiny random checkpoints of tests/fixtures/checkpoints.py (the widths differ from real SD models;
the code paths do not). ComfyUI detects a family by comparing the UNet's widths with fixed
configs, and builds its VAE and CLIP from fixed widths, so the tiny widths are put there. It
registers no nodes.
"""
import json
import os

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
