"""Derive `comfy_core/text_encoders/data/qwen2_merges.txt.gz` (the Qwen2 / Qwen2.5 / Qwen3 byte-level
BPE merges) from the `stable_diffusion_cpp_python` source distribution on PyPI.

Usage (the only network access is the package registry, through pip):

    pip download --no-deps --no-binary :all: stable_diffusion_cpp_python==0.4.7 -d /tmp/sdcpp
    python scripts/derive_qwen_vocab.py /tmp/sdcpp/stable_diffusion_cpp_python-0.4.7.tar.gz

The sdist vendors stable-diffusion.cpp, whose `src/tokenizers/vocab/qwen.hpp` holds Qwen's
`merges.txt` (without its `#version` header line) as the C byte array `qwen2_merges_utf8_c_str`.
The script reads that array, checks it (151,387 merge lines, sha256 below, the first merges and
the ids they give to known tokens), and writes it gzipped (level 9, no name, mtime 0) so the
output is byte-for-byte reproducible. `data/PROVENANCE.md` records the source and licence.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import sys
import tarfile
from pathlib import Path

MEMBER = "vendor/stable-diffusion.cpp/src/tokenizers/vocab/qwen.hpp"
ARRAY = "qwen2_merges_utf8_c_str"
EXPECTED_SHA256 = "599bab54075088774b1733fde865d5bd747cbcc7a547c5bc12610e874e26f5e3"
EXPECTED_MERGES = 151_387  # 151,643 regular tokens - 256 byte symbols
OUTPUT = Path(__file__).resolve().parents[1] / "comfy_core" / "text_encoders" / "data" / "qwen2_merges.txt.gz"


def read_header(sdist: Path) -> str:
    """The text of `qwen.hpp` inside the sdist (any top-level folder name)."""
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            if member.name.split("/", 1)[-1] == MEMBER:
                handle = archive.extractfile(member)
                if handle is None:
                    break
                return handle.read().decode("ascii")
    raise SystemExit(f"{sdist}: no {MEMBER} inside")


def merges_bytes(header: str) -> bytes:
    """The byte array's contents (the C source lists it as 0x.. literals)."""
    match = re.search(ARRAY + r"\[\]\s*=\s*\{(.*?)\};", header, re.S)
    if match is None:
        raise SystemExit(f"no array {ARRAY} in {MEMBER}")
    return bytes(int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]{2})", match.group(1)))


def check(data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != EXPECTED_SHA256:
        raise SystemExit(f"merges sha256 {digest}, expected {EXPECTED_SHA256}")
    lines = data.decode("utf-8").split("\n")
    if lines[-1] != "" or len(lines) - 1 != EXPECTED_MERGES:
        raise SystemExit(f"expected {EXPECTED_MERGES} newline-terminated merge lines, got {len(lines) - 1}")
    if lines[:3] != ["\u0120 \u0120", "\u0120\u0120 \u0120\u0120", "i n"]:
        raise SystemExit(f"unexpected first merges {lines[:3]!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help="stable_diffusion_cpp_python-0.4.7.tar.gz")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    data = merges_bytes(read_header(args.sdist))
    check(data)
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    args.output.write_bytes(packed)
    print(f"{args.output}: {len(data)} bytes of merges, {len(packed)} gzipped, "
          f"sha256 {hashlib.sha256(packed).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
