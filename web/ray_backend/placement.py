"""Which free worker takes a prompt: one that already ran the same loader inputs (its models and
cached outputs are warm there: "affinity"), else the least-loaded one."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

# Inputs of ComfyUI's loader nodes that name a model file (CheckpointLoaderSimple, UNETLoader,
# CLIPLoader / DualCLIPLoader / TripleCLIPLoader / QuadrupleCLIPLoader, VAELoader, LoraLoader...).
LOADER_INPUTS = frozenset({"ckpt_name", "unet_name", "clip_name", "clip_name1", "clip_name2", "clip_name3",
                           "clip_name4", "vae_name", "lora_name", "control_net_name", "style_model_name",
                           "clip_vision_name", "upscale_model_name", "model_name"})

STARTING, READY, DEAD = "starting", "ready", "dead"


def loader_keys(prompt: Mapping[str, Any]) -> frozenset[str]:
    """`"input=value"` for every loader input of `prompt` given as a literal string."""
    keys = set()
    for node in prompt.values():
        inputs = node.get("inputs") if isinstance(node, Mapping) else None
        if not isinstance(inputs, Mapping):
            continue
        for name, value in inputs.items():
            if name in LOADER_INPUTS and isinstance(value, str):
                keys.add(f"{name}={value}")
    return frozenset(keys)


@dataclass(eq=False)
class WorkerSlot:
    """One worker position; its actor is replaced when it dies (`generation` counts them)."""

    index: int
    handle: Any = None
    state: str = STARTING
    busy: str | None = None  # the prompt id it runs
    loaded: set[str] = field(default_factory=set)  # loader keys of the prompts it ran
    prompts_run: int = 0
    generation: int = 0
    info: dict = field(default_factory=dict)  # what the actor said about itself (describe())
    # The actor's saved-file names -> the server's (files.write_files): a fresh actor starts empty.
    file_names: dict = field(default_factory=dict)
    # Input files the actor already has: name -> (mtime ns, size) when sent (files.input_files).
    sent_inputs: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"worker-{self.index}"

    def forget(self) -> None:
        """A new actor takes this slot: nothing loaded, no files."""
        self.loaded, self.file_names, self.sent_inputs = set(), {}, {}

    @property
    def free(self) -> bool:
        return self.state == READY and self.busy is None


def choose_worker(slots: Iterable[WorkerSlot], keys: frozenset[str]) -> WorkerSlot | None:
    """The free slot sharing most loader keys with the prompt; without any shared, the one that
    has run the fewest prompts (then the lowest index). None when no slot is free."""
    free = [s for s in slots if s.free]
    if not free:
        return None
    return min(free, key=lambda s: (-len(s.loaded & keys), s.prompts_run, s.index))
