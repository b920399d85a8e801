"""Depth Anything 3 nodes, V3 schemas as today's ComfyUI declares them
(`comfy_extras/nodes_depth_anything_3.py`); written here, the network and its post-processing in
comfy_core/models/da3*.py.

- LoadDA3Model: a file of the `geometry_estimation` folder -> DA3_MODEL, weights in `weight_dtype`
  (`default`: float32 here).
- DA3Inference: each image alone through the network at `resolution` (longest or shortest side,
  multiples of 14) -> DA3_GEOMETRY, the dict ComfyUI passes: `depth` [B, H, W] (raw), `image`
  [B, H, W, 3] on the CPU, `mode` "mono", `sky` [B, H, W] (Mono / Metric models), `confidence`
  (models with a confidence channel). `mode` multiview needs the Small / Base models (camera
  decoder, DualDPT), which this engine does not build: it is refused with the reason.
- DA3Render: one IMAGE per geometry: `depth` (normalised `v2_style` / `min_max`, near white, or
  `raw`; optionally the sky clipped to the foreground's 99th percentile first), `depth_colored`
  (the same through the turbo colormap MoGeRender uses), `sky_mask` (the sky probability, grey or
  turbo), `confidence` (normalised per image, grey or turbo).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Boolean, Combo, ComboOption, DynamicCombo, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices, model_file, model_files, report_progress
from nodes.errors import NodeInputError, describe
from nodes.moge_nodes import turbo

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_depth_anything_3"
CATEGORY = "image/geometry estimation"
KIND = "geometry_estimation"
DA3_MODEL = "DA3_MODEL"
DA3_GEOMETRY = "DA3_GEOMETRY"
WEIGHT_DTYPES = ["default", "fp16", "bf16", "fp32"]
RESIZE_METHODS = ["upper_bound_resize", "lower_bound_resize"]
NORMALIZATIONS = ["v2_style", "min_max", "raw"]
RENDER_OUTPUTS = ["depth", "depth_colored", "sky_mask", "confidence"]


_model_files = model_files(KIND)  # the loader combo's live options


@v3_node("LoadDA3Model", display_name="Load Depth Anything 3", category="model/loaders", python_module=MODULE,
         inputs=[InputSpec("model_name", _model_files, REQUIRED, {"multiselect": False}),  # a live V3 combo
                 Combo("weight_dtype", WEIGHT_DTYPES, default="default")],
         outputs=[Output(DA3_MODEL)])
def load_da3_model(model_name: str, weight_dtype: str = "default") -> tuple[Any]:
    """See the module docstring."""
    import torch

    from comfy_core.models.da3 import DA3WeightsError
    from comfy_core.models.da3_infer import load_da3

    weight_dtype = checks.choice(weight_dtype, WEIGHT_DTYPES, "weight_dtype")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(weight_dtype, torch.float32)
    path = model_file(KIND, model_name, "model_name")
    device, offload = model_devices()
    try:
        return (load_da3(path, dtype=dtype, load_device=device, offload_device=offload),)
    except DA3WeightsError as exc:
        raise NodeInputError("model_name", "a Depth Anything 3 Mono / Metric model", str(exc)) from None


MODE = DynamicCombo("mode", (
    ComboOption("mono"),
    ComboOption("multiview", (
        Combo("ref_view_strategy", ["saddle_balanced", "saddle_sim_range", "first", "middle"],
              default="saddle_balanced",
              tooltip="Which view acts as the geometric anchor.\n"
                      "- saddle_balanced: the view most 'average' across all others (best general choice).\n"
                      "- saddle_sim_range: the view most visually distinct from the others.\n"
                      "- first / middle: fixed positional picks."),
        Combo("pose_method", ["cam_dec", "ray_pose"], default="cam_dec",
              tooltip="How the camera field-of-view is estimated (for Small/Base models only).\n"
                      "- cam_dec: learned from image features.\n"
                      "- ray_pose: derived geometrically from the model's 3D ray output.\n"
                      "Affects perspective correctness of the 3D output. Try both if results look distorted."),
    )),
), tooltip="mono: single view image (works with any model variant).\n"
           "multiview: all images processed together for geometric consistency + camera pose (for Small/Base "
           "models only).")


@v3_node("DA3Inference", display_name="Run Depth Anything 3", category=CATEGORY, python_module=MODULE,
         description="Run Depth Anything 3 on an image. In multi-view mode each image is treated as a separate "
                     "view of the same scene.",
         search_aliases=["depth", "geometry", "da3", "depth anything", "monocular", "pointmap", "sky", "3d",
                         "metric depth", "disparity"],
         inputs=[
             Socket("da3_model", DA3_MODEL),
             Socket("image", "IMAGE"),
             Int("resolution", default=504, min=140, max=2520, step=14,
                 tooltip="Resolution the model runs at (longest side, multiple of 14).\nLower = faster / less VRAM.\n"
                         "Higher = more detail.\nOutput is upsampled back to the original size."),
             Combo("resize_method", RESIZE_METHODS, default="upper_bound_resize",
                   tooltip="upper_bound_resize: scale so the longest side = resolution (caps memory, default).\n"
                           "lower_bound_resize: scale so the shortest side = resolution (preserves more detail on "
                           "tall/wide images, uses more memory)."),
             MODE,
         ],
         outputs=[Output(DA3_GEOMETRY, "da3_geometry",
                         tooltip="Dictionary of non-normalized tensors.\nAlways has the keys: depth, image, mode.\n"
                                 "Optional keys: sky (for Mono/Metric), confidence (for Small/Base), extrinsics + "
                                 "intrinsics (for multi-view).")])
def da3_inference(da3_model: Any, image: "torch.Tensor", resolution: int, resize_method: str,
                  mode: dict) -> tuple[dict]:
    """See the module docstring."""
    from comfy_core.models.da3_infer import DA3Model

    if not isinstance(da3_model, DA3Model):
        raise NodeInputError("da3_model", "a DA3_MODEL (from LoadDA3Model)", describe(da3_model))
    image = checks.image_batch(image, "image")[..., :3]
    resolution = checks.integer(resolution, "resolution", 140, 2520)
    resize_method = checks.choice(resize_method, RESIZE_METHODS, "resize_method")
    chosen = mode.get("mode") if isinstance(mode, dict) else mode
    if chosen == "multiview":
        raise NodeInputError("mode", "mono (multi-view needs a Small / Base model with a camera decoder or a "
                                     "DualDPT head; the loaded model is a Mono / Metric one)", "multiview")
    if chosen != "mono":
        raise NodeInputError("mode", "mono or multiview", describe(chosen))
    out = da3_model.infer(image, resolution, resize_method, on_image=report_progress)
    geometry: dict[str, Any] = {"depth": out["depth"].contiguous(), "image": image.cpu(), "mode": "mono"}
    for key in ("sky", "confidence"):
        if key in out:
            geometry[key] = out[key].contiguous()
    return (geometry,)


_DEPTH_OPTIONS = (
    Combo("normalization", NORMALIZATIONS, default="v2_style",
          tooltip="- v2_style: mean/std normalisation for perceptually balanced results (default).\n"
                  "- min_max: stretches the full depth range to [0, 1] for maximum contrast.\n"
                  "- raw: no scaling,preserves metric units for Metric model."),
    Boolean("apply_sky_clip", default=False,
            tooltip="Clip sky-region depth to the 99th percentile of foreground depth before normalisation. "
                    "Requires a sky key in the da3_geometry input (for Mono/Metric models only)."),
)

RENDER = DynamicCombo("output", (
    ComboOption("depth", _DEPTH_OPTIONS),
    ComboOption("depth_colored", _DEPTH_OPTIONS),
    ComboOption("sky_mask", (Boolean("colored", default=False, tooltip="Apply the Turbo colormap to the sky mask."),)),
    ComboOption("confidence", (Boolean("colored", default=False,
                                       tooltip="Apply the Turbo colormap to the confidence map."),)),
), tooltip="- depth: normalised greyscale depth image.\n- depth_colored: depth mapped through the Turbo colormap.\n"
           "- sky_mask: sky probability in [0, 1] (for Mono/Metric models only).\n"
           "- confidence: normalised depth confidence (for Small/Base models only).")


def _geometry(value: Any) -> dict:
    if not isinstance(value, dict) or "depth" not in value:
        raise NodeInputError("da3_geometry", "a DA3_GEOMETRY (from DA3Inference)", describe(value))
    return value


def _grey(x: "torch.Tensor") -> "torch.Tensor":
    return x[..., None].expand(*x.shape, 3).contiguous()


@v3_node("DA3Render", display_name="Render Depth Anything 3", category=CATEGORY, python_module=MODULE,
         description="Render a depth map, confidence map, or sky mask from Depth Anything 3 geometry data.",
         inputs=[Socket("da3_geometry", DA3_GEOMETRY), RENDER],
         outputs=[Output("IMAGE")])
def da3_render(da3_geometry: dict, output: dict) -> tuple["torch.Tensor"]:
    """See the module docstring."""
    import torch

    from comfy_core.models import da3_infer

    geometry = _geometry(da3_geometry)
    chosen = output.get("output") if isinstance(output, dict) else output
    if chosen in ("depth", "depth_colored"):
        normalization = checks.choice(output.get("normalization", "v2_style"), NORMALIZATIONS,
                                      "output.normalization")
        sky = geometry.get("sky")
        depth = geometry["depth"].float()
        if output.get("apply_sky_clip", False):
            if sky is None:
                raise NodeInputError("output.apply_sky_clip", "a DA3_GEOMETRY with a sky map (Mono / Metric "
                                                              "models), or apply_sky_clip off", "one without")
            depth = torch.stack([da3_infer.sky_aware_clip(depth[i], sky[i]) for i in range(depth.shape[0])])
        if normalization == "v2_style":
            norm = torch.stack([da3_infer.normalize_v2_style(depth[i], None if sky is None else sky[i])
                                for i in range(depth.shape[0])])
        elif normalization == "min_max":
            norm = da3_infer.normalize_min_max(depth)
        else:
            norm = depth
        grey = _grey(norm if normalization == "raw" else norm.clamp(0.0, 1.0))
        result = turbo(grey[..., 0]) if chosen == "depth_colored" else grey
    elif chosen == "sky_mask":
        if "sky" not in geometry:
            raise NodeInputError("da3_geometry", "a DA3_GEOMETRY with a sky map (Mono / Metric models)", "one without")
        sky = geometry["sky"].float()
        result = turbo(sky) if output.get("colored", False) else _grey(sky)
    elif chosen == "confidence":
        if "confidence" not in geometry:
            raise NodeInputError("da3_geometry", "a DA3_GEOMETRY with a confidence map (Small / Base models)",
                                 "one without")
        conf = da3_infer.normalize_confidence(geometry["confidence"].float())
        result = turbo(conf) if output.get("colored", False) else _grey(conf)
    else:
        raise NodeInputError("output", f"one of {RENDER_OUTPUTS}", describe(chosen))
    return (result.float().contiguous().cpu(),)
