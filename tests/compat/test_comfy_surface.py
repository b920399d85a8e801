"""ComfyUI 0.3.64's whole Python surface against ours (issue 31).

tests/data/comfy_surface_0.3.64.json is generated from ComfyUI's files by
scripts/comfy_surface.py (names and signatures only). With the compat layer installed, every
recorded module must import, every name exist, every callable accept the calls ComfyUI's accepts
(`signature_problem`), every built-in node class carry its class attributes and methods, and every
folder kind be known to `folder_paths`. What is left out is in `LEFT_OUT_MODULES` /
`LEFT_OUT_NAMES` below, each with why (a model family not implemented, ComfyUI's own application
or tooling, or "not yet": the work that remains); an entry that is no longer missing fails the
test too, so the lists only shrink.

    .venv/bin/python -m pytest tests/compat/test_comfy_surface.py -q
    PYTHONPATH=. .venv/bin/python tests/compat/test_comfy_surface.py [-v] [--raw]   # print the gaps

The pieces of the surface this comparison led to are tested for their behaviour in
test_comfy_surface_pieces.py; the generator in tests/scripts/test_comfy_surface_script.py.
"""
from __future__ import annotations

import fnmatch
import importlib
import inspect
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "comfy_surface_0.3.64.json"

# Folder kinds of today's ComfyUI (its folder_paths.py, late 2026) beyond 0.3.64's recorded ones.
TODAY_FOLDER_KINDS = ("latent_upscale_models", "datasets", "background_removal", "frame_interpolation",
                      "geometry_estimation", "optical_flow", "detection", "fonts")

# -- what we leave out, and why ------------------------------------------------------------------
# Every entry says why: model families this engine does not implement, ComfyUI's own application
# and tooling (deliberate), and "not yet" for what is still to build (the remaining work).
# The test fails on an entry that matches nothing any more, so both lists only shrink.

# Whole modules (fnmatch patterns on the module name), each with why; a module left out is not
# checked while it does not import (one that imports is checked, and its entry must go). Model families this engine does not implement come first: their network, text-encoder
# and node modules make no sense without the family (packs that need them need the family).
_FAMILY = "model family not implemented here ({}): its modules make no sense without it"
_INTERNALS = ("network internals of a family implemented here ({}): ours are comfy_core's modules, reached "
              "through {}; ComfyUI's own module of its parts is not yet provided")
LEFT_OUT_MODULES: dict[str, str] = {
    "comfy.ldm.ace.attention": _INTERNALS.format("ACE-Step 1's DiT", "comfy.ldm.ace.model"),
    "comfy.ldm.ace.vae.[!m]*": _INTERNALS.format("ACE-Step 1's music DCAE", "comfy.ldm.ace.vae.music_dcae_pipeline"),
    "comfy.ldm.ace.vae.music_[!d]*": _INTERNALS.format("ACE-Step 1's music DCAE", "comfy.ldm.ace.vae.music_dcae_pipeline"),
    "comfy.text_encoders.ace_text_cleaners": _INTERNALS.format("ACE-Step 1's lyrics tokenizer", "comfy.text_encoders.ace"),
    "comfy.ldm.mmaudio*": _FAMILY.format("MMAudio"),
    "comfy.audio_encoders.wav2vec2": ("network internals: the audio encoders are comfy_core/audio_encoders' networks, "
                                      "reached through comfy.audio_encoders.audio_encoders"),
    "comfy.audio_encoders.whisper": ("network internals: the audio encoders are comfy_core/audio_encoders' networks, "
                                     "reached through comfy.audio_encoders.audio_encoders"),
    "comfy.text_encoders.aura_t5": _FAMILY.format("AuraFlow"),
    "comfy.ldm.cascade.*": _FAMILY.format("Stable Cascade"),
    "comfy.ldm.chroma_radiance.layers": _INTERNALS.format("Chroma Radiance", "comfy.ldm.chroma_radiance.model"),
    "comfy.ldm.cosmos.*": _FAMILY.format("Cosmos"),
    "comfy.text_encoders.cosmos": _FAMILY.format("Cosmos"),
    "comfy.ldm.genmo.*": _FAMILY.format("Mochi"),
    "comfy.text_encoders.genmo": _FAMILY.format("Mochi"),
    "comfy.text_encoders.hunyuan_image": _FAMILY.format("HunyuanImage 2.1"),
    "comfy.text_encoders.llama": _INTERNALS.format("the Llama / Qwen / Gemma decoder towers (comfy_core/text_encoders')",
                                                   "each family's text-encoder set, e.g. comfy.text_encoders.hidream"),
    "comfy.ldm.hydit.*": _FAMILY.format("HunyuanDiT"),
    "comfy.text_encoders.hydit": _FAMILY.format("HunyuanDiT"),
    "comfy.text_encoders.bert": _FAMILY.format("HunyuanDiT's BERT text encoder"),
    "comfy.ldm.pixart.*": _FAMILY.format("PixArt"),
    "comfy.text_encoders.pixart_t5": _FAMILY.format("PixArt"),
    "comfy.text_encoders.qwen_vl": _INTERNALS.format("the Qwen2.5-VL vision tower (comfy_core/text_encoders')",
                                                     "comfy.text_encoders.qwen_image"),
    "comfy.ldm.flux.controlnet": _FAMILY.format("Flux ControlNets (InstantX, XLabs)"),
    # Not for packs: ComfyUI's own application and tooling.
    "app.*": "ComfyUI's server application classes (settings, users, frontend and model managers): the "
             "server here is web/; only `app.logger` is provided, over its log store",
    "comfy_api.internal*": "ComfyUI's API-version registry and async-to-sync machinery behind comfy_api's "
                           "versions; packs use the versioned modules (comfy_api.latest, v0_0_2), which exist",
    "comfy_api.version_list": "ComfyUI's list of API versions for its registry (see comfy_api.internal)",
    "comfy_api.generate_api_stubs": "a developer script that writes comfy_api's .pyi stubs",
    "comfy.comfy_types.examples.*": "example code of ComfyUI's typing documentation",
    "comfy_config.*": "the pyproject.toml parser of ComfyUI's registry tooling (comfy-cli), not a runtime module",
    # Not yet: modules of features this engine has in its own form, without ComfyUI's module.
    "comfy.k_diffusion.sa_solver": "not yet: SA-Solver's coefficient helpers",
    "comfy.extra_samplers.uni_pc": "not yet: UniPC's module (the uni_pc samplers exist as ours)",
    "comfy.checkpoint_pickle": "not yet: the unpickler allow-list module (our loaders read .ckpt their own way)",
    "comfy_api.latest._resources": "not yet: V3 node resources (files bundled with a node)",
}

# Names inside provided modules: {module pattern: (why, (name patterns, "Class.member" too))}. The
# modules packs use most are listed name by name, so a regression there is never hidden; model
# internals are listed by module.
LEFT_OUT_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    'comfy.audio_encoders.audio_encoders': (
        ("the networks' classes it imports (ComfyUI's constructors take dtype / device / operations): "
         "`AudioEncoderModel` builds comfy_core/audio_encoders' networks from ComfyUI's config dict"),
        ('Wav2Vec2Model', 'WhisperLargeV3',)),
    'comfy.cli_args': (
        ('argparse internals (the parser, its option groups, `EnumAction`, `is_valid_directory`): the flags '
         'are parsed by web/flags.py; packs read `args`, which exists'),
        ('DEFAULT_VERSION_STRING', 'EnumAction', 'attn_group', 'cache_group', 'cm_group', 'database_default_path',
         'fp_group', 'fpte_group', 'fpunet_group', 'fpvae_group', 'is_valid_directory', 'parser', 'upcast',
         'vram_group',)),
    'comfy.clip_vision': (
        ("not yet: ClipVisionModel's ComfyUI constructor `(json_config)` and `load_sd`, "
         'the DINOv2 table `IMAGE_ENCODERS`'),
        ('ClipVisionModel.__init__', 'ClipVisionModel.load_sd', 'IMAGE_ENCODERS',)),
    'comfy.comfy_types': (
        ('not yet: typing-only protocols of UNet wrappers (`UnetApplyFunction`, `UnetParams`, ...)'),
        ('UnetApplyConds', 'UnetApplyFunction', 'UnetParams', 'UnetWrapperFunction',)),
    'comfy.comfy_types.node_typing': (
        ('not yet: `StrEnum` and the option TypedDicts (typing only); `ComfyNodeABC.INPUT_TYPES` is abstract '
         'there'),
        ('ComfyNodeABC.INPUT_TYPES', 'MultiSelectOptions', 'RemoteInputOptions', 'StrEnum',)),
    'comfy.conds': (
        ("not yet: CONDNoiseShape.process_cond's second parameter is `device` here, `area` there"),
        ('CONDNoiseShape.process_cond',)),
    'comfy.controlnet': (
        ('ControlNet formats of families not implemented (SD3.5, HunyuanDiT, Flux InstantX/XLabs, Qwen) and '
         'their loading helpers; ControlLoraOps: not yet'),
        ('ControlLoraOps', 'controlnet_config', 'controlnet_load_state_dict', 'convert_mistoline',
         'load_controlnet_flux_instantx', 'load_controlnet_flux_xlabs_mistoline', 'load_controlnet_hunyuandit',
         'load_controlnet_mmdit', 'load_controlnet_qwen_instantx', 'load_controlnet_sd35',
         'load_controlnet_state_dict', 'load_t2i_adapter',)),
    'comfy.float': (
        ('not yet: `calc_mantissa`, an inner step of fp8 stochastic rounding (ours: compat/ldm_float.py)'),
        ('calc_mantissa',)),
    'comfy.gligen': (
        ("not yet: GLIGEN's building blocks under ComfyUI's names (PositionNet's third parameter is the hidden"
         ' width here, the Fourier frequencies there), `load_gligen` from a state dict (comfy.sd.load_gligen '
         'loads a file)'),
        ('FourierEmbedder', 'GatedCrossAttentionDense', 'GatedSelfAttentionDense.__init__',
         'GatedSelfAttentionDense2', 'PositionNet', 'load_gligen', 'ops',)),
    'comfy.k_diffusion.sampling': (
        ("not yet: optional parameters of the `*_gpu` SDE samplers (`eta`, ...), DEIS's `deis_mode`, DPM-"
         "Solver's parameter names, `res_multistep`, BrownianTree's `cpu` flag"),
        ('BatchedBrownianTree.__init__', 'BatchedBrownianTree.sort', 'BrownianTreeNoiseSampler.__init__',
         'DPMSolver.__init__', 'DPMSolver.dpm_solver_1_step', 'DPMSolver.dpm_solver_2_step',
         'DPMSolver.dpm_solver_3_step', 'DPMSolver.eps', 'res_multistep', 'sa_solver', 'sample_deis',
         'sample_dpmpp_2m_sde_gpu', 'sample_dpmpp_3m_sde_gpu', 'sample_dpmpp_sde_gpu',)),
    'comfy.latent_formats': (
        ('latent formats of families not implemented (Stable Cascade, HunyuanImage 2.1, SD x4 upscaler; Mochi, '
         "Cosmos 1 and Playground 2.5 are provided as data for packs' tables); SD15's constructor parameter name"),
        ('HunyuanImage21', 'HunyuanImage21Refiner', 'SC_B', 'SC_Prior', 'SD15.__init__', 'SD_X4',)),
    'comfy.weight_adapter*': (
        ("LoRA training's side of the adapters (`create_train`, `to_train`, the `*Diff` modules, LoHa's "
         "autograd functions): our trainer (comfy_core/training) keeps its own adapter records"),
        ('WeightAdapterTrainBase', '*.create_train', '*.to_train',
         'LoraDiff', 'LohaDiff', 'LokrDiff', 'OFTDiff', 'HadaWeight', 'HadaWeightTucker',)),
    'comfy.lora_convert': (
        ('key conversions of LoRA formats not supported yet (BFL control LoRA, Wan Fun, USO)'),
        ('convert_lora_bfl_control', 'convert_lora_wan_fun', 'convert_uso_lora',)),
    'comfy.model_base': (
        ('model classes of families not implemented (Hunyuan, Cosmos, Wan HuMo/Animate, ...) and BaseModel '
         'members not mapped yet'),
        ('BaseModel.apply_model', 'BaseModel.load_model_weights', 'BaseModel.process_timestep',
         'BaseModel.set_inpaint', 'BaseModel.state_dict_for_saving',
         'CosmosPredict2.process_timestep', 'Hunyuan3Dv2_1', 'HunyuanImage21', 'HunyuanImage21Refiner',
         'HunyuanVideo.scale_latent_inpaint', 'HunyuanVideoI2V.scale_latent_inpaint',
         'HunyuanVideoSkyreelsI2V.scale_latent_inpaint',
         'LTXV.process_timestep', 'StableAudio1.state_dict_for_saving', 'StageB', 'StageC',
         'WAN22.process_timestep',)),
    'comfy.model_detection': (
        ('not yet: `calculate_transformer_depth`'),
        ('calculate_transformer_depth',)),
    'comfy.model_management': (
        ('internals left out on purpose (tests/compat/test_compat_model_management.py NOT_PROVIDED: CUDA '
         'stream bookkeeping `STREAMS`/`stream_counters`, `interrupt_processing_mutex`, `use_more_memory`), '
         'names ComfyUI defines only on ROCm, DirectML or macOS (`arch`, `rocm_version`, `directml_device`, '
         "`device_index`, `mac_ver`) or a leftover loop variable (`temp`); not yet: LoadedModel's partial-"
         'loading steps'),
        ('LoadedModel.model_use_more_vram', 'LoadedModel.should_reload_model', 'STREAMS',
         'arch', 'device_index', 'directml_device', 'interrupt_processing_mutex', 'mac_ver', 'rocm_version',
         'stream_counters', 'temp', 'use_more_memory',)),
    'comfy.model_patcher': (
        ('not yet: applying hook weights outside a sampling run (`apply_hooks`, `patch_hooks`, ...: hook '
         'weights apply per cond group inside our sampler), low-VRAM partial loading (`LowVramPatch`, '
         '`load`, ...), weight wrappers'),
        ('AutoPatcherEjector', 'LowVramPatch', 'MemoryCounter', 'ModelPatcher.add_weight_wrapper',
         'ModelPatcher.apply_hooks', 'ModelPatcher.clean_hooks', 'ModelPatcher.clear_cached_hook_weights',
         'ModelPatcher.load', 'ModelPatcher.patch_cached_hook_weights',
         'ModelPatcher.patch_hook_weight_to_device', 'ModelPatcher.patch_hooks', 'ModelPatcher.unpatch_hooks', 'ModelPatcher.use_ejected',
         'UnetWrapperFunction', 'move_weight_functions', 'string_to_seed', 'wipe_lowvram_weight',)),
    'comfy.model_sampling': (
        ('not yet: the Cosmos and discrete-EDM tables'),
        ('ModelSamplingCosmosRFlow', 'ModelSamplingDiscreteEDM',)),
    'comfy.ops': (
        ('defined by ComfyUI only on a CUDA machine (`SDPA_BACKEND_PRIORITY`) or with the cublas_ops package '
         'installed (`cublas_ops`)'),
        ('SDPA_BACKEND_PRIORITY', 'cublas_ops',)),
    'comfy.samplers': (
        ('not yet: `cond_equal_size`, `add_area_dims`, `finalize_default_conds`; `KSAMPLER.sample` and '
         '`KSamplerX0Inpaint` take our guider first (`model_wrap` / `model` there), `CFGGuider.__call__` no `*args`'),
        ('CFGGuider.__call__', 'KSAMPLER.sample', 'KSamplerX0Inpaint.__init__', 'add_area_dims',
         'cond_equal_size', 'finalize_default_conds', 'uni_pc',)),
    'comfy.sd': (
        ("not yet: the CLIP constructor with ComfyUI's parameter names (comfy_core's class), text-encoder "
         'detection helpers, and names imported from modules of families not implemented'),
        ('CLIP.__init__', 'CLIP.add_hooks_to_dict', 'StageA',
         'StageC_coder', 'TEModel', 'detect_te_model',
         'llama_detect', 'model_detection_error_hint',)),
    'comfy.sd1_clip': (
        ("not yet: tokenizer and encoder constructors with ComfyUI's parameters, `load_sd`, "
         'parameter names'),
        ('SD1CheckpointClipModel', 'SD1ClipModel.encode_token_weights', 'SD1ClipModel.load_sd',
         'SD1Tokenizer.__init__', 'SDClipModel.LAYERS', 'SDClipModel.freeze', 'SDClipModel.process_tokens',
         'SDTokenizer.__init__', 'SDTokenizer.tokenize_with_weights', 'bundled_embed', 'parse_parentheses',
         'token_weights',)),
    'comfy.sdxl_clip': (
        ("not yet: constructors with ComfyUI's parameters, `load_sd`; Stable Cascade's CLIP-G (family not "
         'implemented)'),
        ('SDXLClipGTokenizer.__init__', 'SDXLClipModel.encode_token_weights', 'SDXLClipModel.load_sd',
         'SDXLTokenizer.__init__', 'StableCascadeClipG', 'StableCascadeClipGTokenizer', 'StableCascadeTokenizer',)),
    'comfy.supported_models_base': (
        ("not yet: members of ComfyUI's model config base that detection here does not use"),
        ('BASE.get_model', 'BASE.model_type', 'BASE.process_clip_state_dict',
         'BASE.process_clip_state_dict_for_saving', 'BASE.process_clip_vision_state_dict_for_saving',
         'BASE.process_unet_state_dict', 'BASE.process_unet_state_dict_for_saving', 'BASE.process_vae_state_dict',
         'BASE.process_vae_state_dict_for_saving',)),
    'comfy.utils': (
        ('key maps of families not implemented (PixArt, AuraFlow, MMDiT) and `ModelCheckpoint` (a pickle '
         'stand-in for old .ckpt files): not yet'),
        ('MMDIT_MAP_BASIC', 'MMDIT_MAP_BLOCK', 'ModelCheckpoint', 'PIXART_MAP_BASIC', 'PIXART_MAP_BLOCK',
         'auraflow_to_diffusers', 'pixart_to_diffusers',)),
    'comfy_api.latest': (
        ("ComfyUI's API-version plumbing (`ComfyAPI_latest`, proxied singletons, sync classes): not yet"),
        ('ComfyAPIBase', 'ComfyAPI_latest', 'ProxiedSingleton', 'create_sync_class',)),
    'comfy_api.latest._input_impl.video_types': (
        ('not yet: container helpers of the video writer'),
        ('container_to_output_format', 'get_open_write_kwargs',)),
    'comfy_api.latest._io': (
        ('not yet: V3 io types and helpers beyond the common ones of compat/v3/io.py'),
        ('Accumulation.AccumulationDict', 'Audio.AudioDict', 'AutogrowDynamic', 'ComboDynamic',
         'ComfyNode.GET_BASE_CLASS', 'Conditioning.CondList', 'Conditioning.PooledDict', 'DynamicInput.get_dynamic',
         'DynamicOutput', 'HiddenHolder.__init__', 'HiddenHolder.from_dict', 'Input.as_dict', 'Latent.LatentDict',
         'LossMap.LossMapDict', 'NodeInfoV1', 'NodeInfoV3', 'NodeOutput.from_dict',
         'Output.as_dict', 'Resources', 'ResourcesLocal', 'Schema.finalize', 'Schema.get_v1_info',
         'Schema.get_v3_info', 'Schema.validate', 'T', 'WidgetInput.__init__', 'WidgetInput.as_dict',
         'add_to_dict_v1', 'add_to_dict_v3', 'classproperty', 'comfytype', 'copy_class', 'first_real_override',
         'is_class', 'prune_dict', 'shallow_clone_class',)),
    'comfy_api.latest._ui': (
        ('not yet: the audio save helper and 3-D previews'),
        ('AudioSaveHelper', 'PreviewUI3D', 'SavedAudios', 'SavedResult.type',
         'TORCH_AUDIO_AVAILABLE',)),
    'comfy_api.v0_0_1': (
        ("ComfyUI's API-version adapters and generated sync stubs: not yet"),
        ('ComfyAPIAdapter_v0_0_1', 'ComfyAPIAdapter_v0_0_2', 'ComfyAPISyncStub', 'create_sync_class',)),
    'comfy_api.v0_0_2': (
        ("ComfyUI's API-version adapters and generated sync stubs: not yet"),
        ('ComfyAPIAdapter_v0_0_2', 'ComfyAPISyncStub', 'ComfyAPI_latest', 'create_sync_class',)),
    'comfy_execution.progress': (
        ("ComfyUI's module global of the current registry, rebound per prompt: `get_progress_state()` gives the "
         'running prompt\'s registry here (compat/progress_api.py)'),
        ('global_progress_registry',)),
    'comfy_execution.graph': (
        ("ComfyUI's executor classes (`ExecutionList`, `TopologicalSort`): the engine's executor is graph/"),
        ('ExecutionList', 'NodeNotFoundError', 'TopologicalSort', 'get_input_info',)),
    'comfy_execution.graph_utils': (
        ("not yet: Node's parameter names (`id`, `key` there; graph/expansion.py's NodeRef here)"),
        ('Node.__init__', 'Node.get_input', 'Node.set_input', 'Node.set_override_display_id',)),
    'execution': (
        ("ComfyUI's executor internals (PromptQueue's constructor): the engine's executor is graph/; "
         '`PromptExecutor`, `validate_prompt`, the cache classes (compat/execution_caching.py), ... exist'),
        ('CacheSet', 'CacheType.DEPENDENCY_AWARE', 'ExecutionList',
         'PromptQueue.ExecutionStatus', 'PromptQueue.__init__', 'PromptQueue.get_flags',
         'first_real_override', 'get_input_info', 'get_output_data', 'get_output_from_returns', 'is_class', 'make_locked_method_func',
         'merge_result_data',)),
    'nodes': (
        ('`init_public_apis` (the host registers the API versions); helpers inside node classes '
         "(`VAELoader.vae_list`, `LatentBlend.blend_mode`) and EmptyImage's `device`: not yet"),
        ('ComfyAPIWithVersion', 'EmptyImage.__init__', 'LatentBlend.blend_mode', 'VAELoader.load_taesd',
         'VAELoader.vae_list', 'init_public_apis', 'register_versions', 'supported_versions',)),
    'server': (
        ('aiohttp application plumbing (middlewares, `setup`, `start`, `add_routes`) and image-sending '
         'helpers: the server is web/'),
        ('CustomNodeManager', 'FrontendManager', 'ModelFileManager', 'PromptServer.__init__',
         'PromptServer.add_routes', 'PromptServer.get_queue_info', 'PromptServer.publish_loop',
         'PromptServer.queue_updated', 'PromptServer.send_image', 'PromptServer.send_image_with_metadata',
         'PromptServer.setup', 'PromptServer.start', 'PromptServer.start_multi_address', 'UserManager',
         'compress_body', 'create_cors_middleware', 'create_origin_only_middleware', 'is_loopback',
         'send_socket_catch_exception',)),
    'comfy.ldm.*': ("network internals: ours are comfy_core's networks, mapped to ComfyUI's module names where packs use "
        'them; the rest, and families not implemented, not yet', ('*',)),
    'comfy.image_encoders.*': ("image-encoder internals: ours is comfy_core.models.dinov2 (Dinov2Model built from our "
        'config, called with pixels), reached as Dinov2Model; its blocks and the BERT attention it reuses, not yet', ('*',)),
    'comfy.pixel_space_convert': ('the pixel-space identity VAE is our PixelSpaceVAE (the VAE interface of '
        'comfy_core.models.vae: `decode(latent)`, `encode(pixels)`)', ('PixelspaceConversionVAE.*',)),
    'comfy.text_encoders.*': ("text-encoder internals: ours are comfy_core's, mapped where packs use them; not yet", ('*',)),
    'comfy.cldm.*': ("ControlNet network internals (ours: comfy_core's ControlNet): not yet", ('*',)),
    'comfy.t2i_adapter.*': ('T2I-Adapter network internals: not yet', ('*',)),
    'comfy.clip_model': ("CLIP network internals (ours: comfy_core's text encoders): not yet", ('*',)),
    'comfy.diffusers_convert': ('diffusers key converters of families not implemented: not yet', ('*',)),
    'comfy.supported_models': ('model configs of families not implemented, and members detection here does not use', ('*',)),
    'comfy_extras.*': ("ComfyUI's loader entries of its own node modules (`comfy_entrypoint`, the `*Extension` classes: the "
        'engine registers its nodes itself), module-level helpers of those modules (their work is in our node'
        ' functions), and node types not built in here', ('*',)),
}

COMFY_TOP_LEVEL = frozenset({"comfy", "comfy_extras", "comfy_execution", "comfy_api", "comfy_config", "app",
                             "utils", "folder_paths", "nodes", "server", "execution", "latent_preview",
                             "node_helpers"})
# Outside imports of ComfyUI modules that packs read through the ComfyUI module (pack-surface.md):
# "module:name", e.g. `comfy.sample.np` (comfy/sample.py's `import numpy as np`).
OUTSIDE_IMPORTS_READ = frozenset({"comfy.sample:np"})

# Kinds of recorded name checked (the `imports` group is reported apart: a module's own imports
# such as `torch` or `logging` are names of it in ComfyUI, and packs do read a few of them).
GROUPS = ("module", "function", "class", "method", "attribute", "constant", "import", "node")


@dataclass(frozen=True)
class Gap:
    group: str  # one of GROUPS
    module: str
    name: str  # "" for a module, "Class.member" for members
    problem: str

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}" if self.name else self.module


def load_surface() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


# -- signatures ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "posonly", "pos", "kwonly", "varargs", "varkw"
    has_default: bool


def parse_signature(text: str) -> list[Param]:
    """The recorded form `"(a, b=, /, c, *args, d=, **kw)"` as parameters."""
    inner = text.strip()[1:-1].strip()
    tokens = [t.strip() for t in inner.split(",")] if inner else []
    params: list[Param] = []
    keyword_only = False
    if "/" in tokens:
        cut = tokens.index("/")
        params += [Param(t.rstrip("="), "posonly", t.endswith("=")) for t in tokens[:cut]]
        tokens = tokens[cut + 1:]
    for token in tokens:
        if token == "*":
            keyword_only = True
        elif token.startswith("**"):
            params.append(Param(token[2:], "varkw", False))
        elif token.startswith("*"):
            params.append(Param(token[1:], "varargs", False))
            keyword_only = True
        else:
            params.append(Param(token.rstrip("="), "kwonly" if keyword_only else "pos", token.endswith("=")))
    return params


_KINDS = {inspect.Parameter.POSITIONAL_ONLY: "posonly", inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
          inspect.Parameter.KEYWORD_ONLY: "kwonly", inspect.Parameter.VAR_POSITIONAL: "varargs",
          inspect.Parameter.VAR_KEYWORD: "varkw"}


def our_params(signature: inspect.Signature, drop_first: bool = False) -> list[Param]:
    params = [Param(p.name, _KINDS[p.kind], p.default is not inspect.Parameter.empty)
              for p in signature.parameters.values()]
    return params[1:] if drop_first and params and params[0].kind in ("posonly", "pos") else params


def signature_problem(theirs: list[Param], ours: list[Param]) -> str | None:
    """Why a call that ComfyUI's signature accepts could fail on ours, or None.

    Compatible means: ComfyUI's positional parameters are ours in the same order (names too,
    except ComfyUI's positional-only ones), or land in our `*args`; every keyword ComfyUI's
    accepts, ours accepts (by name or `**kwargs`); its `*args` / `**kwargs` are ours too; and no
    parameter ComfyUI lets a caller omit is required here. `*args` with `**kwargs` accepts all.
    """
    our_var_args = any(p.kind == "varargs" for p in ours)
    our_var_kw = any(p.kind == "varkw" for p in ours)
    if our_var_args and our_var_kw and not any(not p.has_default and p.kind in ("posonly", "pos", "kwonly")
                                               for p in ours):
        return None
    their_positional = [p for p in theirs if p.kind in ("posonly", "pos")]
    our_positional = [p for p in ours if p.kind in ("posonly", "pos")]
    for i, param in enumerate(their_positional):
        if i >= len(our_positional):
            if not our_var_args:
                return f"positional parameter {param.name!r} (#{i + 1}) has no place here"
            continue
        if param.kind == "pos" and our_positional[i].name != param.name:
            return f"positional parameter #{i + 1} is {param.name!r} there, {our_positional[i].name!r} here"
        if param.has_default and not our_positional[i].has_default:
            return f"{param.name!r} is optional there, required here"
    our_keywords = {p.name: p for p in ours if p.kind in ("pos", "kwonly")}
    for param in theirs:
        if param.kind in ("pos", "kwonly"):
            mine = our_keywords.get(param.name)
            if mine is None and not our_var_kw:
                return f"keyword {param.name!r} is not accepted here"
            if mine is not None and param.has_default and not mine.has_default:
                return f"{param.name!r} is optional there, required here"
    if any(p.kind == "varargs" for p in theirs) and not our_var_args:
        return "*args is accepted there, not here"
    if any(p.kind == "varkw" for p in theirs) and not our_var_kw:
        return "**kwargs is accepted there, not here"
    their_names = {p.name for p in theirs}
    for i, param in enumerate(ours):
        if param.kind in ("varargs", "varkw") or param.has_default:
            continue
        positional_slot = param.kind in ("posonly", "pos") and i < len(their_positional)
        if param.name not in their_names and not positional_slot:
            return f"{param.name!r} is required here and unknown there"
    return None


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def callable_problem(theirs: str, obj: Any, drop_first: bool = False) -> str | None:
    if not callable(obj):
        return f"not callable here ({type(obj).__name__})"
    signature = _signature(obj)
    if signature is None:
        return "no inspectable signature here"
    return signature_problem(parse_signature(theirs), our_params(signature, drop_first))


# -- comparing one module ------------------------------------------------------------------------

def _class_attribute_exists(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    # an annotated field without a class-level value (a dataclass or NamedTuple field, `x: int`)
    return any(name in getattr(klass, "__annotations__", {}) for klass in getattr(cls, "__mro__", ()))


def class_gaps(module: str, name: str, record: dict[str, Any], cls: Any, group_prefix: str = "") -> Iterator[Gap]:
    if not isinstance(cls, type):
        # a factory function standing for a class is enough when it is not subclassed; report it
        yield Gap("class", module, name, f"not a class here ({type(cls).__name__})")
        return
    for member, (kind, text) in record["methods"].items():
        key = f"{name}.{member}"
        if member == "__init__":
            problem = callable_problem(text, cls)
        elif _read(cls, member)[0] is _ABSENT:
            yield Gap(group_prefix or "method", module, key, _read(cls, member)[1])
            continue
        elif kind == "property":
            problem = None
        else:
            static = inspect.getattr_static(cls, member)
            if kind == "method" and not isinstance(static, (classmethod, staticmethod)):
                problem = callable_problem(text, getattr(cls, member), drop_first=True)
            else:  # a classmethod / staticmethod there: called on the class, so no `cls` to drop
                problem = callable_problem(text, getattr(cls, member))
        if problem:
            yield Gap(group_prefix or "method", module, key, problem)
    for attribute in record["attributes"]:
        if not _class_attribute_exists(cls, attribute):
            yield Gap(group_prefix or "attribute", module, f"{name}.{attribute}", "missing")


_ABSENT = object()


def _read(owner: Any, name: str) -> tuple[Any, str]:
    """`(value, "")`, or `(_ABSENT, why)`: a name whose reading raises is a gap too (a lazily
    resolved name whose home fails to import), never an error of this test."""
    try:
        return getattr(owner, name), ""
    except AttributeError:
        return _ABSENT, "missing"
    except Exception as exc:  # noqa: BLE001 - reported as the gap
        return _ABSENT, f"reading it raises {type(exc).__name__}: {exc}"


def module_gaps(module_name: str, record: dict[str, Any], node_classes: set[str]) -> Iterator[Gap]:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the gap being reported
        yield Gap("module", module_name, "", f"{type(exc).__name__}: {exc}")
        return
    for name, text in record["functions"].items():
        value, why = _read(module, name)
        if value is _ABSENT:
            yield Gap("function", module_name, name, why)
        elif problem := callable_problem(text, value):
            yield Gap("function", module_name, name, problem)
    for name, class_record in record["classes"].items():
        group = "node" if name in node_classes else "class"
        value, why = _read(module, name)
        if value is _ABSENT:
            yield Gap(group, module_name, name, why)
            continue
        yield from class_gaps(module_name, name, class_record, value, group_prefix="node" if group == "node" else "")
    for name in record["constants"]:
        value, why = _read(module, name)
        if value is _ABSENT:
            yield Gap("constant", module_name, name, why)
    for name, source in record["imports"].items():
        if comfy_import(module_name, name, source):
            value, why = _read(module, name)
            if value is _ABSENT:
                yield Gap("import", module_name, name, f"{why} (ComfyUI's module imports it from {source})")


def comfy_import(module: str, name: str, source: str) -> bool:
    """Whether a name a module binds by importing is checked: yes when it comes from ComfyUI
    (`comfy.samplers.k_diffusion_sampling`, `comfy.sd.model_detection`, ...) or is one of the
    outside imports packs are known to read (`OUTSIDE_IMPORTS_READ`). Names bound from the
    standard library or third-party packages (`torch`, `logging`, `Optional`) are not: ComfyUI
    exposes them by accident, a pack imports them from their package. A module's binding of a
    ComfyUI top-level package by `import comfy.utils` (the name `comfy`) is not either."""
    top = source.split(":")[0].split(".")[0]
    if top not in COMFY_TOP_LEVEL:
        return f"{module}:{name}" in OUTSIDE_IMPORTS_READ
    return name not in COMFY_TOP_LEVEL


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - any failure to import leaves the module out
        return False
    return True


def _left_out_module(module: str) -> str | None:
    for pattern in LEFT_OUT_MODULES:
        if fnmatch.fnmatchcase(module, pattern):
            return pattern
    return None


def _left_out_name(module: str, name: str) -> tuple[str, str] | None:
    for module_pattern, (_why, names) in LEFT_OUT_NAMES.items():
        if fnmatch.fnmatchcase(module, module_pattern):
            for name_pattern in names:
                if fnmatch.fnmatchcase(name, name_pattern):
                    return module_pattern, name_pattern
    return None


def surface_gaps(surface: dict[str, Any]) -> tuple[list[Gap], set]:
    """Every gap not on the allow-lists, and the allow-list entries that matched something."""
    gaps: list[Gap] = []
    used: set = set()
    for module_name, record in surface["modules"].items():
        pattern = _left_out_module(module_name)
        if pattern is not None and not _imports(module_name):
            used.add(pattern)
            continue
        # a left-out module that imports now is checked like any other, and its entry goes stale
        nodes = set(surface["node_classes"].get(module_name, ()))
        for gap in module_gaps(module_name, record, nodes):
            entry = _left_out_name(gap.module, gap.name)
            if entry is not None:
                used.add(entry)
            else:
                gaps.append(gap)
    return gaps, used


def folder_kind_gaps(surface: dict[str, Any]) -> list[str]:
    import folder_paths

    known = set(folder_paths.folder_names_and_paths)
    return [kind for kind in (*surface["folder_kinds"], *TODAY_FOLDER_KINDS) if kind not in known]


# -- the tests -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def surface() -> dict[str, Any]:
    return load_surface()


@pytest.fixture(scope="module")
def gaps_and_used(surface, tmp_path_factory):
    """One walk of the whole surface inside an installed session (every name is read once)."""
    import compat
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    registry = Registry()
    register_builtin_nodes(registry)
    env = Environment.rooted_at(tmp_path_factory.mktemp("surface"))
    env.ensure_dirs()
    session = compat.install(env, registry)
    with session.activate():
        yield surface_gaps(surface)


def test_the_recorded_surface_is_comfyui_0364s(surface):
    assert surface["comfyui_version"] == "0.3.64"
    # a few names every reader knows, so an empty or truncated file cannot pass
    assert "common_ksampler" in surface["modules"]["nodes"]["functions"]
    assert "upscale_methods" in surface["modules"]["nodes"]["classes"]["ImageScale"]["attributes"]
    assert "Guider_PerpNeg" in surface["modules"]["comfy_extras.nodes_perpneg"]["classes"]
    assert len(surface["modules"]) > 250 and "ImageScale" in surface["node_classes"]["nodes"]


@pytest.mark.parametrize("group", GROUPS)
def test_every_recorded_name_exists_with_a_compatible_signature(gaps_and_used, group):
    gaps, _ = gaps_and_used
    mine = [f"{g.key}: {g.problem}" for g in gaps if g.group == group]
    assert not mine, f"{len(mine)} {group} gap(s) of ComfyUI 0.3.64's surface:\n" + "\n".join(mine[:60])


def test_every_left_out_entry_is_still_needed(gaps_and_used):
    _, used = gaps_and_used
    entries = {(module, name) for module, (_why, names) in LEFT_OUT_NAMES.items() for name in names}
    stale = sorted(set(LEFT_OUT_MODULES) - used) + sorted(entries - used)
    assert not stale, f"allow-list entries that match nothing missing any more (remove them): {stale}"


def extension_point_problems(surface: dict[str, Any]) -> tuple[list[str], list[str]]:
    """`(problems, checked)` for every extension-point name of a surface module (compat/facade.py
    `point(...)`): its built-in, read from its home (not whatever the session holds), against
    ComfyUI's recorded signature of that name, or of the function the module imports under it
    (`comfy.ldm.flux.layers.attention` is `comfy.ldm.flux.math.attention`). The allow-lists do
    not apply: a pack replacing such a function is called by our runtime, and a pack calling it
    reaches our built-in, with ComfyUI's parameter names, keywords included."""
    from compat.facade import ExtensionPoint, _home

    problems: list[str] = []
    checked: list[str] = []
    for module_name, record in surface["modules"].items():
        if not _imports(module_name):
            continue
        module = sys.modules[module_name]
        for name, target in module.__dict__.get("_facade_names", {}).items():
            if not isinstance(target, ExtensionPoint):
                continue
            text = record["functions"].get(name)
            source = record["imports"].get(name)
            if text is None and source is not None:
                home, _, attribute = source.partition(":")
                text = surface["modules"].get(home, {}).get("functions", {}).get(attribute)
            if text is None:
                continue  # a constant there (`optimized_attention`) or not public: no signature recorded
            home, attribute = _home(target.built_in)
            built_in = getattr(importlib.import_module(home), attribute)
            checked.append(f"{module_name}:{name}")
            if problem := callable_problem(text, built_in):
                problems.append(f"{module_name}:{name} ({target.built_in}): {problem}")
    return problems, checked


def test_every_extension_points_built_in_has_comfyuis_signature(surface, gaps_and_used):
    problems, checked = extension_point_problems(surface)
    assert {"comfy.samplers:calc_cond_batch", "comfy.samplers:sampling_function", "comfy.samplers:cfg_function",
            "comfy.lora:calculate_weight", "comfy.ldm.flux.layers:attention"} <= set(checked)
    assert not problems, "\n".join(problems)


def test_every_folder_kind_of_0364_and_today_is_known(surface, session):
    assert not folder_kind_gaps(surface)


# -- the comparison itself -----------------------------------------------------------------------

def test_signature_comparison_accepts_compatible_and_refuses_incompatible_callables():
    def theirs(model, seed, steps=20, *, denoise=1.0):
        return None

    def same(model, seed, steps=20, *, denoise=1.0):
        return None

    def wider(model, seed, steps=20, extra=None, **kwargs):
        return None

    def renamed(model, noise_seed, steps=20, *, denoise=1.0):
        return None

    def stricter(model, seed, steps, *, denoise=1.0):
        return None

    def narrower(model, seed):
        return None

    def anything(*args, **kwargs):
        return None

    recorded = "(model, seed, steps=, *, denoise=)"
    assert callable_problem(recorded, same) is None
    assert callable_problem(recorded, wider) is None
    assert callable_problem(recorded, anything) is None
    assert "'seed'" in callable_problem(recorded, renamed)
    assert "optional there" in callable_problem(recorded, stricter)
    assert "no place here" in callable_problem(recorded, narrower)
    assert callable_problem("(a, /, b)", lambda x, b: None) is None  # positional-only names are free
    assert callable_problem("(x)", lambda x, y: None) == "'y' is required here and unknown there"
    assert callable_problem("(x, **kw)", lambda x: None) == "**kwargs is accepted there, not here"


def test_class_comparison_sees_methods_attributes_and_constructor():
    class Ours:
        upscale_methods = ["nearest-exact"]

        def __init__(self, root, transform=None):
            pass

        def upscale(self, image, method):
            return image

        @classmethod
        def INPUT_TYPES(cls):
            return {}

    record = {"bases": [], "attributes": ["upscale_methods", "crop_methods"],
              "methods": {"__init__": ["method", "(root, transform=)"], "upscale": ["method", "(image, method)"],
                          "INPUT_TYPES": ["classmethod", "()"], "missing": ["method", "()"]}}
    found = {(g.name, g.problem) for g in class_gaps("m", "Ours", record, Ours)}
    assert found == {("Ours.missing", "missing"), ("Ours.crop_methods", "missing")}


def _report() -> None:
    """Print the gaps by group and by module (`-v`: each gap; `--raw`: without the allow-lists,
    the figure to compare across versions of the compat layer)."""
    import tempfile

    import compat
    from graph.registry import Registry
    from nodes import register_builtin_nodes
    from nodes.environment import Environment

    if "--raw" in sys.argv:
        LEFT_OUT_MODULES.clear()
        LEFT_OUT_NAMES.clear()
    surface = load_surface()
    registry = Registry()
    register_builtin_nodes(registry)
    with tempfile.TemporaryDirectory() as tmp:
        env = Environment.rooted_at(tmp)
        env.ensure_dirs()
        session = compat.install(env, registry)
        with session.activate():
            gaps, _used = surface_gaps(surface)
            kinds = folder_kind_gaps(surface)
    verbose = "-v" in sys.argv
    by_group = Counter(g.group for g in gaps)
    print("gaps by group:", dict(by_group), "| folder kinds missing:", kinds)
    by_module = Counter(g.module for g in gaps if g.group != "import")
    for module, n in by_module.most_common(None if verbose else 40):
        print(f"{n:5d}  {module}")
    if verbose:
        for gap in gaps:
            print(f"{gap.group:9s} {gap.key}: {gap.problem}")
    missing_modules = {g.module for g in gaps if g.group == "module"}
    names_in_missing = sum(len(r["functions"]) + len(r["classes"]) + len(r["constants"])
                           + sum(len(c["methods"]) + len(c["attributes"]) for c in r["classes"].values())
                           for m, r in surface["modules"].items() if m in missing_modules)
    print("total (without imports):", sum(n for g, n in by_group.items() if g != "import"),
          "| imports:", by_group.get("import", 0),
          f"| names (functions, classes, constants, members) in the {len(missing_modules)} modules that "
          f"do not import: {names_in_missing}")


if __name__ == "__main__":
    _report()
