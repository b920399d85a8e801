"""ComfyUI's `comfy_extras.nodes_stable3d`: its nodes' facades (none built in yet) plus
`camera_embeddings`, which Easy-Use imports at load time (compat/stable3d.py)."""
from compat.extras_modules import export_nodes
from compat.facade import facade

export_nodes(globals(), __name__)
facade(__name__, {"camera_embeddings": "compat.stable3d:camera_embeddings"})
