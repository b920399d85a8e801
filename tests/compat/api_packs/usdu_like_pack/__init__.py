"""A fixture pack that cleans up after its import as UltimateSDUpscale's `__init__.py` does
(tests/compat/test_compat_usdu.py): every module that appeared in `sys.modules` while it imported
is deleted again, so that its bundled `usdu_like_modules` package shadows nobody. What it
imported from outside its folder (`usdu_like_shared_lib`, which the test puts on `sys.path`)
must stay importable as the same module object afterwards, as it is in ComfyUI, where such
libraries were imported before any pack."""
import sys

original_modules = sys.modules.copy()

from .usdu_like_modules import shared_state  # noqa: E402  (the pack's own bundled package)

import usdu_like_shared_lib  # noqa: E402  (a library outside the pack, imported first here)

SHARED_LIB = usdu_like_shared_lib
OWN_MODULE = shared_state


class UsduLikeNode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 1})}}

    RETURN_TYPES = ("INT",)
    FUNCTION = "run"
    CATEGORY = "usdu_like"

    def run(self, value):
        import usdu_like_shared_lib as lib  # imported again at run time, as packs do

        return (lib.double(value),)


NODE_CLASS_MAPPINGS = {"UsduLikeNode": UsduLikeNode}

# "Remove any new modules" (UltimateSDUpscale): except this package itself.
for name in [name for name in sys.modules if name not in original_modules]:
    if name != __name__:
        del sys.modules[name]
