"""Model families (SD1.x, SD2.x, SDXL, SDXL refiner) and their registry.

`default_registry()` returns a new `FamilyRegistry` holding the built-in families; callers that
add their own build on it (`registry.register(my_family.definition())`). See README.md.
"""
from __future__ import annotations

from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.registry import Detection, FamilyRegistrationError, FamilyRegistry


def default_registry() -> FamilyRegistry:
    """A fresh registry with the built-in families."""
    from comfy_core.families import sd1, sd2, sdxl, sdxl_refiner

    return FamilyRegistry([sd1.definition(), sd2.definition(), sdxl.definition(), sdxl_refiner.definition()])


__all__ = ["Detection", "Family", "FamilyRegistrationError", "FamilyRegistry", "Geometry", "SamplingPolicy",
           "Signature", "default_registry"]
