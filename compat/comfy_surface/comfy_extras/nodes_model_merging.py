"""ComfyUI's `comfy_extras.nodes_model_merging`: the facades of its nodes (ModelMergeSimple, ...,
CheckpointSave, ModelSave, CLIPSave, VAESave) plus `save_checkpoint(model, clip=None, vae=None,
clip_vision=None, filename_prefix=None, output_dir=None, prompt=None, extra_pnginfo=None)`,
CheckpointSave's file writer, which goes through `comfy.sd.save_checkpoint` as packs left it
(compat/checkpoint_save.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"save_checkpoint": "compat.checkpoint_save:model_merging_save_checkpoint"})
