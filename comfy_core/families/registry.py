"""`FamilyRegistry`: the known model families, and detection of a checkpoint's family.

A registry is an object passed around explicitly (no module-level instance); `default_registry()`
in `comfy_core.families` builds one holding the built-in families. Registration refuses a second
family with the same name and a family whose signature equals a registered one (they could
never be told apart). Detection refuses a file no family matches, or more than one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from comfy_core.families.errors import AmbiguousFamilyError, UnknownFamilyError
from comfy_core.families.base import Family

log = logging.getLogger(__name__)


class FamilyRegistrationError(ValueError):
    """A family definition duplicates or conflicts with a registered one."""


@dataclass(frozen=True)
class Detection:
    family: Family
    unet_config: Any  # the diffusion network's config (UNetConfig, ...); None when the file has none

    @property
    def config(self) -> Any:
        return self.unet_config


class FamilyRegistry:
    def __init__(self, families: tuple[Family, ...] | list[Family] = ()) -> None:
        self._families: dict[str, Family] = {}
        for family in families:
            self.register(family)

    def register(self, family: Family) -> None:
        if not isinstance(family, Family):
            raise FamilyRegistrationError(f"expected a Family, got {type(family).__name__}")
        if family.name in self._families:
            raise FamilyRegistrationError(f"family {family.name!r} is already registered")
        for other in self._families.values():
            if other.signature == family.signature:
                raise FamilyRegistrationError(
                    f"family {family.name!r} has the same detection signature as {other.name!r}; "
                    "they could never be told apart")
        self._families[family.name] = family

    def get(self, name: str) -> Family:
        try:
            return self._families[name]
        except KeyError:
            raise KeyError(f"no model family {name!r}; known: {sorted(self._families)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._families

    def __iter__(self) -> Iterator[Family]:
        return iter(self._families.values())

    def __len__(self) -> int:
        return len(self._families)

    def names(self) -> list[str]:
        return list(self._families)

    def detect(self, tensors: Mapping[str, Any], path: str | Path = "<memory>",
               metadata: Mapping[str, str] | None = None) -> Detection:
        """The one family whose signature matches `tensors` (name -> object with `.shape`).

        Reads names and shapes only (the file's `metadata` completes the config of networks
        that read it, `Architecture.detect_with_metadata`). Raises `UnknownFamilyError` / `AmbiguousFamilyError`
        naming `path`.
        """
        names = frozenset(tensors)
        facts_by_key: dict[tuple[str, str], dict[str, Any] | None] = {}
        structure_errors: dict[tuple[str, str], str] = {}
        matched: list[tuple[Family, dict[str, Any] | None]] = []
        for family in self._families.values():
            facts = self._facts(family, tensors, names, facts_by_key, structure_errors, metadata)
            if family.signature.matches(names, facts):
                matched.append((family, facts))
        if not matched:
            hint = f" (network structure: {'; '.join(structure_errors.values())})" if structure_errors else ""
            raise UnknownFamilyError(
                path, f"no known model family matches its {len(names)} tensors{hint}; known families: "
                      f"{', '.join(self._families)}")
        if len(matched) > 1:
            raise AmbiguousFamilyError(
                path, f"matches several model families: {', '.join(f.name for f, _ in matched)}")
        family, facts = matched[0]
        config = family.unet_config(tensors, metadata) if facts is not None else None
        if config is not None and family.architecture.head_layout:
            log.info("%s: %s (UNet %d ch x %s, %d res blocks, depth %s, context %d, %s projections%s)",
                     Path(str(path)).name, family.display_name, config.model_channels, list(config.channel_mult),
                     config.num_res_blocks, list(config.transformer_depth), config.context_dim,
                     "linear" if config.use_linear_in_transformer else "conv",
                     f", ADM {config.adm_in_channels}" if config.adm_in_channels else "")
        elif config is not None:
            log.info("%s: %s (%s)", Path(str(path)).name, family.display_name, config)
        return Detection(family, config)

    def _facts(self, family: Family, tensors: Mapping[str, Any], names: Any,
               cache: dict[tuple[str, str], dict[str, Any] | None], errors: dict[tuple[str, str], str],
               metadata: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """The facts of `family`'s architecture under its prefix (None: the network is not there
        or does not read), computed once per (architecture, prefix)."""
        architecture, prefix = family.architecture, family.unet_prefix
        key = (architecture.name, prefix)
        if key not in cache:
            cache[key] = None
            if architecture.present(names, prefix):
                try:
                    with_metadata = architecture.detect_with_metadata
                    config = (with_metadata(tensors, prefix, metadata or {}) if with_metadata is not None
                              else architecture.detect(tensors, prefix))
                    cache[key] = architecture.facts(config)
                except architecture.errors as exc:
                    errors[key] = str(exc)
        return cache[key]

    def detect_diffusion_model(self, tensors: Mapping[str, Any], path: str | Path = "<memory>",
                               metadata: Mapping[str, str] | None = None) -> Detection:
        """The family of a diffusion model that comes alone (UNETLoader's split files), its
        tensors presented under the families' `unet_prefix` (`comfy_core.split` renames them).

        Detection by the same UNet facts as for single files (`Signature.matches_diffusion_model`),
        without the text-encoder prefixes a split file lacks. Families that differ only in their
        text encoders declare `Signature.diffusion_model` facts; where several families match, the
        one whose facts say the most wins (a family declaring none is assumed to be told apart by
        its UNet facts alone), and a tie is an `AmbiguousFamilyError`. Reads names and shapes only.
        """
        names = frozenset(tensors)
        facts_by_key: dict[tuple[str, str], dict[str, Any] | None] = {}
        structure_errors: dict[tuple[str, str], str] = {}
        matched: list[Family] = []
        for family in self._families.values():
            facts = self._facts(family, tensors, names, facts_by_key, structure_errors, metadata)
            if facts is not None and family.signature.matches_diffusion_model(facts):
                matched.append(family)
        if not matched:
            hint = f" (network structure: {'; '.join(structure_errors.values())})" if structure_errors else ""
            raise UnknownFamilyError(
                path, f"not a diffusion model of a known family{hint}; known families: {', '.join(self._families)}")
        most = max(len(f.signature.diffusion_model) for f in matched)
        best = [f for f in matched if len(f.signature.diffusion_model) == most]
        if len(best) > 1:
            raise AmbiguousFamilyError(
                path, f"the diffusion model fits several model families: {', '.join(f.name for f in best)}")
        family = best[0]
        config = family.unet_config(tensors, metadata)
        if family.architecture.head_layout:
            log.info("%s: diffusion model of %s (UNet %d ch x %s, context %d%s)", Path(str(path)).name,
                     family.display_name, config.model_channels, list(config.channel_mult), config.context_dim,
                     f", ADM {config.adm_in_channels}" if config.adm_in_channels else "")
        else:
            log.info("%s: diffusion model of %s (%s)", Path(str(path)).name, family.display_name, config)
        return Detection(family, config)

    def encoder_sets(self) -> list[Any]:
        """The distinct text-encoder sets of the registered families, in registration order
        (what CLIPLoader-style loaders match a set of towers against)."""
        sets: list[Any] = []
        for family in self._families.values():
            spec = family.text_encoders
            if spec is not None and all(spec.name != s.name for s in sets):
                sets.append(spec)
        return sets
