"""The training-set nodes of ComfyUI's comfy_extras/nodes_dataset.py (2026), declared as ComfyUI's
V3 schema renders them (graph/v3_schema.py); behaviour read from that file, written here. All are
list nodes in "model/training":

* MakeTrainingDataset encodes each image with the VAE (`{"samples": vae.encode(image[..., :3])}`)
  and each caption with the CLIP (`encode_from_tokens_scheduled(tokenize(text))`, as
  CLIPTextEncode): one caption per image, one caption for all, or none (the empty prompt).
* ResolutionBucket flattens the latents to single samples (sample i paired with entry i of its
  conditioning) and stacks those of equal spatial size: one LATENT and one CONDITIONING (that
  bucket's entries) per size, in order of first appearance.
* SaveTrainingDataset writes `shard_0000.pkl`, ... (`torch.save` of `{"latents": [...],
  "conditioning": [...]}`, `shard_size` samples each) and `metadata.json` into a sub-folder of the
  first `datasets` folder; LoadTrainingDataset offers every folder under the `datasets` folders that
  holds a metadata.json or a .safetensors file and reads its shards back (`torch.load`,
  `weights_only=True`). A folder name that leaves the datasets folder, or names the folder itself,
  is refused with a `NodeInputError`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.dataset_nodes import subfolder
from nodes.environment import Environment, current_env
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_dataset"
CATEGORY = "model/training"


def _first(values: Any) -> Any:
    return values[0] if isinstance(values, list) and values else values


def _dataset_roots(env: Any = None) -> list[Path]:
    env = env if isinstance(env, Environment) else current_env()
    return env.folders.paths("datasets")


def list_dataset_folders(env: Any = None) -> list[str]:
    """Folders (relative, forward slashes, sorted) under the datasets folders that hold a
    metadata.json or a .safetensors file; the walk does not go into a folder it lists. Links are
    followed, each real folder once (ComfyUI's `list_dataset_folders`)."""
    found: set[str] = set()
    for root in _dataset_roots(env):
        if not root.is_dir():
            continue
        root = Path(os.path.abspath(root))
        seen: set[tuple[int, int]] = set()
        for dirpath, subdirs, filenames in os.walk(root, followlinks=True):
            try:
                stat = os.stat(dirpath)
            except OSError:
                subdirs[:] = []
                continue
            key = (stat.st_dev, stat.st_ino)
            if key in seen:
                subdirs[:] = []
                continue
            seen.add(key)
            if Path(dirpath) != root and ("metadata.json" in filenames
                                          or any(f.endswith(".safetensors") for f in filenames)):
                found.add(os.path.relpath(dirpath, root).replace(os.sep, "/"))
                subdirs[:] = []
                continue
            kept = []
            for name in subdirs:
                try:
                    child = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if (child.st_dev, child.st_ino) not in seen:
                    kept.append(name)
            subdirs[:] = kept
    return sorted(found)


def _dataset_subfolder(root: Path, name: Any) -> Path:
    target = subfolder(root, name, "folder_name")
    if target == Path(root).resolve():
        raise NodeInputError("folder_name", "a sub-folder of the datasets folder, e.g. 'my_dataset'", repr(name))
    return target


def dataset_save_dir(name: Any) -> Path:
    """Where SaveTrainingDataset writes `name`: inside the first datasets folder."""
    return _dataset_subfolder(_dataset_roots()[0], name)


def dataset_dir(name: Any) -> Path:
    """The first datasets folder that holds the folder `name`."""
    roots = _dataset_roots()
    for root in roots:
        target = _dataset_subfolder(root, name)
        if target.is_dir():
            return target
    raise NodeInputError("folder_name", f"a dataset folder in {', '.join(str(r) for r in roots)}", repr(name))


def _latent_samples(latent: Any, index: int, input_name: str = "latents") -> Any:
    import torch

    if not isinstance(latent, dict) or not isinstance(latent.get("samples"), torch.Tensor):
        raise NodeInputError(input_name, "a list of LATENTs ({'samples': tensor})", f"item {index}: {describe(latent)}")
    return latent["samples"]


@v3_node("MakeTrainingDataset", display_name="Make Training Dataset", category=CATEGORY, python_module=MODULE,
         experimental=True, input_is_list=True, search_aliases=["encode dataset"],
         description="Encode images with VAE and texts with CLIP to create a training dataset of latents and "
                     "conditionings.",
         inputs=[Socket("images", "IMAGE", tooltip="List of images to encode."),
                 Socket("vae", "VAE", tooltip="VAE model for encoding images to latents."),
                 Socket("clip", "CLIP", tooltip="CLIP model for encoding text to conditioning."),
                 String("texts", optional=True, forceInput=True,
                        tooltip="List of text captions. Can be length n (matching images), 1 (repeated for all), "
                                "or omitted (uses empty string).")],
         outputs=[Output("LATENT", "latents", is_list=True, tooltip="List of latent dicts"),
                  Output("CONDITIONING", "conditioning", is_list=True, tooltip="List of conditioning lists")])
def make_training_dataset(images: list, vae: list, clip: list, texts: list | None = None) -> tuple[list, list]:
    """A latent per image and a conditioning per caption (see the module docstring)."""
    vae = checks.vae(_first(vae))
    clip = checks.clip(_first(clip))
    images = list(images)
    texts = list(texts) if texts else [""]
    if len(texts) == 1 and len(images) > 1:
        texts = texts * len(images)
    elif len(texts) != len(images):
        raise NodeInputError("texts", f"{len(images)} texts (one per image), 1 or none", f"{len(texts)} texts")
    latents = []
    for index, image in enumerate(images):
        image = checks.image_batch(image, "images")
        latents.append({"samples": vae.encode(image[:, :, :, :3])})
    conditioning = []
    for text in texts:
        tokens = clip.tokenize(checks.text(text, "texts"))
        if hasattr(clip, "encode_from_tokens_scheduled"):
            conditioning.append(clip.encode_from_tokens_scheduled(tokens))
        else:
            cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
            conditioning.append([[cond, {"pooled_output": pooled}]])
    return (latents, conditioning)


@v3_node("ResolutionBucket", display_name="Resolution Bucket", category=CATEGORY, python_module=MODULE,
         experimental=True, input_is_list=True,
         search_aliases=["bucket by resolution", "group by resolution", "batch by resolution"],
         description="Group latents and conditionings into buckets",
         inputs=[Socket("latents", "LATENT", tooltip="List of latent dicts to bucket by resolution."),
                 Socket("conditioning", "CONDITIONING", tooltip="List of conditioning lists (must match latents length).")],
         outputs=[Output("LATENT", "latents", is_list=True,
                         tooltip="List of batched latent dicts, one per resolution bucket."),
                  Output("CONDITIONING", "conditioning", is_list=True,
                         tooltip="List of condition lists, one per resolution bucket.")])
def resolution_bucket(latents: list, conditioning: list) -> tuple[list, list]:
    """Samples of equal (h, w) stacked into one LATENT each, with their conditioning entries."""
    import torch

    if len(latents) != len(conditioning):
        raise NodeInputError("conditioning", f"{len(latents)} conditionings (one per latent)",
                             f"{len(conditioning)} conditionings")
    buckets: dict[tuple[int, int], tuple[list, list]] = {}
    for index, (latent, cond) in enumerate(zip(latents, conditioning)):
        samples = _latent_samples(latent, index)
        if not isinstance(cond, list) or len(cond) < samples.shape[0]:
            raise NodeInputError("conditioning", f"a conditioning with an entry per sample ({samples.shape[0]})",
                                 f"item {index}: {describe(cond)}"
                                 + (f" of {len(cond)} entries" if isinstance(cond, list) else ""))
        for i in range(samples.shape[0]):
            key = (int(samples.shape[-2]), int(samples.shape[-1]))
            bucket = buckets.setdefault(key, ([], []))
            bucket[0].append(samples[i])
            bucket[1].append(cond[i])
    return ([{"samples": torch.stack(lat, dim=0)} for lat, _c in buckets.values()],
            [conds for _l, conds in buckets.values()])


@v3_node("SaveTrainingDataset", display_name="Save Training Dataset", category=CATEGORY, python_module=MODULE,
         experimental=True, output_node=True, input_is_list=True, search_aliases=["export dataset", "save dataset"],
         description="Save encoded training dataset (latents + conditioning) to disk for efficient loading during "
                     "training.",
         inputs=[Socket("latents", "LATENT", tooltip="List of latent dicts from MakeTrainingDataset."),
                 Socket("conditioning", "CONDITIONING", tooltip="List of conditioning lists from MakeTrainingDataset."),
                 String("folder_name", default="training_dataset",
                        tooltip="Name of folder to save the dataset into, inside the datasets directory. Subfolders "
                                "like 'project/run1' are allowed."),
                 Int("shard_size", default=1000, min=1, max=100000, tooltip="Number of samples per shard file.",
                     advanced=True)],
         outputs=[])
def save_training_dataset(latents: list, conditioning: list, folder_name: list, shard_size: list,
                          prompt: Any = None, extra_pnginfo: Any = None) -> tuple:
    """The samples in shards of `shard_size`, and metadata.json (num_samples, num_shards, shard_size)."""
    import torch

    size = checks.integer(_first(shard_size), "shard_size", 1)
    if len(latents) != len(conditioning):
        raise NodeInputError("conditioning", f"{len(latents)} conditionings (one per latent)",
                             f"{len(conditioning)} conditionings")
    folder = dataset_save_dir(_first(folder_name))
    folder.mkdir(parents=True, exist_ok=True)
    count = len(latents)
    shards = (count + size - 1) // size
    for shard in range(shards):
        start = shard * size
        data = {"latents": list(latents[start:start + size]), "conditioning": list(conditioning[start:start + size])}
        with open(folder / f"shard_{shard:04d}.pkl", "wb") as handle:
            torch.save(data, handle)
    metadata = {"num_samples": count, "num_shards": shards, "shard_size": size}
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2), encoding="utf-8")
    return ()


@v3_node("LoadTrainingDataset", display_name="Load Training Dataset", category=CATEGORY, python_module=MODULE,
         experimental=True, search_aliases=["import dataset", "training data"],
         description="Load encoded training dataset (latents + conditioning) from disk for use in training.",
         inputs=[InputSpec("folder_name", list_dataset_folders, REQUIRED,
                           {"tooltip": "Saved dataset to load, from the datasets directory.", "multiselect": False})],
         outputs=[Output("LATENT", "latents", is_list=True, tooltip="List of latent dicts"),
                  Output("CONDITIONING", "conditioning", is_list=True, tooltip="List of conditioning lists")])
def load_training_dataset(folder_name: str) -> tuple[list, list]:
    """Every `shard_*.pkl` of the dataset folder, in name order, concatenated."""
    import torch

    folder = dataset_dir(folder_name)
    shards = sorted(f for f in os.listdir(folder) if f.startswith("shard_") and f.endswith(".pkl"))
    if not shards:
        raise NodeInputError("folder_name", "a dataset folder holding shard_*.pkl files", str(folder))
    latents: list = []
    conditioning: list = []
    for name in shards:
        with open(folder / name, "rb") as handle:
            data = torch.load(handle, weights_only=True)
        latents.extend(data["latents"])
        conditioning.extend(data["conditioning"])
    return (latents, conditioning)
