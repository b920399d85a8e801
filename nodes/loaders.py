"""Loader nodes: CheckpointLoaderSimple, CheckpointLoader, VAELoader, and the split-file loaders
UNETLoader, CLIPLoader, DualCLIPLoader, DiffusersLoader (ComfyUI's names and sockets).

File lists come from the environment's model folders (`models/checkpoints`, `models/vae`,
`models/diffusion_models` + legacy `models/unet`, `models/text_encoders` + legacy `models/clip`,
`models/diffusers`, and the folders of `extra_model_paths.yaml`), evaluated whenever the node
definitions are rendered. The work is `comfy_core.loading` (`load_checkpoint`, `load_vae`) and
`comfy_core.split` (`load_diffusion_model`, `load_text_encoders`, `load_diffusers`); these nodes
only resolve names and options.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from graph.native import Combo, Output, node
from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Combo as V3Combo, Output as V3Output, v3_node
from nodes.environment import Environment, current_env, model_file, model_files
from nodes.errors import NodeInputError


def _env(env: Any) -> Environment:
    return env if isinstance(env, Environment) else current_env()


# ComfyUI's `configs` folder holds LDM yaml configs (CheckpointLoader's config_name).
CONFIG_EXTENSIONS = (".yaml",)


_files = model_files  # the loader combos' live options (other node modules import this name)



def _torch_dtype(name: Any, what: str) -> Any:
    import torch

    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if name not in dtypes:
        raise NodeInputError(what, f"one of {sorted(dtypes)}", repr(name))
    return dtypes[name]


def _options(weight_dtype: str = "default", prediction: str = "auto") -> Any:
    """Load options from the environment's dtype policy plus the node's explicit choices.

    `env.dtype_policy` is a comfy_core DtypePolicy, None (the compute device's defaults), or
    `{component: "fp32"|"fp16"|"bf16"}` with components unet, vae, text: the server's precision
    flags, kept as names so that start-up imports no torch (web/config.py DtypeSettings)."""
    from comfy_core.checkpoint.dtype import COMPONENTS, DtypePolicy
    from comfy_core.loading import LoadOptions

    env = current_env()
    policy = env.dtype_policy
    if not isinstance(policy, DtypePolicy):
        # The defaults of the device the memory manager computes on, with the named overrides.
        if policy is not None and not isinstance(policy, Mapping):
            raise NodeInputError("env.dtype_policy", "a DtypePolicy, {component: dtype name} or None",
                                 type(policy).__name__)
        names = dict(policy or {})
        unknown = sorted(set(names) - set(COMPONENTS))
        if unknown:
            raise NodeInputError("env.dtype_policy", f"components among {list(COMPONENTS)}", repr(unknown))
        device = getattr(env.memory, "device", None)
        policy = DtypePolicy(device=str(device) if device is not None else "cpu",
                             **{component: _torch_dtype(name, f"env.dtype_policy[{component!r}]")
                                for component, name in names.items()})
    if weight_dtype != "default":
        policy = dataclasses.replace(policy, unet=_torch_dtype(weight_dtype, "weight_dtype"))
    return LoadOptions(dtype_policy=policy, prediction=None if prediction == "auto" else prediction,
                       mmap=getattr(env, "mmap", True))


def _default_attention(model: Any = None, vae: Any = None) -> None:
    """Give freshly loaded patchers the host's default attention backend (the server's attention
    flags, `env.attention_backend` / `env.vae_attention_backend`): a patch option on these
    patchers only, never a process-wide switch."""
    import torch

    from comfy_core.devices.attention_probe import attention_backend_for

    env = current_env()
    for patcher, name in ((model, getattr(env, "attention_backend", None)),
                          (vae, getattr(env, "vae_attention_backend", None))):
        if patcher is not None and name is not None:
            # A backend asked for that cannot run on this device and dtype (xformers on a CPU, say)
            # becomes SDPA, said once in the log.
            device = getattr(patcher, "load_device", None) or "cpu"
            dtype = patcher.model_dtype() if hasattr(patcher, "model_dtype") else torch.float32
            patcher.set_attention_backend(attention_backend_for(device, dtype, requested=name))


def _embedding_lookup(clip: Any) -> None:
    """`embedding:NAME` in prompts reads the embeddings folders, as ComfyUI's checkpoint loaders
    give their CLIP `embedding_directory` (comfy_core/text_encoders/embedding_files.py)."""
    if clip is None or not hasattr(clip, "set_embedding_lookup"):
        return
    from comfy_core.folders import ModelFolderError
    from comfy_core.text_encoders.embedding_files import FolderEmbeddingLookup

    try:
        folders = current_env().folders.paths("embeddings")
    except ModelFolderError:
        return
    clip.set_embedding_lookup(FolderEmbeddingLookup(folders))


def _track(*patchers: Any) -> None:
    """Hand the loaded patchers to the host's memory manager, when it has one."""
    memory = current_env().memory
    if memory is None:
        return
    for patcher in patchers:
        if patcher is not None:
            memory.track(getattr(patcher, "patcher", patcher))  # CLIP objects hold their patcher


@node("CheckpointLoaderSimple", category="loaders", display_name="Load Checkpoint",
      description="Loads a diffusion model checkpoint; the model family is detected from its weights.",
      inputs=[Combo("ckpt_name", _files("checkpoints"), tooltip="The name of the checkpoint (model) to load.")],
      outputs=[Output("MODEL", tooltip="The model used for denoising latents."),
               Output("CLIP", tooltip="The CLIP model used for encoding text prompts."),
               Output("VAE", tooltip="The VAE model used for encoding and decoding images to and from latent space.")])
def checkpoint_loader_simple(ckpt_name: str) -> tuple[Any, Any, Any]:
    from comfy_core.loading import load_checkpoint

    loaded = load_checkpoint(model_file("checkpoints", ckpt_name, "ckpt_name"), _options())
    _default_attention(loaded[0], loaded[2])
    _embedding_lookup(loaded[1])
    _track(*loaded)
    return loaded


@node("CheckpointLoader", category="advanced/loaders", display_name="Load Checkpoint With Config (DEPRECATED)",
      deprecated=True,
      inputs=[Combo("config_name", _files("configs", CONFIG_EXTENSIONS)), Combo("ckpt_name", _files("checkpoints"))],
      outputs=[Output("MODEL"), Output("CLIP"), Output("VAE")])
def checkpoint_loader(config_name: str, ckpt_name: str) -> tuple[Any, Any, Any]:
    """ComfyUI's deprecated loader with an LDM yaml config: here the family still comes from the
    weights, and the config says only what weights cannot show, the prediction type
    (`model.params.parameterization: "v"`)."""
    from comfy_core.loading import load_checkpoint

    prediction = config_prediction(model_file("configs", config_name, "config_name"))
    loaded = load_checkpoint(model_file("checkpoints", ckpt_name, "ckpt_name"), _options(prediction=prediction))
    _default_attention(loaded[0], loaded[2])
    _embedding_lookup(loaded[1])
    _track(*loaded)
    return loaded


def config_prediction(path: Path) -> str:
    """"v" when an LDM config's `model.params.parameterization` is "v", else "eps" (its default)."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise NodeInputError("config_name", "a readable LDM yaml config", f"{path.name}: {exc}") from exc
    params = (config.get("model") or {}).get("params") or {} if isinstance(config, dict) else {}
    return "v" if isinstance(params, dict) and params.get("parameterization") == "v" else "eps"


@node("CheckpointLoaderTyped", category="loaders", display_name="Load Checkpoint (typed)",
      description="Loads a checkpoint with explicit choices: UNet weight dtype and prediction type.",
      inputs=[Combo("ckpt_name", _files("checkpoints")),
              Combo("weight_dtype", ["default", "fp32", "fp16", "bf16"], default="default", optional=True),
              Combo("prediction", ["auto", "eps", "v"], default="auto", optional=True)],
      outputs=[Output("MODEL"), Output("CLIP"), Output("VAE")])
def checkpoint_loader_typed(ckpt_name: str, weight_dtype: str = "default",
                            prediction: str = "auto") -> tuple[Any, Any, Any]:
    from comfy_core.loading import load_checkpoint

    loaded = load_checkpoint(model_file("checkpoints", ckpt_name, "ckpt_name"), _options(weight_dtype, prediction))
    _default_attention(loaded[0], loaded[2])
    _embedding_lookup(loaded[1])
    _track(*loaded)
    return loaded


PIXEL_SPACE = "pixel_space"  # today's ComfyUI's VAELoader choice with no file (comfy_core/models/pixel_space_vae.py)


def _vae_names(env: Any = None) -> list[str]:
    return [*_files("vae")(env), PIXEL_SPACE]


@node("VAELoader", category="loaders", display_name="Load VAE",
      inputs=[Combo("vae_name", _vae_names)], outputs=[Output("VAE")])
def vae_loader(vae_name: str) -> tuple[Any]:
    from comfy_core.loading import load_vae

    if vae_name == PIXEL_SPACE:
        from comfy_core.models.pixel_space_vae import MARKER

        import torch

        source: Any = {MARKER: torch.tensor(1.0)}
    else:
        source = model_file("vae", vae_name, "vae_name")
    vae = load_vae(source, _options())
    _default_attention(vae=vae)
    _track(vae)
    return (vae,)


# --- split files: diffusion model, text encoders, diffusers folders (comfy_core.split) ---------

UNET_WEIGHT_DTYPES = ["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]
CLIP_DEVICES = ["default", "cpu"]
CLIP_LOADER_DESCRIPTION = (
    "[Recipes]\n\nstable_diffusion: clip-l\nstable_cascade: clip-g\nsd3: t5 xxl/ clip-g / clip-l\nstable_audio: t5 base\n"
    "mochi: t5 xxl\ncosmos: old t5 xxl\nlumina2: gemma 2 2B\nwan: umt5 xxl\n hidream: llama-3.1 (Recommend) or t5\n"
    "omnigen2: qwen vl 2.5 3B")
DUAL_CLIP_LOADER_DESCRIPTION = (
    "[Recipes]\n\nsdxl: clip-l, clip-g\nsd3: clip-l, clip-g / clip-l, t5 / clip-g, t5\nflux: clip-l, t5\n"
    "hidream: at least one of t5 or llama, recommended t5 and llama\nhunyuan_image: qwen2.5vl 7b and byt5 small")
DIFFUSERS_INDEX = "model_index.json"


# Today's ComfyUI's type lists (0.3.64's first, then the types added since; equal to
# comfy_core.split.clip_types', which imports torch through the text-encoder package; rendering
# /object_info must not). A type whose encoders are not built here is refused when loading.
CLIP_LOADER_TYPES = ["stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv", "pixart", "cosmos",
                     "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2", "qwen_image", "hunyuan_image",
                     "flux2", "ovis", "longcat_image", "cogvideox", "lens", "pixeldit", "ideogram4", "boogu", "krea2",
                     "joyimage", "mage", "minimax", "flux3", "fibo2"]
DUAL_CLIP_LOADER_TYPES = ["sdxl", "sd3", "flux", "hunyuan_video", "hidream", "hunyuan_image", "hunyuan_video_15",
                          "kandinsky5", "kandinsky5_image", "ltxv", "newbie", "ace"]


def _unet_dtype(weight_dtype: str) -> tuple[Any, bool]:
    """UNETLoader's choice -> (storage dtype or None, fp8 matrix products), as ComfyUI's
    `model_options` "dtype" / "fp8_optimizations"."""
    import torch

    choices = {"default": (None, False), "fp8_e4m3fn": (torch.float8_e4m3fn, False),
               "fp8_e4m3fn_fast": (torch.float8_e4m3fn, True), "fp8_e5m2": (torch.float8_e5m2, False)}
    if weight_dtype not in choices:
        raise NodeInputError("weight_dtype", f"one of {UNET_WEIGHT_DTYPES}", repr(weight_dtype))
    return choices[weight_dtype]


def _load_clip_files(paths: list[Path], clip_type: str, device: str) -> Any:
    from comfy_core.split import UnsupportedClipTypeError, load_text_encoders

    if device not in CLIP_DEVICES:
        raise NodeInputError("device", f"one of {CLIP_DEVICES}", repr(device))
    try:
        clip = load_text_encoders(paths, clip_type, _options(), load_device="cpu" if device == "cpu" else None)
    except UnsupportedClipTypeError as exc:
        raise NodeInputError("type", "a text encoder type of a family this engine has", str(exc)) from exc
    _embedding_lookup(clip)
    _track(clip)
    return clip


@node("UNETLoader", category="advanced/loaders", display_name="Load Diffusion Model",
      inputs=[Combo("unet_name", _files("diffusion_models")), Combo("weight_dtype", UNET_WEIGHT_DTYPES)],
      outputs=[Output("MODEL")])
def unet_loader(unet_name: str, weight_dtype: str) -> tuple[Any]:
    """A diffusion model file alone (models/diffusion_models, models/unet): bare LDM, checkpoint or
    diffusers UNet; fp8 weight dtypes store the weights in fp8 and compute in the device's dtype."""
    from comfy_core.split import load_diffusion_model

    dtype, fast = _unet_dtype(weight_dtype)
    model = load_diffusion_model(model_file("diffusion_models", unet_name, "unet_name"), _options(),
                                 weight_dtype=dtype, fp8_optimizations=fast)
    _default_attention(model)
    _track(model)
    return (model,)


@node("CLIPLoader", category="advanced/loaders", display_name="Load CLIP", description=CLIP_LOADER_DESCRIPTION,
      inputs=[Combo("clip_name", _files("text_encoders")), Combo("type", CLIP_LOADER_TYPES),
              Combo("device", CLIP_DEVICES, optional=True, advanced=True)],
      outputs=[Output("CLIP")])
def clip_loader(clip_name: str, type: str = "stable_diffusion", device: str = "default") -> tuple[Any]:
    return (_load_clip_files([model_file("text_encoders", clip_name, "clip_name")], type, device),)


@node("DualCLIPLoader", category="advanced/loaders", display_name="DualCLIPLoader",
      description=DUAL_CLIP_LOADER_DESCRIPTION,
      inputs=[Combo("clip_name1", _files("text_encoders")), Combo("clip_name2", _files("text_encoders")),
              Combo("type", DUAL_CLIP_LOADER_TYPES), Combo("device", CLIP_DEVICES, optional=True, advanced=True)],
      outputs=[Output("CLIP")])
def dual_clip_loader(clip_name1: str, clip_name2: str, type: str, device: str = "default") -> tuple[Any]:
    paths = [model_file("text_encoders", clip_name1, "clip_name1"), model_file("text_encoders", clip_name2, "clip_name2")]
    return (_load_clip_files(paths, type, device),)


# Today's ComfyUI (comfy_extras/nodes_sd3.py@45e9c52c5ef96f95ac2230975e72f6b470e10042) declares
# TripleCLIPLoader with the V3 schema: "Load CLIP (Triple)" in model/loaders, its recipe text, and an
# optional advanced `device` combo after the three files.
@v3_node("TripleCLIPLoader", category="model/loaders", display_name="Load CLIP (Triple)",
         python_module="comfy_extras.nodes_sd3", description="Recipes:\nsd3: clip-l, clip-g, t5",
         inputs=[*(InputSpec(f"clip_name{i}", _files("text_encoders"), REQUIRED, {"multiselect": False})
                   for i in range(1, 4)),
                 V3Combo("device", CLIP_DEVICES, optional=True, advanced=True)],
         outputs=[V3Output("CLIP")])
def triple_clip_loader(clip_name1: str, clip_name2: str, clip_name3: str, device: str = "default") -> tuple[Any]:
    """SD3's three text encoders (CLIP-L, CLIP-G, T5-XXL in any order: told apart by their weights).
    `device` "cpu" keeps them on the CPU, as CLIPLoader's (today's execute: load and offload device
    the CPU)."""
    paths = [model_file("text_encoders", name, f"clip_name{i}") for i, name in enumerate((clip_name1, clip_name2, clip_name3), 1)]
    return (_load_clip_files(paths, "sd3", device),)


def _diffusers_folders(env: Any = None) -> list[str]:
    """DiffusersLoader's combo: the folders under models/diffusers holding a model_index.json."""
    return _env(env).folders.folders_holding("diffusers", DIFFUSERS_INDEX)


@node("DiffusersLoader", category="advanced/loaders/deprecated", display_name="DiffusersLoader",
      inputs=[Combo("model_path", _diffusers_folders)],
      outputs=[Output("MODEL"), Output("CLIP"), Output("VAE")])
def diffusers_loader(model_path: str) -> tuple[Any, Any, Any]:
    """A diffusers pipeline folder (unet/, text_encoder/, text_encoder_2/, vae/) under models/diffusers."""
    from comfy_core.split import is_diffusers_folder, load_diffusers

    folder = current_env().folders.full_folder_path("diffusers", model_path)
    if folder is None or not is_diffusers_folder(folder):
        raise NodeInputError("model_path", f"a folder with a {DIFFUSERS_INDEX} in the diffusers folders",
                             repr(model_path))
    loaded = load_diffusers(folder, _options())
    _default_attention(loaded[0], loaded[2])
    _embedding_lookup(loaded[1])
    _track(*loaded)
    return loaded
