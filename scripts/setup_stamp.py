#!/usr/bin/env python3
"""Whether scripts/setup.sh can skip its work: a stamp of what the last successful setup installed from.

setup.sh runs this with the environment's own interpreter (`.venv/bin/python -I`, standard library
only), so one short process both reads the stamp and probes the environment:

    setup_stamp.py check [--dev] [--cpu|--cuda]   exit 0: .venv matches, setup can be skipped;
                                                  else setup is needed (one line on stdout says why)
    setup_stamp.py write [--dev] --torch 'TAG SPEC'   after a setup that succeeded: probe and record
    setup_stamp.py probe [--dev]                  print what the probe sees (JSON), or why it fails

An interpreter that is missing or does not run fails `check` as well, and setup runs.

The stamp is `.venv/setup-stamp.json`, inside the environment it describes, so deleting `.venv`
deletes it too; setup.sh removes it before installing, so a setup that stops half-way leaves none.
It holds:

- the SHA-256 of each input file: every `requirements*.txt`, `pyproject.toml`, `scripts/setup.sh`,
  `scripts/torch_build.py` (the torch pin) and this script;
- the torch build chosen (`TORCH_TAG TORCH_SPEC` of scripts/torch_build.py, which follows the
  NVIDIA driver, `--cpu` / `--cuda` and `TORCH_BUILD`);
- the mode (`runtime`, or `dev` for `--dev`, which also installs the test tools; a dev stamp
  satisfies a plain check, not the other way round);
- what the import probe saw: the environment's Python (version, implementation, ABI tag,
  `sysconfig.get_platform()`) and the installed version of every distribution the requirement
  files name (following `-r`).
- in dev mode, that the test data of `requirements-test-data.txt` is in `.venv/test-data/` (setup.sh
  installs it there with `pip install --target`, beside the environment rather than in it).

The import probe reads each of those distributions' installed version from its metadata and asks
the import system to locate its top-level module (`importlib.util.find_spec`), without importing
it (importing torch alone takes seconds) and without pip. A missing distribution or module, or a
version other than the one recorded (a node pack's `pip install` that replaced one, say), means
setup runs again. Files that are present but corrupt are not detected: `bash scripts/setup.sh
--force` (or SETUP_FORCE=1 for serve.sh / test.sh) sets up regardless of the stamp.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys
import sysconfig
from pathlib import Path

STAMP_NAME = "setup-stamp.json"
STAMP_VERSION = 1
# Input files besides requirements*.txt, relative to the repository root.
INPUT_FILES = ("pyproject.toml", "scripts/setup.sh", "scripts/torch_build.py", "scripts/setup_stamp.py")
MODE_FILES = {"runtime": "requirements.txt", "dev": "requirements-dev.txt"}
# Test data setup.sh --dev installs with `pip install --target TEST_DATA_DIR` rather than into the
# environment (ComfyUI 0.3.64's templates package, whose name today's package took over).
TEST_DATA_FILE = "requirements-test-data.txt"
TEST_DATA_DIR = "test-data"
# Distributions whose top-level module is not their name with "-" -> "_".
IMPORT_NAMES = {
    "pillow": "PIL",
    "pyyaml": "yaml",
    "openai-clip": "clip",
    "argon2-cffi": "argon2",
    "pyopengl": "OpenGL",
}


class StampError(Exception):
    """A requirement file the stamp cannot read (a missing `-r` target, an unparsable line)."""


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def import_name(distribution: str) -> str:
    return IMPORT_NAMES.get(normalise(distribution), normalise(distribution).replace("-", "_"))


_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([<>=!~;@ ].*)?$")


def requirement_names(path: Path, _seen: frozenset[Path] = frozenset()) -> list[str]:
    """The distribution names a requirements file names, following `-r`/`--requirement` includes,
    normalised, in order, without repeats. Other options (`-c`, `--index-url`) are skipped."""
    path = path.resolve()
    if path in _seen:
        raise StampError(f"{path}: includes itself")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StampError(f"cannot read {path}: {exc.strerror}") from exc
    names: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        include = re.match(r"^(?:-r|--requirement)(?:\s+|=)(\S+)$", line)
        if include:
            found = requirement_names(path.parent / include.group(1), _seen | {path})
        elif line.startswith("-"):
            continue
        else:
            match = _REQUIREMENT.match(line)
            if match is None:
                raise StampError(f"{path.name}:{number}: not a requirement: {raw!r}")
            found = [normalise(match.group(1))]
        names.extend(name for name in found if name not in names)
    return names


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def input_hashes(root: Path) -> dict[str, str | None]:
    """SHA-256 of each input file (None: absent), keyed by its path relative to `root`."""
    names = sorted(p.name for p in root.glob("requirements*.txt")) + list(INPUT_FILES)
    return {name: _sha256(root / name) for name in names}


def python_identity() -> dict[str, str]:
    """The running Python's version and platform."""
    return {"version": sys.version.split()[0], "implementation": sys.implementation.name,
            "abi": sys.implementation.cache_tag or "", "platform": sysconfig.get_platform()}


class ProbeFailed(Exception):
    """The environment lacks a distribution the requirements name, or cannot locate its module."""


def probe_here(distributions: list[str]) -> dict:
    """The import probe, in the running interpreter (setup.sh runs this script with the
    environment's own): {"python": its identity, "packages": {distribution: version}}."""
    from importlib import metadata

    packages = {}
    for distribution in distributions:
        try:
            packages[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            raise ProbeFailed(f"{distribution} is not installed") from None
        module = import_name(distribution)
        try:
            found, why = importlib.util.find_spec(module), ""
        except (ImportError, ValueError) as exc:
            found, why = None, f": {exc}"
        if found is None:
            raise ProbeFailed(f"{distribution} {packages[distribution]} is installed but its module {module} "
                              f"is not importable{why}")
    return {"python": python_identity(), "packages": packages}


def expected(root: Path, mode: str, torch: str) -> dict:
    """What the stamp must say about the input files, the torch build and the mode."""
    return {"stamp": STAMP_VERSION, "inputs": input_hashes(root), "torch": torch, "mode": mode}


def _modes_covering(mode: str) -> tuple[str, ...]:
    return ("runtime", "dev") if mode == "runtime" else ("dev",)


def check(root: Path, venv: Path, mode: str, torch: str, seen: dict | ProbeFailed) -> tuple[bool, str]:
    """(True, "") when the stamp in `venv` matches the inputs and what the probe saw (`seen`:
    probe_here's answer in that environment, or how it failed); else (False, the first reason)."""
    try:
        stamp = json.loads((venv / STAMP_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False, "no setup stamp (a fresh environment, or the last setup did not finish)"
    except (OSError, ValueError):
        return False, "the setup stamp is unreadable"
    if not isinstance(stamp, dict) or stamp.get("stamp") != STAMP_VERSION:
        return False, "the setup stamp is from another version of setup"
    want = expected(root, mode, torch)
    if stamp.get("mode") not in _modes_covering(mode):
        return False, f"the last setup was {stamp.get('mode')!r}, not {mode!r}"
    recorded = stamp.get("inputs") or {}
    for name in sorted(set(recorded) | set(want["inputs"])):
        if recorded.get(name) != want["inputs"].get(name):
            return False, f"{name} changed since the last setup"
    if stamp.get("torch") != torch:
        return False, f"the torch build changed since the last setup ({stamp.get('torch')!r} -> {torch!r})"
    if isinstance(seen, ProbeFailed):
        return False, f"the environment fails the import probe: {seen}"
    if seen["python"] != stamp.get("python"):
        return False, (f"the Python changed since the last setup ({_describe(stamp.get('python'))} -> "
                       f"{_describe(seen['python'])})")
    packages = stamp.get("packages") or {}
    for name, version in seen["packages"].items():
        if packages.get(name) != version:
            return False, f"{name} is {version} in the environment, {packages.get(name)} at the last setup"
    return True, ""


def _describe(python) -> str:
    if not isinstance(python, dict):
        return "unknown"
    return f"{python.get('implementation')} {python.get('version')} {python.get('platform')}"


def clear(venv: Path) -> None:
    (venv / STAMP_NAME).unlink(missing_ok=True)


def write(root: Path, venv: Path, mode: str, torch: str, seen: dict) -> None:
    """Records the stamp after a setup that succeeded and whose environment passed the probe."""
    stamp = {**expected(root, mode, torch), "python": seen["python"], "packages": seen["packages"]}
    partial = venv / (STAMP_NAME + ".tmp")
    partial.write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(venv / STAMP_NAME)


def _torch_choice(flag: str | None) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch_build

    choice = torch_build.choose(flag, os.environ.get("TORCH_BUILD"), torch_build.read_nvidia_smi())
    return f"{choice.tag} {choice.spec}"


def probe_test_data(root: Path, venv: Path) -> None:
    """Raises ProbeFailed unless every `name==version` of TEST_DATA_FILE is in the test-data folder
    (pip's `--target` leaves `<module>-<version>.dist-info` there)."""
    folder = venv / TEST_DATA_DIR
    try:
        lines = (root / TEST_DATA_FILE).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:  # no test data named
        return
    for line in lines:
        pinned = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if pinned and not (folder / f"{import_name(pinned.group(1))}-{pinned.group(2)}.dist-info").is_dir():
            raise ProbeFailed(f"test data {pinned.group(1)}=={pinned.group(2)} is not in {folder}")


def _probe(root: Path, mode: str) -> dict | ProbeFailed:
    try:
        if mode == "dev":
            probe_test_data(root, root / ".venv")
        return probe_here(requirement_names(root / MODE_FILES[mode]))
    except (ProbeFailed, StampError) as exc:
        return ProbeFailed(str(exc))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("check", "write", "clear", "probe"))
    parser.add_argument("--dev", action="store_true", help="the test tools too (setup.sh --dev)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cpu", dest="flag", action="store_const", const="cpu")
    group.add_argument("--cuda", dest="flag", action="store_const", const="cuda")
    parser.add_argument("--torch", metavar="'TAG SPEC'", help="the torch build setup installed (write)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    venv = args.root / ".venv"
    mode = "dev" if args.dev else "runtime"
    if args.action == "clear":
        clear(venv)
        return 0
    seen = _probe(args.root, mode)
    if args.action == "probe":
        if isinstance(seen, ProbeFailed):
            print(seen)
            return 1
        print(json.dumps(seen))
        return 0
    if args.action == "write":
        if not args.torch:
            parser.error("write needs --torch 'TAG SPEC'")
        clear(venv)
        if isinstance(seen, ProbeFailed):
            print(f"setup: no setup stamp written, so the next start sets up again: the environment fails "
                  f"the import probe: {seen}", file=sys.stderr)
            return 1
        write(args.root, venv, mode, args.torch, seen)
        return 0
    try:
        torch = _torch_choice(args.flag)
    except ValueError as exc:  # a bad TORCH_BUILD: setup.sh's own run of torch_build.py reports it
        print(f"setup needed: {exc}")
        return 1
    ok, why = check(args.root, venv, mode, torch, seen)
    if not ok:
        print(f"setup needed: {why}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
