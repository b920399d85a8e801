#!/usr/bin/env python3
"""Which torch build scripts/setup.sh installs: a CUDA build matching the NVIDIA driver, else the CPU build.

Run by the system Python before any virtual environment exists (standard library only). It
prints shell assignments that setup.sh evaluates:

    TORCH_TAG=cu128            cpu, cu126, cu128 or cu130
    TORCH_SPEC='torch==2.14.1+cu128 torchvision==0.29.1+cu128'
    TORCH_INDEX=https://download.pytorch.org/whl/cu128    (empty: the package index, PyPI)
    TORCH_FALLBACK='torch==2.14.1 torchvision==0.29.1'     (empty: none; what to install from
                                                           PyPI when TORCH_INDEX cannot be reached)
    TORCH_REASON='...'         one line saying why

The choice, first match wins: `--cpu` / `--cuda` on the command line; the `TORCH_BUILD`
environment variable (`cpu`, `cu126`, `cu128`, `cu130`, or `cuda` for "the newest the driver
takes"); a working `nvidia-smi` whose header names the driver's CUDA version (the newest of
cu130 / cu128 / cu126 it supports); otherwise the CPU build. On Linux x86-64 the PyPI wheels
*are* the cu130 build, so cu130 comes from PyPI; the others come from download.pytorch.org. On
other platforms (macOS, Arm) PyPI's build is the only one and is used whatever was asked.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

TORCH, TORCHVISION = "2.14.1", "0.29.1"
# CUDA builds of this torch release, newest first, with the driver CUDA version each needs.
CUDA_BUILDS = (("cu130", (13, 0)), ("cu128", (12, 8)), ("cu126", (12, 6)))
PYPI_CUDA_TAG = "cu130"  # what PyPI's Linux x86-64 wheels are built with
WHEEL_INDEX = "https://download.pytorch.org/whl/{tag}"
TAGS = ("cpu",) + tuple(tag for tag, _ in CUDA_BUILDS)


@dataclass(frozen=True)
class Choice:
    tag: str
    index: str  # "" for PyPI
    spec: str
    fallback: str  # "" when there is nothing to fall back to
    reason: str

    def shell(self) -> str:
        return "\n".join(f"{name}={shlex.quote(value)}" for name, value in (
            ("TORCH_TAG", self.tag), ("TORCH_SPEC", self.spec), ("TORCH_INDEX", self.index),
            ("TORCH_FALLBACK", self.fallback), ("TORCH_REASON", self.reason)))


def driver_cuda_version(nvidia_smi_output: str) -> tuple[int, int] | None:
    """The "CUDA Version: 12.8" of nvidia-smi's header, or None."""
    match = re.search(r"CUDA Version\s*:\s*(\d+)\.(\d+)", nvidia_smi_output)
    return (int(match.group(1)), int(match.group(2))) if match else None


def newest_cuda_tag(driver: tuple[int, int]) -> str | None:
    """The newest CUDA build the driver runs (CUDA minor-version compatibility within a major
    is not relied on: the driver must report at least the build's version)."""
    for tag, needs in CUDA_BUILDS:
        if driver >= needs:
            return tag
    return None


def pypi_platform(system: str, machine: str) -> bool:
    """True where PyPI's torch wheels are the cu130 build (Linux x86-64)."""
    return system == "Linux" and machine.lower() in ("x86_64", "amd64")


def _pins(tag: str | None) -> str:
    local = f"+{tag}" if tag else ""
    return f"torch=={TORCH}{local} torchvision=={TORCHVISION}{local}"


def choose(flag: str | None, env_build: str | None, nvidia_smi_output: str | None, *,
           system: str = "Linux", machine: str = "x86_64") -> Choice:
    """The build for the given inputs (`nvidia_smi_output`: None when it is missing or failed)."""
    if not pypi_platform(system, machine):
        return Choice("pypi", "", _pins(None), "",
                      f"{system} {machine}: the package index's torch build (CPU{', MPS' if system == 'Darwin' else ''})")
    driver = driver_cuda_version(nvidia_smi_output) if nvidia_smi_output else None
    wanted = flag or (env_build.strip().lower() if env_build else None) or None
    source = "--" + flag if flag else f"TORCH_BUILD={wanted}" if wanted else None
    if wanted not in (None, "cuda") + TAGS:
        raise ValueError(f"TORCH_BUILD={env_build!r}: expected one of {', '.join(('cuda',) + TAGS)}")
    if wanted == "cuda" or (wanted is None and driver is not None):
        tag = newest_cuda_tag(driver) if driver else None
        if tag is None:
            if wanted == "cuda":
                # Asked for CUDA without a driver we can read: the newest build, the user's call.
                tag, why = CUDA_BUILDS[0][0], f"{source}: no driver CUDA version found, the newest build"
            else:
                return _cpu(f"NVIDIA driver with CUDA {driver[0]}.{driver[1]} is older than any CUDA build of torch "
                            f"{TORCH} (needs 12.6); the CPU build")
        else:
            found = f"NVIDIA driver with CUDA {driver[0]}.{driver[1]}"
            why = f"{source}: {found}" if source else found
        return _cuda(tag, why)
    if wanted in (None, "cpu"):
        return _cpu(f"{source}: the CPU build" if source else "no working nvidia-smi (no NVIDIA GPU): the CPU build")
    return _cuda(wanted, source)


def _cuda(tag: str, why: str) -> Choice:
    if tag == PYPI_CUDA_TAG:
        return Choice(tag, "", _pins(None), "", f"{why}: the {tag} build from the package index")
    return Choice(tag, WHEEL_INDEX.format(tag=tag), _pins(tag), "", f"{why}: the {tag} build")


def _cpu(why: str) -> Choice:
    return Choice("cpu", WHEEL_INDEX.format(tag="cpu"), _pins("cpu"), _pins(None), why)


def read_nvidia_smi() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cpu", dest="flag", action="store_const", const="cpu")
    group.add_argument("--cuda", dest="flag", action="store_const", const="cuda")
    parser.add_argument("--nvidia-smi-output", metavar="FILE", help="read nvidia-smi's output from FILE (tests)")
    parser.add_argument("--system", default=platform.system())
    parser.add_argument("--machine", default=platform.machine())
    args = parser.parse_args(argv)
    if args.nvidia_smi_output is not None:
        with open(args.nvidia_smi_output, encoding="utf-8") as f:
            smi = f.read() or None
    else:
        smi = read_nvidia_smi()
    try:
        choice = choose(args.flag, os.environ.get("TORCH_BUILD"), smi, system=args.system, machine=args.machine)
    except ValueError as exc:
        print(f"torch_build: {exc}", file=sys.stderr)
        return 2
    print(choice.shell())
    return 0


if __name__ == "__main__":
    sys.exit(main())
