"""`comfy_api.latest.io` as packs see it (ComfyUI's `_io_public`): the schema names of
compat/v3/io.py, the dynamic inputs of compat/v3/dynamic.py and today's further types of
compat/v3/io_types.py (both build on io.py, so they are joined here rather than in it)."""
from compat.v3.io import *  # noqa: F401,F403
from compat.v3.io import (ComfyNode, Hidden, HiddenHolder, NodeOutput, NodeReplace, NodeReplaceError,  # noqa: F401
                          Schema, SchemaError)
from compat.v3.dynamic import (Autogrow, DynamicCombo, DynamicInput, DynamicInputError, DynamicSlot,  # noqa: F401
                               MatchType)
from compat.v3.io_types import *  # noqa: F401,F403
from compat.v3.pricing import PriceBadge, PriceBadgeDepends  # noqa: F401
