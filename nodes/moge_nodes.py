"""MoGe (monocular geometry estimation) nodes, V3 schemas as today's ComfyUI declares them
(`comfy_extras/nodes_moge.py`); written here, the network and its post-processing in
comfy_core/models/moge*.py.

- LoadMoGeModel: a file of the `geometry_estimation` folder -> MOGE_MODEL (MoGe-1, MoGe-2 or MoGe-3,
  told by its tensor names).
- MoGeInference: images in chunks of `batch_size` through `MoGeModel.infer` -> MOGE_GEOMETRY, the
  dict ComfyUI passes: `points` [B, H, W, 3], `depth` [B, H, W], `intrinsics` [B, 3, 3] (normalized),
  `mask` [B, H, W] bool, `normal` [B, H, W, 3] (MoGe-2 with normals), `image` [B, H, W, 3] on the
  CPU. `fov_x_degrees` 0 recovers the focal from the points. `refine_steps`: MoGe-3's refiner passes.
- MoGeRender: one IMAGE per geometry: `depth` (disparity `1 / depth` normalised per image between
  its 0.1 and 99.9 percentiles, grey), `depth_colored` (the same through the polynomial "turbo"
  colormap approximation), `normal_opengl` / `normal_directx` (the predicted normals, or for MoGe-1
  normals from the point map's central differences, `dy x dx`; OpenCV's z flipped, y flipped for
  OpenGL, mapped `n / 2 + 0.5`), `mask` (white where set).
- MoGeGeometryToFOV: the field of view of the first image's intrinsics along an axis (vertical
  `2 atan(0.5 / fy)`, horizontal `2 atan(0.5 / fx)`, diagonal `2 atan(hypot(0.5 / fx, 0.5 / fy))`)
  in degrees or radians, and its focal in pixels (`fy * height`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
from nodes.environment import model_devices, model_file, model_files, report_progress
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_moge"
CATEGORY = "image/geometry_estimation"
KIND = "geometry_estimation"
MOGE_MODEL = "MOGE_MODEL"
MOGE_GEOMETRY = "MOGE_GEOMETRY"
RENDER_MODES = ["depth", "depth_colored", "normal_opengl", "normal_directx", "mask"]
GEOMETRY_FIELDS = ("points", "depth", "intrinsics", "mask", "normal")

# The turbo colormap as a degree-5 polynomial per channel (Anton Mikhailov's approximation).
TURBO = (
    (0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943),
    (0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604),
    (0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973),
)


_model_files = model_files(KIND)  # the loader combo's live options


def _moge_model(value: Any) -> Any:
    from comfy_core.models.moge_infer import MoGeModel

    if not isinstance(value, MoGeModel):
        raise NodeInputError("moge_model", "a MOGE_MODEL (from LoadMoGeModel)", describe(value))
    return value


def _geometry(value: Any) -> dict:
    if not isinstance(value, dict) or "image" not in value:
        raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY (from MoGeInference or MoGePanoramaInference)",
                             describe(value))
    return value


@v3_node("LoadMoGeModel", display_name="Load MoGe Model", category="loaders", python_module=MODULE,
         inputs=[InputSpec("model_name", _model_files, REQUIRED, {"multiselect": False})],  # a live V3 combo
         outputs=[Output(MOGE_MODEL)])
def load_moge_model(model_name: str) -> tuple[Any]:
    """See the module docstring."""
    from comfy_core.models.moge import MoGeWeightsError
    from comfy_core.models.moge_infer import load_moge

    path = model_file(KIND, model_name, "model_name")
    device, offload = model_devices()
    try:
        return (load_moge(path, load_device=device, offload_device=offload),)
    except MoGeWeightsError as exc:
        raise NodeInputError("model_name", "a MoGe-1, MoGe-2 or MoGe-3 model", str(exc)) from None


@v3_node("MoGeInference", display_name="MoGe Inference", category=CATEGORY, python_module=MODULE,
         inputs=[
             Socket("moge_model", MOGE_MODEL),
             Socket("image", "IMAGE"),
             Int("resolution_level", default=9, min=0, max=9, tooltip="0 = fastest, 9 = most detail."),
             Float("fov_x_degrees", default=0.0, min=0.0, max=170.0, step=0.1, advanced=True,
                   tooltip="Horizontal field of view of the source camera. Sets the focal length used to unproject "
                           "the depth map into 3D. 0 = auto-recover from the predicted points."),
             Int("batch_size", default=4, min=1, max=64,
                 tooltip="Images per inference call. Lower if you OOM on a long video / image set."),
             Boolean("force_projection", default=True, advanced=True),
             Boolean("apply_mask", default=True, advanced=True,
                     tooltip="Set masked-out (sky / invalid) pixels to inf in points and depth so meshing culls them. "
                             "Disable to keep the raw predicted geometry everywhere; the mask is still returned "
                             "separately."),
             Int("refine_steps", default=3, min=0, max=10, advanced=True,
                 tooltip="MoGe-3 only: passes of the sparse 3D refiner over the predicted depth."),
         ],
         outputs=[Output(MOGE_GEOMETRY, "moge_geometry")])
def moge_inference(moge_model: Any, image: "torch.Tensor", resolution_level: int, fov_x_degrees: float,
                   batch_size: int, force_projection: bool, apply_mask: bool, refine_steps: int = 3) -> tuple[dict]:
    """See the module docstring."""
    import torch

    model = _moge_model(moge_model)
    image = checks.image_batch(image, "image")[..., :3]
    resolution_level = checks.integer(resolution_level, "resolution_level", 0, 9)
    batch_size = checks.integer(batch_size, "batch_size", 1, 64)
    fov = checks.number(fov_x_degrees, "fov_x_degrees", 0.0, 170.0)
    refine_steps = checks.integer(refine_steps, "refine_steps", 0, 10)
    pixels = image.movedim(-1, -3).contiguous()  # [B, 3, H, W]
    total = pixels.shape[0]
    chunks: list[dict] = []
    with model.loaded():
        for start in range(0, total, batch_size):
            chunk = pixels[start:start + batch_size]
            chunks.append(model.infer(chunk, resolution_level=resolution_level, fov_x=None if fov <= 0 else fov,
                                      force_projection=bool(force_projection), apply_mask=bool(apply_mask),
                                      refine_steps=refine_steps))
            report_progress(min(start + batch_size, total), total)
    geometry: dict[str, Any] = {"image": image.cpu()}
    for name in GEOMETRY_FIELDS:
        values = [c[name] for c in chunks if name in c]
        if values:
            geometry[name] = torch.cat(values, dim=0).cpu()
    return (geometry,)


def turbo(x: "torch.Tensor") -> "torch.Tensor":
    """[..., 3]: the turbo colormap of `x` clamped to 0..1 (polynomial approximation)."""
    import torch

    x = x.clamp(0.0, 1.0)
    channels = [sum(c * x ** k for k, c in enumerate(coefficients)) for coefficients in TURBO]
    return torch.stack(channels, dim=-1).clamp(0.0, 1.0)


def normalized_disparity(depth: "torch.Tensor") -> "torch.Tensor":
    """[B, H, W]: `1 / depth` of the finite positive depths, per image between its 0.1 and 99.9
    percentiles, clamped to 0..1; 0 elsewhere."""
    import torch

    out = torch.zeros_like(depth)
    for i in range(depth.shape[0]):
        d = depth[i]
        valid = torch.isfinite(d) & (d > 0)
        if not bool(valid.any()):
            continue
        disparity = torch.where(valid, 1.0 / d.clamp_min(1e-6), torch.zeros_like(d))
        lo = torch.quantile(disparity[valid], 0.001)
        hi = torch.quantile(disparity[valid], 0.999)
        normed = ((disparity - lo) / (hi - lo).clamp_min(1e-6)).clamp(0.0, 1.0)
        out[i] = torch.where(valid, normed, torch.zeros_like(normed))
    return out


def normals_from_points(points: "torch.Tensor") -> "torch.Tensor":
    """[B, H, W, 3]: unit normals of a point map from central differences (`dy x dx`, outward in
    OpenCV's y-down camera), 0 where a point is not finite; the border rows / columns see a zero
    difference, as ComfyUI's padding makes them."""
    import torch
    import torch.nn.functional as F

    finite = torch.isfinite(points).all(dim=-1)
    pts = torch.where(finite[..., None], points, torch.zeros_like(points))
    dx = F.pad((pts[:, :, 2:] - pts[:, :, :-2]).permute(0, 3, 1, 2), (1, 1, 0, 0)).permute(0, 2, 3, 1)
    dy = F.pad((pts[:, 2:] - pts[:, :-2]).permute(0, 3, 1, 2), (0, 0, 1, 1)).permute(0, 2, 3, 1)
    n = F.normalize(torch.cross(dy, dx, dim=-1), dim=-1)
    return torch.where(finite[..., None], n, torch.zeros_like(n))


@v3_node("MoGeRender", display_name="MoGe Render", category=CATEGORY, python_module=MODULE,
         inputs=[
             Socket("moge_geometry", MOGE_GEOMETRY),
             Combo("output", RENDER_MODES, default="depth",
                   tooltip="DirectX vs OpenGL controls the normal-map green-channel convention. DirectX: green = -Y "
                           "down (Unreal). OpenGL: green = +Y up (Blender, Substance, Unity, glTF)."),
         ],
         outputs=[Output("IMAGE")])
def moge_render(moge_geometry: dict, output: str) -> tuple["torch.Tensor"]:
    """See the module docstring."""
    import torch

    geometry = _geometry(moge_geometry)
    output = checks.choice(output, RENDER_MODES, "output")
    if output in ("depth", "depth_colored"):
        if "depth" not in geometry:
            raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY with depth", "one without")
        source = geometry["depth"]
    elif output == "mask":
        if "mask" not in geometry:
            raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY with a mask", "one without")
        source = geometry["mask"]
    elif "normal" in geometry or "points" in geometry:
        source = geometry["normal"] if "normal" in geometry else geometry["points"]
    else:
        raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY with normals or points", "one with neither")
    images = []
    total = source.shape[0]
    for i in range(total):
        one = source[i:i + 1].float()
        if output in ("depth", "depth_colored"):
            d = normalized_disparity(one)
            images.append(turbo(d) if output == "depth_colored" else d[..., None].expand(*d.shape, 3))
        elif output == "mask":
            images.append(one[..., None].expand(*one.shape, 3))
        else:
            n = one if "normal" in geometry else normals_from_points(one)
            # MoGe's camera is OpenCV's (z into the scene); a normal map's z points out of the surface.
            flip = n.new_tensor([1.0, -1.0 if output == "normal_opengl" else 1.0, -1.0])
            images.append((n * flip * 0.5 + 0.5).clamp(0.0, 1.0))
        report_progress(i + 1, total)
    return (torch.cat(images, dim=0).contiguous().float().cpu(),)


FOV_AXES = ["vertical", "horizontal", "diagonal"]
FOV_UNITS = ["degrees", "radians"]


@v3_node("MoGeGeometryToFOV", display_name="MoGe Geometry to FOV", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("moge_geometry", MOGE_GEOMETRY),
                 Combo("axis", FOV_AXES, default="vertical"),
                 Combo("unit", FOV_UNITS, default="degrees")],
         outputs=[Output("FLOAT", "fov"), Output("FLOAT", "focal_pixels")])
def moge_geometry_to_fov(moge_geometry: dict, axis: str, unit: str) -> tuple[float, float]:
    """See the module docstring."""
    geometry = _geometry(moge_geometry)
    axis = checks.choice(axis, FOV_AXES, "axis")
    unit = checks.choice(unit, FOV_UNITS, "unit")
    if "intrinsics" not in geometry:
        raise NodeInputError("moge_geometry", "a perspective MOGE_GEOMETRY (with intrinsics)",
                             "one without intrinsics (a panorama's)")
    height = next((geometry[k].shape[1] for k in ("image", "points", "depth") if k in geometry), None)
    if height is None:
        raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY with an image, points or depth", "none of them")
    k = geometry["intrinsics"][0].double()
    fx, fy = float(k[0, 0]), float(k[1, 1])
    half = {"vertical": 0.5 / fy, "horizontal": 0.5 / fx, "diagonal": math.hypot(0.5 / fx, 0.5 / fy)}[axis]
    fov = 2.0 * math.atan(half)
    return (math.degrees(fov) if unit == "degrees" else fov, fy * int(height))


@v3_node("MoGePointMapToMesh", display_name="MoGe Point Map to Mesh", category=CATEGORY, python_module=MODULE,
         inputs=[
             Socket("moge_geometry", MOGE_GEOMETRY),
             Int("batch_index", default=0, min=0, max=4096,
                 tooltip="Which image of a batched MoGe geometry to mesh. Per-image vertex counts differ, so batches "
                         "can't be stacked into a single MESH."),
             Int("decimation", default=1, min=1, max=8, tooltip="Vertex stride; 1 = full resolution."),
             Float("discontinuity_threshold", default=0.04, min=0.0, max=1.0, step=0.01,
                   tooltip="Drop pixels whose 3x3 depth span exceeds this fraction. 0 = off."),
             Boolean("texture", default=True, tooltip="Carry the source image through as the baseColor texture."),
         ],
         outputs=[Output("MESH")])
def moge_point_map_to_mesh(moge_geometry: dict, batch_index: int, decimation: int, discontinuity_threshold: float,
                           texture: bool) -> tuple[Any]:
    """One image of the geometry triangulated over its pixel grid (`moge_geometry.triangulate_grid_mesh`;
    the depth, radial for panoramas, drives the edge test), turned into glTF's frame: a perspective
    map (x right, y down, z forward) with y and z negated and each face's winding reversed, a
    panorama's (z up) with its axes rotated (x, y, z) -> (y, z, x); the image as the texture."""
    import torch

    from comfy_core.models.moge_geometry import triangulate_grid_mesh
    from nodes.mesh import Mesh

    geometry = _geometry(moge_geometry)
    if "points" not in geometry:
        raise NodeInputError("moge_geometry", "a MOGE_GEOMETRY with points", "one without")
    points = geometry["points"]
    batch_index = checks.integer(batch_index, "batch_index", 0, 4096)
    if batch_index >= points.shape[0]:
        raise NodeInputError("batch_index", f"an index below the geometry's batch size {points.shape[0]}",
                             str(batch_index))
    decimation = checks.integer(decimation, "decimation", 1, 8)
    threshold = checks.number(discontinuity_threshold, "discontinuity_threshold", 0.0, 1.0)
    depth = geometry["depth"][batch_index] if "depth" in geometry else None
    vertices, faces, uvs = triangulate_grid_mesh(points[batch_index], decimation=decimation,
                                                 discontinuity_threshold=threshold, depth=depth)
    if vertices.shape[0] == 0 or faces.shape[0] == 0:
        raise NodeInputError("moge_geometry", "a geometry that meshes into triangles",
                             "an empty mesh (try discontinuity_threshold 0 or apply_mask off)")
    if "intrinsics" not in geometry:
        vertices = vertices[:, [1, 2, 0]].contiguous()
    else:
        vertices = vertices * torch.tensor([1.0, -1.0, -1.0], dtype=vertices.dtype)
        faces = faces[:, [0, 2, 1]].contiguous()
    image = geometry["image"][batch_index:batch_index + 1] if texture else None
    return (Mesh(vertices=vertices[None], faces=faces[None], uvs=uvs[None], texture=image),)


@v3_node("MoGePanoramaInference", display_name="MoGe Panorama Inference", category=CATEGORY, python_module=MODULE,
         inputs=[
             Socket("moge_model", MOGE_MODEL),
             Socket("image", "IMAGE", tooltip="Equirectangular panorama (any aspect)."),
             Int("resolution_level", default=9, min=0, max=9,
                 tooltip="Per-view detail (0 = fastest, 9 = most detailed)."),
             Int("split_resolution", default=512, min=256, max=1024, tooltip="Resolution of each perspective split."),
             Int("merge_resolution", default=1920, min=256, max=8192,
                 tooltip="Long-side resolution of the merged equirect distance map."),
             Int("batch_size", default=4, min=1, max=12, tooltip="Views per inference batch (12 splits total)."),
             Int("refine_steps", default=3, min=0, max=10, advanced=True,
                 tooltip="MoGe-3 only: passes of the sparse 3D refiner over the predicted depth."),
         ],
         outputs=[Output(MOGE_GEOMETRY, "moge_geometry")])
def moge_panorama_inference(moge_model: Any, image: "torch.Tensor", resolution_level: int, split_resolution: int,
                            merge_resolution: int, batch_size: int, refine_steps: int = 3) -> tuple[dict]:
    """One equirect image split into 12 perspective views at 90 degrees (`moge_panorama`), each run
    at `fov_x` 90 with no mask and no metric scale (per-view scales would not agree at the seams),
    their distances `|points|` merged on a grid whose long side is at most `merge_resolution` (and
    at least 32 px a side), resized back bilinearly (the mask nearest); pixels no view saw as
    foreground get 5 x the 95th percentile of the seen distances. MOGE_GEOMETRY without intrinsics:
    `points` (direction x distance, z up), `depth` (the distance), `mask`, `image`."""
    import torch
    import torch.nn.functional as F

    from comfy_core.models import moge_panorama as pano

    model = _moge_model(moge_model)
    image = checks.image_batch(image, "image")[..., :3]
    if image.shape[0] != 1:
        raise NodeInputError("image", "one equirectangular image", f"a batch of {image.shape[0]}")
    resolution_level = checks.integer(resolution_level, "resolution_level", 0, 9)
    split_resolution = checks.integer(split_resolution, "split_resolution", 256, 1024)
    merge_resolution = checks.integer(merge_resolution, "merge_resolution", 256, 8192)
    batch_size = checks.integer(batch_size, "batch_size", 1, 12)
    refine_steps = checks.integer(refine_steps, "refine_steps", 0, 10)
    height, width = int(image.shape[1]), int(image.shape[2])
    scale = min(merge_resolution / max(height, width), 1.0)
    merge_h, merge_w = max(int(height * scale), 32), max(int(width * scale), 32)
    extrinsics, intrinsics = pano.panorama_cameras()
    views = pano.split_panorama(image[0].movedim(-1, 0).float(), extrinsics, intrinsics, split_resolution)
    levels = pano.merge_levels(merge_w, merge_h)
    weight = {wh: 4 ** i for i, wh in enumerate(levels)}  # a finer solve takes about 4x the time
    total = len(views) * (1 + len(levels)) + sum(weight.values())
    done = 0
    distances, masks = [], []
    with model.loaded():
        for start in range(0, len(views), batch_size):
            out = model.infer(views[start:start + batch_size], resolution_level=resolution_level, fov_x=90.0,
                              force_projection=True, apply_mask=False, apply_metric_scale=False,
                              refine_steps=refine_steps)
            distances += list(out["points"].float().norm(dim=-1).cpu().numpy())
            masks += list(out["mask"].cpu().numpy())
            done += out["points"].shape[0]
            report_progress(done, total)

    def on_view() -> None:
        nonlocal done
        done += 1
        report_progress(done, total)

    def on_solve(w: int, h: int) -> None:
        nonlocal done
        done += weight[(w, h)]
        report_progress(done, total)

    merged, seen = pano.merge_panorama_depth(merge_w, merge_h, distances, masks, list(extrinsics), intrinsics,
                                             on_view=on_view, on_solve=on_solve)
    depth, mask = torch.from_numpy(merged), torch.from_numpy(seen)
    if (merge_h, merge_w) != (height, width):
        depth = F.interpolate(depth[None, None], size=(height, width), mode="bilinear", align_corners=False)[0, 0]
        mask = F.interpolate(mask[None, None].float(), size=(height, width), mode="nearest")[0, 0] > 0
    if bool(mask.any()) and not bool(mask.all()):
        depth = torch.where(mask, depth, torch.quantile(depth[mask], 0.95) * 5.0)
    directions = torch.from_numpy(pano.spherical_uv_to_directions(pano.pixel_uv(height, width)))
    geometry = {"points": (directions * depth[..., None])[None], "depth": depth[None], "mask": mask[None],
                "image": image.cpu()}
    return (geometry,)
