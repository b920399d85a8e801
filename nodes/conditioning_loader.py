"""ConditioningLoader, "Load Conditioning" (today's ComfyUI, comfy_extras/nodes_cond.py): a
precomputed CONDITIONING read from a file in the `embeddings` model folders, as ComfyUI lists and
resolves them (comfy_core/folders.py; the combo offers every model file there). The file's
`conditioning` tensor is the conditioning; the plain options in its metadata and its other tensors
(numbered ones `name.0`, `name.1`, ... as one list) become the conditioning options, as ComfyUI's
`SaveConditioning` writes them (comfy_core/text_encoders/conditioning_files.py), e.g. to skip the
text encoder.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from graph.spec import REQUIRED, InputSpec
from graph.v3_schema import Output, v3_node
from nodes.environment import Environment, current_env, model_file
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_cond"
EMBEDDINGS = "embeddings"


def _conditioning_files(env: Any = None) -> list[str]:
    environment = env if isinstance(env, Environment) else current_env()
    return environment.folders.filenames(EMBEDDINGS)


@v3_node("ConditioningLoader", display_name="Load Conditioning", category="model/loaders", python_module=MODULE,
         description="Loads a conditioning saved with Save Conditioning, or any safetensors file with a "
                     "'conditioning' tensor, from the embeddings folder.",
         inputs=[InputSpec("conditioning_name", _conditioning_files, REQUIRED, {"multiselect": False})],
         outputs=[Output("CONDITIONING")])
def conditioning_loader(conditioning_name: str) -> tuple[list]:
    """The CONDITIONING stored in the named embeddings file."""
    from comfy_core.text_encoders.conditioning_files import ConditioningFileError, load_conditioning_file

    if not isinstance(conditioning_name, str):
        raise NodeInputError("conditioning_name", f"a file name in the {EMBEDDINGS} folders",
                             describe(conditioning_name))
    path = model_file(EMBEDDINGS, conditioning_name, "conditioning_name")
    try:
        return (load_conditioning_file(Path(path)),)
    except ConditioningFileError as exc:
        raise NodeInputError("conditioning_name", "a conditioning file (a 'conditioning' tensor [batch, tokens, "
                                                  "width] plus option tensors)", str(exc)) from exc
