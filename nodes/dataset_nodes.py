"""The image dataset nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026), declared as ComfyUI's
V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here. Its
video nodes are in nodes/dataset_video_nodes.py, its text nodes in nodes/dataset_text_nodes.py,
its training-set nodes (latents + conditioning) in nodes/dataset_training_nodes.py.

Folders:
* LoadImageDataSetFromFolder / LoadImageTextDataSetFromFolder list a sub-folder of the input
  folder (the combo offers every sub-folder): its .png/.jpg/.jpeg/.webp files in name order, each
  as its own `[1, H, W, 3]` IMAGE (first frame, RGB, no EXIF rotation, 32-bit 'I' images scaled by
  1/255), as a list output. The text variant also reads `<stem>.txt` beside each image (stripped;
  "" when missing) and takes kohya-ss/sd-scripts' layout: a sub-folder `<N>_<name>` contributes
  its images N times.
* SaveImageDataSetToFolder / SaveImageTextDataSetToFolder write a list of images as PNGs into a
  sub-folder of the output folder: `<prefix>_<index:05>.png` ("overwrite") or
  `<prefix>_<counter:05>_<index:05>.png` with the next free counter ("increment"); the text
  variant writes each caption beside its image as `.txt`.
A folder name that resolves outside its folder (`..`, an absolute path, a link out) is refused
with a `NodeInputError`.

Transforms (ComfyUI's `ImageProcessingNode`): most take one IMAGE and run per frame of a batch;
the list ones (`is_input_list`: ShuffleDataset, ImageDeduplication, ImageGrid, MergeImageLists)
take every image of every incoming batch as a `[1, H, W, C]` item. Resizes go through Pillow's
Lanczos on uint8 pixels and crops through uint8 pixels too, as ComfyUI's PIL round trip does
(`clip(255 x)` truncated, then `/ 255`). Random choices use NumPy's legacy Mersenne Twister
seeded with `seed % (2**32 - 1)`, as ComfyUI's `np.random.seed`, on a private generator.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comfy_core.folders import subfolders
from comfy_core.image.file_names import save_location
from comfy_core.image.pixels import image_to_uint8
from comfy_core.image.resize import lanczos
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.environment import current_env
from nodes.errors import NodeInputError, describe, image_input_errors

if TYPE_CHECKING:
    import numpy as np
    import torch

MODULE = "comfy_extras.nodes_dataset"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp")
SEED_MAX = 0xFFFFFFFFFFFFFFFF
LOAD_ALIASES = ["load folder", "load from folder", "load dataset", "load images", "import dataset"]
SAVE_ALIASES = ["save folder", "save to folder", "save dataset", "save images", "export dataset"]
CROP_ALIASES = ["crop", "cut", "trim"]
SHUFFLE_ALIASES = ["shuffle", "randomize", "mix"]


# -- folders ---------------------------------------------------------------------------------------

def subfolder(root: Path, name: Any, input_name: str) -> Path:
    """`root / name` resolved (links followed), refused when it leaves `root` (ComfyUI's
    `secure_subfolder_path`); `root` itself ("" or ".") is allowed, as there."""
    if not isinstance(name, str) or "\x00" in name:
        raise NodeInputError(input_name, "a folder name", describe(name) if not isinstance(name, str) else repr(name))
    base = Path(root).resolve()
    target = (base / name).resolve()
    if os.path.isabs(name) or not target.is_relative_to(base):
        raise NodeInputError(input_name, f"a folder inside {base}", f"{name!r}, which resolves outside it")
    return target


def input_subfolders(env: Any = None) -> list[str]:
    """Every folder under the input folder, relative, forward slashes, sorted (ComfyUI's
    `folder_paths.get_input_subfolders`): the options of the folder loaders."""
    return subfolders((env if env is not None and hasattr(env, "input_dir") else current_env()).input_dir)


def _folder_combo(tooltip: str) -> InputSpec:
    """The `folder` combo over the input folder's sub-folders (V3's Combo.Input rendering)."""
    return InputSpec("folder", input_subfolders, REQUIRED, {"tooltip": tooltip, "multiselect": False})


def _is_image_file(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def load_rgb(path: Path) -> "torch.Tensor":
    """One image file as `[1, H, W, 3]` in 0..1: the first frame, 'I' images scaled by 1/255,
    converted to RGB (ComfyUI's `load_and_process_images`: no EXIF rotation, no alpha)."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(path) as img:
        if img.mode == "I":
            img = img.point(lambda v: v * (1 / 255))
        rgb = img.convert("RGB")
        return torch.from_numpy(np.array(rgb).astype(np.float32) / 255.0)[None]


def _load_all(paths: list[Path]) -> list:
    if not paths:
        raise NodeInputError("folder", "a folder holding .png, .jpg, .jpeg or .webp images", "no valid images")
    return [load_rgb(path) for path in paths]


def _folder_images(folder: Any) -> tuple[Path, list[Path]]:
    root = subfolder(current_env().input_dir, folder, "folder")
    if not root.is_dir():
        raise NodeInputError("folder", "a sub-folder of the input folder", repr(folder))
    return root, [root / name for name in sorted(os.listdir(root)) if _is_image_file(name)]


def kohya_image_files(root: Path) -> list[Path]:
    """The images of a caption folder in name order; a sub-folder `<N>_<name>` (kohya-ss/sd-scripts)
    adds its own images (name order) N times, any other sub-folder once."""
    found: list[Path] = []
    for name in sorted(os.listdir(root)):
        path = root / name
        if _is_image_file(name):
            found.append(path)
        elif path.is_dir():
            head = name.split("_")[0]
            repeat = int(head) if head.isdigit() else 1
            found.extend(sorted(path / n for n in os.listdir(path) if _is_image_file(n)) * repeat)
    return found


def read_caption(image_path: Path) -> str:
    """The text of `<stem>.txt` beside the image, stripped; "" without one."""
    caption = image_path.with_suffix(".txt")
    return caption.read_text(encoding="utf-8").strip() if caption.is_file() else ""


@v3_node("LoadImageDataSetFromFolder", display_name="Load Image (from Folder)", category="image",
         python_module=MODULE, experimental=True, search_aliases=LOAD_ALIASES,
         description="Load a dataset of images from a specified folder and return a list of images. "
                     "Supported formats: PNG, JPG, JPEG, WEBP.",
         inputs=[_folder_combo("The folder to load images from.")],
         outputs=[Output("IMAGE", "images", is_list=True, tooltip="List of loaded images")])
def load_image_dataset_from_folder(folder: str) -> tuple[list]:
    """Every image of the input sub-folder `folder`, in name order, one `[1, H, W, 3]` each."""
    _root, paths = _folder_images(folder)
    return (_load_all(paths),)


@v3_node("LoadImageTextDataSetFromFolder", display_name="Load Image-Text (from Folder)", category="image",
         python_module=MODULE, experimental=True, search_aliases=LOAD_ALIASES,
         description="Load a dataset of pairs of images and text captions from a specified folder and return "
                     "them as a list. Supported formats: PNG, JPG, JPEG, WEBP.",
         inputs=[_folder_combo("The folder to load images and text captions from.")],
         outputs=[Output("IMAGE", "images", is_list=True, tooltip="List of loaded images"),
                  Output("STRING", "texts", is_list=True, tooltip="List of text captions")])
def load_image_text_dataset_from_folder(folder: str) -> tuple[list, list]:
    """The images of the input sub-folder `folder` (kohya repeat folders included) and their captions."""
    root = subfolder(current_env().input_dir, folder, "folder")
    if not root.is_dir():
        raise NodeInputError("folder", "a sub-folder of the input folder", repr(folder))
    paths = kohya_image_files(root)
    images = _load_all(paths)
    return (images, [read_caption(path) for path in paths])


def _png_pixels(image: Any, index: int) -> "np.ndarray":
    """One list item as uint8 `[H, W, C]`: `[1, H, W, C]`, `[H, W, C]` or channels-first `[C, H, W]`
    (C in 1, 3, 4), as ComfyUI's `save_images_to_folder` accepts."""
    import torch

    if not isinstance(image, torch.Tensor):
        raise NodeInputError("images", "a list of IMAGE tensors", f"item {index}: {describe(image)}")
    if image.ndim == 4 and image.shape[0] == 1:
        image = image[0]
    if image.ndim == 3 and image.shape[0] in (1, 3, 4) and image.shape[1] > 4 and image.shape[2] > 4:
        image = image.permute(1, 2, 0)
    if image.ndim != 3 or image.shape[-1] not in (1, 3, 4):
        raise NodeInputError("images", "images of one frame each ([1, H, W, C])", f"item {index}: {describe(image)}")
    pixels = image_to_uint8(image)
    return pixels[..., 0] if pixels.shape[-1] == 1 else pixels


def save_images_to_folder(images: list, folder: Path, prefix: str, overwrite: bool) -> list[str]:
    """Write each image as a PNG in `folder`; returns the file names (see the module docstring)."""
    from PIL import Image

    arrays = [_png_pixels(image, i) for i, image in enumerate(images)]
    folder.mkdir(parents=True, exist_ok=True)
    if overwrite:
        relative = os.path.normpath(prefix) if prefix else ""
        target = (folder / relative).parent.resolve() if relative else folder.resolve()
        if "\x00" in prefix or os.path.isabs(relative) or not target.is_relative_to(folder.resolve()):
            raise NodeInputError("filename_prefix", f"a prefix inside the folder {folder}",
                                 f"{prefix!r}, which leads outside it")
        target.mkdir(parents=True, exist_ok=True)
        names = [f"{os.path.basename(relative)}_{i:05d}.png" for i in range(len(arrays))]
    else:
        with image_input_errors():
            target, stem, counter, _sub = save_location(folder, prefix, 0, 0)
        names = [f"{stem}_{counter:05}_{i:05d}.png" for i in range(len(arrays))]
    for pixels, name in zip(arrays, names):
        Image.fromarray(pixels).save(target / name)
    return [(target / name).relative_to(folder.resolve()).as_posix() for name in names]


def _first(values: Any) -> Any:
    return values[0] if isinstance(values, list) and values else values


def _save_inputs(images: Any, folder_name: Any, filename_prefix: Any, mode: Any) -> tuple[list, Path, str, bool]:
    mode = _first(mode)
    if mode not in ("overwrite", "increment"):
        raise NodeInputError("mode", "'overwrite' or 'increment'", repr(mode))
    prefix = _first(filename_prefix)
    if not isinstance(prefix, str):
        raise NodeInputError("filename_prefix", "a STRING", describe(prefix))
    folder = subfolder(current_env().output_dir, _first(folder_name), "folder_name")
    return list(images or []), folder, prefix, mode == "overwrite"


_SAVE_INPUTS = [
    String("folder_name", default="dataset", tooltip="Name of the folder to save images to (inside output directory)."),
    String("filename_prefix", default="image", tooltip="Prefix for saved image filenames.", advanced=True),
    Combo("mode", ["overwrite", "increment"], default="overwrite",
          tooltip="Whether to overwrite existing files or increment filenames to avoid overwriting."),
]


@v3_node("SaveImageDataSetToFolder", display_name="Save Image (to Folder) (DEPRECATED)", category="image",
         python_module=MODULE, experimental=True, deprecated=True, output_node=True, input_is_list=True,
         search_aliases=SAVE_ALIASES, description="Save a dataset of images to a specified folder. Supported formats: PNG.",
         inputs=[Socket("images", "IMAGE", tooltip="List of images to save."), *_SAVE_INPUTS], outputs=[])
def save_image_dataset_to_folder(images: list, folder_name: list, filename_prefix: list, mode: list,
                                 prompt: Any = None, extra_pnginfo: Any = None) -> tuple:
    """Each image as a PNG in the output sub-folder `folder_name`."""
    items, folder, prefix, overwrite = _save_inputs(images, folder_name, filename_prefix, mode)
    save_images_to_folder(items, folder, prefix, overwrite)
    return ()


@v3_node("SaveImageTextDataSetToFolder", display_name="Save Image-Text (to Folder)", category="image",
         python_module=MODULE, experimental=True, output_node=True, input_is_list=True,
         search_aliases=["save folder", "save to folder", "save dataset", "save images", "save text", "export dataset"],
         description="Save a dataset of pairs of images and text captions to a specified folder. Images are saved "
                     "as PNG files and captions are saved as TXT files with the same filename_prefix.",
         inputs=[Socket("images", "IMAGE", tooltip="List of images to save."),
                 String("texts", optional=True, forceInput=True, tooltip="List of text captions to save."),
                 *_SAVE_INPUTS], outputs=[])
def save_image_text_dataset_to_folder(images: list, folder_name: list, filename_prefix: list, mode: list,
                                      texts: list | None = None, prompt: Any = None,
                                      extra_pnginfo: Any = None) -> tuple:
    """The images as PNGs and, when `texts` is given, caption i beside image i as `.txt` (a
    longer list's extra captions are not written, as in ComfyUI)."""
    items, folder, prefix, overwrite = _save_inputs(images, folder_name, filename_prefix, mode)
    names = save_images_to_folder(items, folder, prefix, overwrite)
    for index, (name, caption) in enumerate(zip(names, texts or [])):
        if not isinstance(caption, str):
            raise NodeInputError("texts", "a list of STRINGs", f"item {index}: {describe(caption)}")
        (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
    return ()


# -- transforms ------------------------------------------------------------------------------------

def quantize(image: "torch.Tensor") -> "torch.Tensor":
    """ComfyUI's PIL round trip without the resize: `trunc(clip(255 x)) / 255`, float32 on the CPU."""
    import numpy as np
    import torch

    return torch.from_numpy(image_to_uint8(image).astype(np.float32) / 255.0)


def _frames(images: Any, input_name: str = "images") -> "torch.Tensor":
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or 0 in images.shape:
        raise NodeInputError(input_name, "an IMAGE tensor [B, H, W, C]", describe(images))
    return images


def image_items(images: Any) -> list:
    """A list input as a flat list of `[1, H, W, C]` items (every frame of every batch), ComfyUI's
    `_ensure_image_list`."""
    import torch

    if isinstance(images, torch.Tensor):
        images = [images]
    items = []
    for index, item in enumerate(images or []):
        if not isinstance(item, torch.Tensor) or item.ndim != 4:
            raise NodeInputError("images", "a list of IMAGE tensors [B, H, W, C]", f"item {index}: {describe(item)}")
        items.extend(item[i:i + 1] for i in range(item.shape[0]))
    return items


def _per_frame(images: "torch.Tensor", fn: Any) -> "torch.Tensor":
    import torch

    return torch.cat([fn(images[i:i + 1]) for i in range(images.shape[0])], dim=0)


def _resize_lanczos(frame: "torch.Tensor", width: int, height: int) -> "torch.Tensor":
    """One `[1, H, W, C]` frame to `[1, height, width, C]` through Pillow's Lanczos."""
    if width < 1 or height < 1:
        raise NodeInputError("images", "an aspect ratio that keeps both sides at least 1 pixel",
                             f"an image of {frame.shape[2]}x{frame.shape[1]} resized to {width}x{height}")
    return lanczos(frame.movedim(-1, 1).cpu(), width, height).movedim(1, -1)


def shorter_edge_size(width: int, height: int, shorter_edge: int) -> tuple[int, int]:
    """(width, height) with the shorter side `shorter_edge`, the other scaled and truncated
    (a square counts its height)."""
    if width < height:
        return shorter_edge, int(height * (shorter_edge / width))
    return int(width * (shorter_edge / height)), shorter_edge


def longer_edge_size(width: int, height: int, longer_edge: int) -> tuple[int, int]:
    """(width, height) with the longer side `longer_edge`, the other scaled and truncated."""
    if width > height:
        return longer_edge, int(height * (longer_edge / width))
    return int(width * (longer_edge / height)), longer_edge


def _image_input(tooltip: str = "Image to process.") -> InputSpec:
    return Socket("images", "IMAGE", tooltip=tooltip)


_PROCESSED = Output("IMAGE", "images", tooltip="Processed images")
_PROCESSED_LIST = Output("IMAGE", "images", tooltip="Processed images", is_list=True)
_LIST_INPUT = "List of images to process."


@v3_node("ResizeImagesByShorterEdge", display_name="Resize Images by Shorter Edge (DEPRECATED)",
         category="image/transform", python_module=MODULE, experimental=True, deprecated=True,
         description="Resize images so that the shorter edge matches the specified dimension while preserving "
                     "aspect ratio.",
         inputs=[_image_input(), Int("shorter_edge", default=512, min=1, max=8192,
                                     tooltip="Target dimension for the shorter edge.")],
         outputs=[_PROCESSED])
def resize_images_by_shorter_edge(images: Any, shorter_edge: int) -> tuple:
    """Each frame resized (Lanczos) so that its shorter side is `shorter_edge`."""
    def one(frame):
        width, height = shorter_edge_size(frame.shape[2], frame.shape[1], shorter_edge)
        return _resize_lanczos(frame, width, height)
    return (_per_frame(_frames(images), one),)


@v3_node("ResizeImagesByLongerEdge", display_name="Resize Images by Longer Edge (DEPRECATED)",
         category="image/transform", python_module=MODULE, experimental=True, deprecated=True,
         description="Resize images so that the longer edge matches the specified dimension while preserving "
                     "aspect ratio.",
         inputs=[_image_input(), Int("longer_edge", default=1024, min=1, max=8192,
                                     tooltip="Target dimension for the longer edge.")],
         outputs=[_PROCESSED])
def resize_images_by_longer_edge(images: Any, longer_edge: int) -> tuple:
    """Each frame resized (Lanczos) so that its longer side is `longer_edge`."""
    def one(frame):
        width, height = longer_edge_size(frame.shape[2], frame.shape[1], longer_edge)
        return _resize_lanczos(frame, width, height)
    return (_per_frame(_frames(images), one),)


def crop_box(size: tuple[int, int], width: int, height: int, left: int, top: int) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of a `width` x `height` crop at (left, top), kept inside `size`."""
    return left, top, min(size[0], left + width), min(size[1], top + height)


@v3_node("CenterCropImages", display_name="Crop Image (Center)", category="image/transform", python_module=MODULE,
         experimental=True, search_aliases=CROP_ALIASES, description="Center crop an image to the specified dimensions.",
         inputs=[_image_input(), Int("width", default=512, min=1, max=8192, tooltip="Crop width."),
                 Int("height", default=512, min=1, max=8192, tooltip="Crop height.")],
         outputs=[_PROCESSED])
def center_crop_images(images: Any, width: int, height: int) -> tuple:
    """The centred `width` x `height` region of each frame (smaller where the frame is smaller)."""
    def one(frame):
        w, h = frame.shape[2], frame.shape[1]
        left, top, right, bottom = crop_box((w, h), width, height, max(0, (w - width) // 2), max(0, (h - height) // 2))
        return quantize(frame[:, top:bottom, left:right, :])
    return (_per_frame(_frames(images), one),)


def legacy_rng(seed: int) -> "np.random.RandomState":
    """NumPy's legacy generator as ComfyUI seeds the global one: `seed % (2**32 - 1)`."""
    import numpy as np

    return np.random.RandomState(int(seed) % (2**32 - 1))


@v3_node("RandomCropImages", display_name="Crop Image (Random)", category="image/transform", python_module=MODULE,
         experimental=True, search_aliases=CROP_ALIASES, description="Randomly crop an image to the specified dimensions.",
         inputs=[_image_input(), Int("width", default=512, min=1, max=8192, tooltip="Crop width."),
                 Int("height", default=512, min=1, max=8192, tooltip="Crop height."),
                 Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed.")],
         outputs=[_PROCESSED])
def random_crop_images(images: Any, width: int, height: int, seed: int) -> tuple:
    """A `width` x `height` region at a random corner: the generator is re-seeded for every frame
    (so a batch's frames share the corner); a side that fits draws nothing."""
    def one(frame):
        rng = legacy_rng(seed)
        w, h = frame.shape[2], frame.shape[1]
        max_left, max_top = max(0, w - width), max(0, h - height)
        left = int(rng.randint(0, max_left + 1)) if max_left > 0 else 0
        top = int(rng.randint(0, max_top + 1)) if max_top > 0 else 0
        left, top, right, bottom = crop_box((w, h), width, height, left, top)
        return quantize(frame[:, top:bottom, left:right, :])
    return (_per_frame(_frames(images), one),)


@v3_node("NormalizeImages", display_name="Normalize Image Colors", category="image/color", python_module=MODULE,
         experimental=True, search_aliases=["normalize", "normalize colors"],
         description="Normalize images using mean and standard deviation.",
         inputs=[_image_input(),
                 Float("mean", default=0.5, min=0.0, max=1.0, tooltip="Mean value for normalization.", advanced=True),
                 Float("std", default=0.5, min=0.001, max=1.0, tooltip="Standard deviation for normalization.",
                       advanced=True)],
         outputs=[_PROCESSED])
def normalize_images(images: Any, mean: float, std: float) -> tuple:
    """`(images - mean) / std`, unclamped."""
    return ((_frames(images) - mean) / std,)


@v3_node("AdjustBrightness", display_name="Adjust Brightness", category="image/adjustments", python_module=MODULE,
         experimental=True, search_aliases=["brightness"], description="Adjust the brightness of an image.",
         inputs=[_image_input(),
                 Float("factor", default=1.0, min=0.0, max=2.0,
                       tooltip="Brightness factor. 1.0 = no change, <1.0 = darker, >1.0 = brighter.")],
         outputs=[_PROCESSED])
def adjust_brightness(images: Any, factor: float) -> tuple:
    """`images * factor`, clamped to 0..1."""
    return ((_frames(images) * factor).clamp(0.0, 1.0),)


@v3_node("AdjustContrast", display_name="Adjust Contrast", category="image/adjustments", python_module=MODULE,
         experimental=True, search_aliases=["contrast"], description="Adjust the contrast of an image.",
         inputs=[_image_input(),
                 Float("factor", default=1.0, min=0.0, max=2.0,
                       tooltip="Contrast factor. 1.0 = no change, <1.0 = less contrast, >1.0 = more contrast.")],
         outputs=[_PROCESSED])
def adjust_contrast(images: Any, factor: float) -> tuple:
    """`(images - 0.5) * factor + 0.5`, clamped to 0..1."""
    return (((_frames(images) - 0.5) * factor + 0.5).clamp(0.0, 1.0),)


def _seed_input() -> InputSpec:
    return Int("seed", default=0, min=0, max=SEED_MAX, tooltip="Random seed.")


@v3_node("ShuffleDataset", display_name="Shuffle Images List", category="image/batch", python_module=MODULE,
         experimental=True, input_is_list=True, search_aliases=SHUFFLE_ALIASES,
         description="Randomly shuffle the order of images in a list.",
         inputs=[_image_input(_LIST_INPUT), _seed_input()], outputs=[_PROCESSED_LIST])
def shuffle_dataset(images: list, seed: list) -> tuple[list]:
    """The images (every frame an item) in the order of NumPy's permutation for `seed`."""
    items = image_items(images)
    order = legacy_rng(_first(seed)).permutation(len(items))
    return ([items[i] for i in order],)


@v3_node("ShuffleImageTextDataset", display_name="Shuffle Pairs of Image-Text", category="image/batch",
         python_module=MODULE, experimental=True, input_is_list=True, search_aliases=SHUFFLE_ALIASES,
         description="Randomly shuffle the order of pairs of image-text in a list.",
         inputs=[Socket("images", "IMAGE", tooltip="List of images to shuffle."),
                 String("texts", tooltip="List of texts to shuffle.", forceInput=True), _seed_input()],
         outputs=[Output("IMAGE", "images", is_list=True, tooltip="Shuffled images"),
                  Output("STRING", "texts", is_list=True, tooltip="Shuffled texts")])
def shuffle_image_text_dataset(images: list, texts: list, seed: list) -> tuple[list, list]:
    """Images and texts reordered by one permutation (of the images' count), pairs kept together.
    The list items are shuffled as they come (a batch stays one item); fewer texts than images is
    an error, extra texts are dropped, as in ComfyUI."""
    images, texts = list(images), list(texts)
    if len(texts) < len(images):
        raise NodeInputError("texts", f"a text for each of the {len(images)} images", f"{len(texts)} texts")
    order = legacy_rng(_first(seed)).permutation(len(images))
    return ([images[i] for i in order], [texts[i] for i in order])


def average_hash(image: "torch.Tensor") -> list[bool]:
    """64 bits: the image resized to 8x8 (Pillow's Lanczos on its uint8 pixels), turned grey
    (Pillow's "L"), each pixel above the mean (ComfyUI's ImageDeduplication hash)."""
    from PIL import Image

    pixels = image_to_uint8(image[0] if image.ndim == 4 else image)
    picture = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    grey = list(picture.resize((8, 8), Image.Resampling.LANCZOS).convert("L").getdata())
    mean = sum(grey) / len(grey)
    return [p > mean for p in grey]


@v3_node("ImageDeduplication", display_name="Deduplicate Images", category="image/batch", python_module=MODULE,
         experimental=True, input_is_list=True,
         search_aliases=["deduplicate", "remove duplicates", "similarity filter"],
         description="Remove duplicate or very similar images from a list.",
         inputs=[_image_input(_LIST_INPUT),
                 Float("similarity_threshold", default=0.95, min=0.0, max=1.0, advanced=True,
                       tooltip="Similarity threshold (0-1). Higher means more similar. Images above this threshold "
                               "are considered duplicates.")],
         outputs=[_PROCESSED_LIST])
def image_deduplication(images: list, similarity_threshold: list) -> tuple[list]:
    """The images in order, without those whose hash agrees with a kept one's in at least
    `similarity_threshold` of its 64 bits."""
    threshold = float(_first(similarity_threshold))
    items = image_items(images)
    hashes = [average_hash(item) for item in items]
    kept: list[int] = []
    for i, bits in enumerate(hashes):
        if not any(1.0 - sum(a != b for a, b in zip(bits, hashes[j])) / 64.0 >= threshold for j in kept):
            kept.append(i)
    return ([items[i] for i in kept],)


@v3_node("ImageGrid", display_name="Make Image Grid", category="image/batch", python_module=MODULE,
         experimental=True, input_is_list=True, search_aliases=["grid", "collage", "combine"],
         description="Arrange multiple images into a grid layout.",
         inputs=[_image_input(_LIST_INPUT),
                 Int("columns", default=4, min=1, max=20, tooltip="Number of columns in the grid."),
                 Int("cell_width", default=256, min=32, max=2048, tooltip="Width of each cell in the grid.",
                     advanced=True),
                 Int("cell_height", default=256, min=32, max=2048, tooltip="Height of each cell in the grid.",
                     advanced=True),
                 Int("padding", default=4, min=0, max=50, tooltip="Padding between images.", advanced=True)],
         outputs=[_PROCESSED])
def image_grid(images: list, columns: list, cell_width: list, cell_height: list, padding: list) -> tuple:
    """One RGB image `[1, H, W, 3]`: each item resized (Lanczos) to a cell, row by row, `padding`
    black pixels between cells."""
    import torch

    columns = checks.integer(_first(columns), "columns", 1)
    cell_w = checks.integer(_first(cell_width), "cell_width", 1)
    cell_h = checks.integer(_first(cell_height), "cell_height", 1)
    pad = checks.integer(_first(padding), "padding", 0)
    items = image_items(images)
    if not items:
        raise NodeInputError("images", "at least one image", "an empty list")
    rows = (len(items) + columns - 1) // columns
    grid = torch.zeros(1, rows * cell_h + (rows - 1) * pad, columns * cell_w + (columns - 1) * pad, 3)
    for index, item in enumerate(items):
        cell = _resize_lanczos(item, cell_w, cell_h)[0]  # [cell_h, cell_w, C]
        cell = cell.expand(-1, -1, 3) if cell.shape[-1] == 1 else cell[..., :3]
        y, x = (index // columns) * (cell_h + pad), (index % columns) * (cell_w + pad)
        grid[0, y:y + cell_h, x:x + cell_w, :] = cell
    return (grid,)


@v3_node("MergeImageLists", display_name="Merge Image Lists (DEPRECATED)", category="image/batch",
         python_module=MODULE, experimental=True, deprecated=True, input_is_list=True,
         search_aliases=["list", "merge list", "make list"], description="Concatenate multiple image lists into one.",
         inputs=[_image_input(_LIST_INPUT)], outputs=[_PROCESSED_LIST])
def merge_image_lists(images: list) -> tuple[list]:
    """The incoming images as one list, every frame an item."""
    return (image_items(images),)
