"""`comfy_api.latest._ui` (some packs import the private module directly)."""
from compat.v3.ui import *  # noqa: F401,F403
