"""`comfy_api.latest._io` (some packs import the private module directly)."""
from compat.v3.public_io import *  # noqa: F401,F403
from compat.v3.public_io import (Autogrow, ComfyNode, DynamicCombo, DynamicInput, DynamicSlot, Hidden,  # noqa: F401
                                 MatchType, NodeOutput, NodeReplace, Schema)
