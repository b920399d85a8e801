"""A family is one package (DESIGN.md, "Model families"): generic code in comfy_core reads the family
and never names one. Outside `comfy_core/families/` no module of comfy_core

- imports a family's package (`comfy_core.families.<name>`, as opposed to the generic
  `families.base` / `registry` / `architecture` / `errors` / `lora_keys`), at module level or inside
  a function;
- contains a string literal equal to a registered family's name or an architecture's name (the
  names come from the registry);
- tests `isinstance` against a class defined in a family's package.

Read from the source (ast), nothing is imported but the registry. Failures name file:line.
"""
from __future__ import annotations

import ast
from pathlib import Path

import comfy_core
from comfy_core.families import default_registry

ROOT = Path(comfy_core.__file__).parent
FAMILIES = ROOT / "families"
GENERIC_FAMILY_MODULES = frozenset({"base", "registry", "architecture", "errors", "lora_keys"})

# (file relative to comfy_core/, the literal) pairs allowed to stay, each with its reason.
ALLOWED_LITERALS: dict[tuple[str, str], str] = {
    # ComfyUI's CLIPLoader / DualCLIPLoader / TripleCLIPLoader `type` vocabulary (a wire constant
    # of its node definitions, mirrored by nodes/loaders.py): the words "sd3", "sdxl", "flux",
    # "chroma", "wan", "lumina2" there are ComfyUI's loader types, not our families; which types a
    # family answers is its `EncoderSetSpec.clip_types`.
    **{("split/clip_types.py", name): "ComfyUI's loader types"
       for name in ("sd3", "sdxl", "flux", "chroma", "wan", "lumina2", "qwen_image", "hidream", "flux2", "ltxv",
                    "omnigen2", "flux3", "stable_audio", "kandinsky5", "kandinsky5_image", "ace",
                    "hunyuan_video", "ideogram4", "boogu", "krea2", "mage", "joyimage", "fibo2", "lens",
                    "longcat_image", "pixeldit", "cogvideox", "newbie")},
    # The ADM names a caller may pass to `DiffusionModel(adm="sdxl")` (tests/comfy_core/
    # test_unet_parity.py does): resolved in models/ (layer 4 in docs/dev/layers.md, below the
    # families), so the conditioning classes they name cannot move into the family packages until
    # that string API goes.
    ("models/diffusion.py", "sdxl"): "legacy adm= name",
    ("models/diffusion.py", "sdxl_refiner"): "legacy adm= name",
    # The conditioning classes' `name` (ComfyUI's ADM kinds; SDXL / its refiner, Flux / schnell /
    # Kontext), which those adm= names select: they move with them.
    ("models/model_conditions.py", "sdxl"): "conditioning kind name",
    ("models/model_conditions.py", "sdxl_refiner"): "conditioning kind name",
    ("models/model_conditions.py", "flux"): "conditioning kind name",
    # Z-Image's Qwen3-4B encoder set was written in the text-encoder layer before its family
    # existed; its name is the family's until the set moves to comfy_core/families/zimage/clip.py.
}

# (file relative to comfy_core/, family package) imports allowed to stay. SD3 / SD3.5's ControlNets
# are built from SD3's MMDiT blocks and run as `controlnet.runner.ControlNet`s; docs/dev/layers.md
# puts controlnet (11) above families (7), so they cannot move into families/sd3/ until the
# ControlNet runner sits below the families.
ALLOWED_IMPORTS: dict[tuple[str, str], str] = {
    (f"controlnet/{name}.py", "sd3"): "SD3 ControlNets: controlnet is above families"
    for name in ("mmdit_controlnet", "load_mmdit", "sd3_runner", "dit_embedder")
} | {
    # Qwen-Image's ControlNets (InstantX's, VideoX-Fun's) are built from its DiT's blocks and take
    # a Wan 2.1 latent hint, under the same rule as SD3's above.
    ("controlnet/qwen_image_controlnet.py", "qwen_image"): "Qwen-Image ControlNets: controlnet is above families",
    ("controlnet/load_qwen_image.py", "qwen_image"): "Qwen-Image ControlNets: controlnet is above families",
    ("controlnet/load_qwen_image.py", "wan"): "Qwen-Image ControlNets' hint latent is the Wan 2.1 VAE's",
} | {
    # ComfyUI's model_patches kinds that exist for one family (model_patches is above families);
    # they belong in their families' packages once a family can declare its patch kinds.
    (f"model_patches/{name}.py", family): "a model patch kind built for one family"
    for name, family in (("diffsynth", "qwen_image"), ("diffsynth", "sd3"), ("diffsynth", "wan"),
                         ("zimage_fun", "flux"), ("zimage_fun", "zimage"),
                         ("multitalk", "wan"), ("patch_files", "wan"),  # InfiniteTalk's MultiTalk patch
                         ("patch_files", "minimax_h3"))  # MiniMax H3's Fun ControlNet-Union
}


def _generic_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if FAMILIES not in p.parents)


def _family_classes() -> frozenset[str]:
    names: set[str] = set()
    for path in FAMILIES.rglob("*.py"):
        if path.parent == FAMILIES:  # base.py, registry.py, architecture.py, ...: generic
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names.update(node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    return frozenset(names)


def _family_package(module: str) -> str | None:
    """The family package `module` (dotted) lies in, None for generic modules."""
    parts = module.split(".")
    if parts[:2] != ["comfy_core", "families"] or len(parts) < 3:
        return None
    return None if parts[2] in GENERIC_FAMILY_MODULES else parts[2]


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "comfy_core.families":  # `from comfy_core.families import sd1`: a package
                found += [(node.lineno, f"comfy_core.families.{alias.name}") for alias in node.names
                          if (FAMILIES / alias.name / "__init__.py").is_file()]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def _class_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [n for element in node.elts for n in _class_names(element)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def violations() -> list[str]:
    registry = default_registry()
    names = set(registry.names()) | {family.architecture.name for family in registry}
    names.discard("unet")  # the shared SD UNet's architecture: generic by design (models/unet.py)
    classes = _family_classes()
    out: list[str] = []
    for path in _generic_files():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imports(tree):
            package = _family_package(module)
            if package is not None and (rel, package) not in ALLOWED_IMPORTS:
                out.append(f"comfy_core/{rel}:{line}: imports the {package!r} family's {module}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                    and (rel, node.value) not in ALLOWED_LITERALS):
                out.append(f"comfy_core/{rel}:{node.lineno}: names the family / architecture {node.value!r}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                    and len(node.args) == 2):
                for name in _class_names(node.args[1]):
                    if name in classes:
                        out.append(f"comfy_core/{rel}:{node.lineno}: isinstance against the family class {name}")
    return out


def test_generic_code_names_no_family():
    found = violations()
    assert not found, "generic code names a family (DESIGN.md, Model families):\n" + "\n".join(found)


def test_the_check_sees_what_it_should():
    # The reading is only as good as its parts: each kind of naming is found.
    tree = ast.parse("from comfy_core.families import flux\nimport comfy_core.families.sd3.mmdit\n"
                     "from comfy_core.families.base import Family\n")
    assert [_family_package(m) for _, m in _imports(tree)] == [None, "flux", "sd3", None]
    assert "FluxTransformer" in _family_classes() and "MMDiT" in _family_classes()
    assert _class_names(ast.parse("isinstance(x, (a.MMDiT, WanModel))").body[0].value.args[1]) == ["MMDiT", "WanModel"]


def test_the_allow_list_is_still_needed():
    # An entry that no longer matches anything is dropped, so the lists only shrink.
    stale = [f"{rel}: {literal!r}" for rel, literal in ALLOWED_LITERALS
             if not any(isinstance(n, ast.Constant) and n.value == literal
                        for n in ast.walk(ast.parse((ROOT / rel).read_text(encoding="utf-8"))))]
    stale += [f"{rel}: imports {package!r}" for rel, package in ALLOWED_IMPORTS
              if not any(_family_package(m) == package
                         for _, m in _imports(ast.parse((ROOT / rel).read_text(encoding="utf-8"))))]
    assert not stale, "allow-list entries no longer needed:\n" + "\n".join(stale)
