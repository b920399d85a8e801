#!/usr/bin/env bash
# Creates .venv (once) and installs the runtime requirements; with --dev also the test tools
# and Debian's Chromium for the browser tests. Safe to run repeatedly: when .venv already matches
# (scripts/setup_stamp.py: a stamp of the requirement files, pyproject.toml, these scripts, the
# Python, the torch build, checked with a quick import probe, no pip) it returns at once; --force
# or SETUP_FORCE=1 sets up regardless. The stamp is written only after a setup that succeeded.
#
# torch: a CUDA build where an NVIDIA driver is found (the newest of cu130/cu128/cu126 it runs),
# else the CPU build; --cuda / --cpu or TORCH_BUILD=cpu|cu126|cu128|cu130 choose instead
# (scripts/torch_build.py decides and says why). Where download.pytorch.org cannot be reached,
# the CPU choice falls back to the package index's pair, which also runs on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=0
FORCE=${SETUP_FORCE:-0}
BUILD_FLAG=()
MODE_FLAG=()
for arg in "$@"; do
    case "$arg" in
        --dev) DEV=1; MODE_FLAG=(--dev) ;;
        --cpu|--cuda) BUILD_FLAG=("$arg") ;;
        --force) FORCE=1 ;;
        *) echo "setup: unknown argument $arg (expected --dev, --cpu, --cuda, --force)" >&2; exit 2 ;;
    esac
done
if [ "$FORCE" != 1 ] && [ -f .venv/setup-stamp.json ]; then
    if why=$(.venv/bin/python -I scripts/setup_stamp.py check "${MODE_FLAG[@]}" "${BUILD_FLAG[@]}"); then
        echo "setup: .venv is up to date (bash scripts/setup.sh --force sets it up again)"
        exit 0
    fi
    echo "${why:-setup needed: .venv/bin/python does not run}"
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
rm -f .venv/setup-stamp.json  # a setup that stops half-way leaves none
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
eval "$("$PY" scripts/torch_build.py "${BUILD_FLAG[@]}")"
# torch and torchvision first, alone and pinned together; the constraints file keeps any later
# requirement from pulling another build.
installed=$(.venv/bin/python -c 'import torch, torchvision; print(f"torch=={torch.__version__} torchvision=={torchvision.__version__}")' 2>/dev/null || true)
wanted_is_installed() {
    case "$TORCH_TAG" in
        cpu|cu126|cu128) [ "$installed" = "$TORCH_SPEC" ] ;;
        *) [[ "$installed" =~ ^torch==2\.14\.1(\+cu130)?\ torchvision==0\.29\.1(\+cu130)?$ ]] ;;
    esac
}
if wanted_is_installed; then
    note="already installed"
elif [ -n "$TORCH_INDEX" ] && "${PIP[@]}" --timeout 20 --retries 1 --index-url "$TORCH_INDEX" $TORCH_SPEC \
        2>.venv/torch-index.log; then
    note="from $TORCH_INDEX"
elif [ -n "$TORCH_FALLBACK" ]; then
    echo "setup: $TORCH_SPEC is not available from $TORCH_INDEX (pip's answer: .venv/torch-index.log); installing the package index's torch build instead (it runs on the CPU too)" >&2
    "${PIP[@]}" $TORCH_FALLBACK
    note="package index fallback"
elif [ -z "$TORCH_INDEX" ]; then
    "${PIP[@]}" $TORCH_SPEC
    note="from the package index"
else
    cat .venv/torch-index.log >&2
    echo "setup: could not install $TORCH_SPEC from $TORCH_INDEX" >&2
    exit 1
fi
# The installed distributions' versions (pip's, e.g. 2.14.1 for PyPI's wheel, 2.14.1+cpu for the CPU
# index's), not torch.__version__ (2.14.1+cu130 for PyPI's), which no index serves by that name.
.venv/bin/python -c 'from importlib.metadata import version; print("torch==" + version("torch")); print("torchvision==" + version("torchvision"))' > .venv/torch-constraints.txt
echo "setup: torch $(head -1 .venv/torch-constraints.txt | cut -d= -f3) ($note); build $TORCH_TAG chosen: $TORCH_REASON"
if [ "$DEV" = 1 ]; then
    "${PIP[@]}" -c .venv/torch-constraints.txt -r requirements-dev.txt
    # Test data beside the environment, not in it (requirements-test-data.txt says why).
    "${PIP[@]}" --no-deps --upgrade --target .venv/test-data -r requirements-test-data.txt
    # chromium for the browser tests; EGL with Mesa's drivers (llvmpipe without a GPU) for GLSLShader's tests.
    if { [ ! -x /usr/bin/chromium ] || ! ldconfig -p 2>/dev/null | grep -q libEGL_mesa; } && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq chromium libegl1 libegl-mesa0 libgl1-mesa-dri libopengl0 >/dev/null) \
            || echo "setup: chromium or the EGL libraries could not be installed; browser and GLSL tests will be skipped" >&2
    fi
else
    "${PIP[@]}" -c .venv/torch-constraints.txt -r requirements.txt
fi
# The engine's own bytecode, compiled once here: where PYTHONDONTWRITEBYTECODE is set, Python would
# otherwise compile every module from source at every start (the lazily imported ones inside the
# first prompt). Stale files are simply recompiled in memory; pip already did this for packages.
.venv/bin/python -m compileall -q -j 0 comfy_core nodes graph web compat main.py >/dev/null || true
# The stamp: the next run skips all of the above while nothing it depends on changed.
.venv/bin/python -I scripts/setup_stamp.py write "${MODE_FLAG[@]}" --torch "$TORCH_TAG $TORCH_SPEC" || true
