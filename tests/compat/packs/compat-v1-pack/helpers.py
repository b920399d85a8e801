"""A helper module: imported relatively, as packs do (the folder name has a hyphen)."""
from comfy.comfy_types.node_typing import IO


class AnyType(str):
    """The popular wildcard trick: a str whose != is always False."""

    def __ne__(self, other):
        return False


ANY = AnyType("*")
NUMBER = IO.NUMBER
