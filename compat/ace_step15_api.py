"""ComfyUI's ACE-Step 1.5 modules for packs: what corresponds here and what does not.

- `comfy.text_encoders.ace15` (`ACE15Tokenizer`, `ACE15TEModel`): our classes
  (`comfy_core.families.ace_step15.clip`) are ComfyUI's: a loaded ACE-Step 1.5 CLIP's tokenizer is
  an `ACE15Tokenizer`, whose `tokenize_with_weights(text, return_word_ids=False, **kwargs)` gives
  ComfyUI's keys (`lm_prompt`, `lm_prompt_negative`, `lyrics`, `qwen3_06b`, `lm_metadata`) through
  its `qwen3_06b` slot tokenizer. A pack wrapping that method (RyanOnTheInside's task prompts)
  wraps the tokenizer the text encoders use.
- `comfy.ldm.ace.ace_step15` (`AceStepConditionGenerationModel`, its encoder, DiT and audio
  tokenizer classes): not provided. Our network (`comfy_core.families.ace_step15.network.
  AceStep15Model`) holds the same weights under the same names but is built differently: it has no
  `prepare_condition`, its condition encoder returns no attention mask and its decoder takes
  `(x, timestep, timestep_r, context, context_latents)`, not ComfyUI's keyword arguments
  (`hidden_states=`, `encoder_hidden_states=`, ...). A pack replacing ComfyUI's `forward` with one
  that calls those would break every ACE-Step 1.5 run, and a subclass would never be built. Reading
  any of the module's names raises `AceStep15NetworkNotProvidedError`, an ImportError, so a
  guarded `from comfy.ldm.ace.ace_step15 import ...` (`except ImportError`) skips its patch and
  says why.
"""
from __future__ import annotations

from typing import Any, Callable

NETWORK_MODULE = "comfy.ldm.ace.ace_step15"
OUR_NETWORK = "comfy_core.families.ace_step15.network.AceStep15Model"


class AceStep15NetworkNotProvidedError(ImportError):
    """A name of ComfyUI's `comfy.ldm.ace.ace_step15` was read: this engine's ACE-Step 1.5 network
    does not have the structure of ComfyUI's classes (see the module docstring)."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(
            f"{module}.{name} is not provided by this engine: it runs ACE-Step 1.5 with its own network "
            f"({OUR_NETWORK}), whose structure differs from ComfyUI's AceStepConditionGenerationModel (no "
            "prepare_condition; its condition encoder returns no attention mask; its decoder takes (x, timestep, "
            "timestep_r, context, context_latents) rather than ComfyUI's keyword arguments), so code that patches "
            "or subclasses ComfyUI's ACE-Step 1.5 network classes cannot reach it. ACE-Step 1.5 runs through "
            "the built-in nodes (TextEncodeAceStepAudio1.5, EmptyAceStep1.5LatentAudio, KSampler, VAEDecodeAudio).",
            name=module, path=None)
        self.module = module
        self.attribute = name


def network_module_getattr(module: str) -> Callable[[str], Any]:
    """The module-level `__getattr__` of `comfy.ldm.ace.ace_step15`: every public name raises
    `AceStep15NetworkNotProvidedError`; private and dunder names are plain AttributeErrors."""

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise AceStep15NetworkNotProvidedError(module, name)

    return __getattr__
