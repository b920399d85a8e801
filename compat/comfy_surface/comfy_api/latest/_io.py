"""`comfy_api.latest._io` (some packs import the private module directly)."""
from compat.v3.io import *  # noqa: F401,F403
from compat.v3.io import ComfyNode, Hidden, NodeOutput, Schema  # noqa: F401
