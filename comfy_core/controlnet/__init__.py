"""ControlNets and adapters: the CONTROL_NET wire objects and the networks behind them.

After ComfyUI's `comfy/controlnet.py`, `comfy/cldm/cldm.py` and `comfy/t2i_adapter/adapter.py`
(behaviour read there, written here): `load.load_controlnet(path, model=None)` detects the file
(ControlNet in the original `control_model.*` or diffusers layout, union/ProMax ControlNet-XL,
control-LoRA, T2I-Adapter full/light/XL, diff ControlNets) and returns a `ControlBase` whose
`get_control(x, sigma, cond, batched_number, transformer_options)` gives the UNet its residuals
`{"input": [...], "middle": [...], "output": [...]}` (popped from the end by the UNet, as
ComfyUI's `apply_control`).

Files: `types` (names and enums), `hint` (hint resizing and batch broadcasting), `base`
(ControlBase: strength, percent range, chaining, merging), `config` (structure from weights),
`model` (the ControlNet network on our UNet blocks), `union` (the union/ProMax fusion blocks),
`diffusers_keys` (diffusers names -> original names), `runner` (ControlNet: running the network
each step), `control_lora` (ControlLora), `t2i_model` / `t2i` (T2I-Adapters), `load` (files).
SD3 / SD3.5: `mmdit_controlnet` (diffusers' `SD3ControlNetModel` layout), `dit_embedder` (SAI's
SD3.5 format, ControlNetEmbedder), `sd3_runner` (their CONTROL_NET objects: latent hints,
ControlNetSD35 borrowing the main model's embedder), `load_mmdit` (their files). Qwen-Image:
`qwen_image_controlnet` (InstantX's and VideoX-Fun's networks), `load_qwen_image` (their files and
CONTROL_NET objects: Wan 2.1 latent hints, `QwenFunControlNet` lent the run's model).
"""
