"""scripts/torch_build.py (which torch build setup.sh installs) with fake nvidia-smi outputs, and
scripts/setup.sh itself run against a fake virtual environment whose pip only records what it
was asked (no torch is installed): the CPU build falls back to the package index's pair when
download.pytorch.org cannot be reached, the pair is pinned by a constraints file."""
from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H200                    On  |   00000000:19:00.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""


def _module():
    spec = importlib.util.spec_from_file_location("torch_build", REPO / "scripts" / "torch_build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("torch_build", module)
    spec.loader.exec_module(module)
    return module


tb = _module()


@pytest.mark.parametrize(("cuda", "tag"), [("13.0", "cu130"), ("13.1", "cu130"), ("12.9", "cu128"),
                                           ("12.8", "cu128"), ("12.6", "cu126"), ("12.7", "cu126")])
def test_the_newest_build_the_driver_runs(cuda, tag):
    choice = tb.choose(None, None, SMI.format(cuda=cuda))
    assert choice.tag == tag
    assert f"CUDA {cuda}" in choice.reason
    if tag == "cu130":  # PyPI's Linux x86-64 wheels are the cu130 build
        assert choice.index == "" and choice.spec == "torch==2.14.1 torchvision==0.29.1"
    else:
        assert choice.index == f"https://download.pytorch.org/whl/{tag}"
        assert choice.spec == f"torch==2.14.1+{tag} torchvision==0.29.1+{tag}"
    assert choice.fallback == ""


def test_no_gpu_or_an_old_driver_gets_the_cpu_build_with_the_pypi_fallback():
    for smi in (None, SMI.format(cuda="12.2"), "NVIDIA-SMI has failed because it couldn't communicate"):
        choice = tb.choose(None, None, smi)
        assert choice.tag == "cpu" and choice.index == "https://download.pytorch.org/whl/cpu"
        assert choice.spec == "torch==2.14.1+cpu torchvision==0.29.1+cpu"
        assert choice.fallback == "torch==2.14.1 torchvision==0.29.1"
    assert "older than any CUDA build" in tb.choose(None, None, SMI.format(cuda="12.2")).reason


def test_flags_and_env_override_detection():
    gpu = SMI.format(cuda="12.8")
    assert tb.choose("cpu", None, gpu).tag == "cpu"
    assert tb.choose(None, "cpu", gpu).tag == "cpu"
    assert tb.choose("cpu", "cu128", None).tag == "cpu"  # the flag wins over the variable
    assert tb.choose(None, "cu126", gpu).tag == "cu126"
    assert tb.choose(None, "CU128", None).tag == "cu128"
    assert tb.choose("cuda", None, gpu).tag == "cu128"
    assert tb.choose("cuda", None, None).tag == "cu130"  # asked for CUDA, no driver seen: the newest
    with pytest.raises(ValueError, match="TORCH_BUILD"):
        tb.choose(None, "cu118", gpu)


def test_other_platforms_use_the_package_index():
    choice = tb.choose("cuda", None, None, system="Darwin", machine="arm64")
    assert choice.tag == "pypi" and choice.index == "" and "MPS" in choice.reason
    assert tb.choose(None, None, None, system="Linux", machine="aarch64").index == ""


def test_the_script_prints_shell_assignments(tmp_path):
    smi = tmp_path / "smi.txt"
    smi.write_text(SMI.format(cuda="12.8"))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_BUILD"}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "torch_build.py"), "--nvidia-smi-output", str(smi),
                          "--system", "Linux", "--machine", "x86_64"], capture_output=True, text=True, env=env,
                         check=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines())
    assert values["TORCH_TAG"] == "cu128"
    assert values["TORCH_INDEX"] == "https://download.pytorch.org/whl/cu128"
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "torch_build.py")], capture_output=True, text=True,
                         env={**env, "TORCH_BUILD": "rocm"})
    assert bad.returncode == 2 and "TORCH_BUILD" in bad.stderr


FAKE_PYTHON = """#!/bin/sh
# A stand-in for .venv/bin/python: `-c` answers the installed versions, `-m pip install` logs,
# setup_stamp.py's import probe (-I) fails (so no stamp is written).
[ "$1" = "-I" ] && exit 1
if [ "$1" = "-c" ]; then
    case "$2" in *'print("torch==" + version("torch"))'*)
        printf 'torch==%s\\ntorchvision==%s\\n' "$FAKE_TORCH" "$FAKE_TV"; exit 0;; esac
    [ -n "$FAKE_INSTALLED" ] && { echo "$FAKE_INSTALLED"; exit 0; }
    exit 1
fi
echo "$*" >> "$PIP_LOG"
case "$*" in *--index-url*) [ -n "$INDEX_DOWN" ] && exit 1;; esac
exit 0
"""


def _fake_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "torch_build.py", "setup_stamp.py"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    (root / "requirements.txt").write_text("torch==2.14.1\n")
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(FAKE_PYTHON)
    (venv / "python").chmod(0o755)
    return root


def _run_setup(root: Path, tmp_path: Path, *args: str, smi: str | None = None, **env: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_smi = bin_dir / "nvidia-smi"
    if smi is not None:
        fake_smi.write_text(f"#!/bin/sh\ncat <<'END'\n{smi}END\n")
    else:
        fake_smi.write_text("#!/bin/sh\nexit 9\n")  # present but failing: no usable GPU
    fake_smi.chmod(fake_smi.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "pip.log"
    log.write_text("")
    full_env = {k: v for k, v in os.environ.items() if k != "TORCH_BUILD"}
    full_env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", PIP_LOG=str(log), PYTHON=sys.executable,
                    FAKE_TORCH="2.14.1", FAKE_TV="0.29.1")
    full_env.update(env)
    done = subprocess.run(["bash", str(root / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env=full_env, timeout=60)
    # The fake python logs every call: pip's, and setup's bytecode compilation after them.
    return done, [line for line in log.read_text().splitlines() if "-m pip" in line]


def test_setup_falls_back_to_the_package_index_when_the_cpu_index_is_unreachable(tmp_path):
    root = _fake_repo(tmp_path)
    done, pip = _run_setup(root, tmp_path, INDEX_DOWN="1")
    assert done.returncode == 0, done.stderr
    assert any("--index-url https://download.pytorch.org/whl/cpu torch==2.14.1+cpu torchvision==0.29.1+cpu" in c
               for c in pip)
    assert any(c.endswith("install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1") for c in pip)
    assert done.stderr.count("is not available from https://download.pytorch.org/whl/cpu") == 1
    assert "build cpu chosen: no working nvidia-smi" in done.stdout
    assert (root / ".venv" / "torch-constraints.txt").read_text() == "torch==2.14.1\ntorchvision==0.29.1\n"
    assert pip[-1].endswith("-c .venv/torch-constraints.txt -r requirements.txt")


def test_setup_installs_the_cuda_build_the_driver_takes(tmp_path):
    root = _fake_repo(tmp_path)
    done, pip = _run_setup(root, tmp_path, smi=SMI.format(cuda="12.8"), FAKE_TORCH="2.14.1+cu128",
                           FAKE_TV="0.29.1+cu128")
    assert done.returncode == 0, done.stderr
    assert "--index-url https://download.pytorch.org/whl/cu128 torch==2.14.1+cu128 torchvision==0.29.1+cu128" in pip[0]
    assert "build cu128 chosen: NVIDIA driver with CUDA 12.8" in done.stdout


def test_setup_skips_an_installed_matching_build_and_takes_flags(tmp_path):
    root = _fake_repo(tmp_path)
    done, pip = _run_setup(root, tmp_path, "--cuda", smi=SMI.format(cuda="13.0"),
                           FAKE_INSTALLED="torch==2.14.1+cu130 torchvision==0.29.1+cu130")
    assert done.returncode == 0, done.stderr
    assert "already installed" in done.stdout and len(pip) == 1  # only the requirements
    assert "-m compileall -q -j 0 comfy_core" in (tmp_path / "pip.log").read_text()  # then the bytecode
    done, _ = _run_setup(root, tmp_path, "--bogus")
    assert done.returncode == 2 and "unknown argument" in done.stderr
