"""`make gpu-wheels`'s folder installs offline (--no-index) into a fresh venv that holds what the lent GPU machine
holds (torch, transformers, peft, accelerate, typer, rich, and the device's other packages that rlft's
requirements reach, at the device's versions where bench/gpu_device_packages.txt knows them), through
bench/gpu_check.sh's own install step; then `rlft --help` and a tiny `rlft sft` run. Slow (a venv from the
registry): `make gpu-wheels-test`. The venv's Python is this machine's (3.11: the CPU torch wheel on disk is
cp311); the folder's wheels are pure Python apart from multiprocess, which it carries for both Pythons."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from helpers import DATA, ROOT

pytestmark = pytest.mark.slow


def test_wheels_install_offline_into_a_device_like_venv(tmp_path):
    wheels = ROOT / os.environ.get("GPU_WHEELS", "gpu-wheels")
    if not wheels.is_dir():
        subprocess.run([sys.executable, str(ROOT / "bench/gpu_wheels.py"), "--out", str(wheels)], check=True)
    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "bench/gpu_wheels.py")
    gw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gw)
    on_device = gw.device_packages()
    _, _, reached = gw.closure("rlft", on_device, f"{sys.version_info.major}.{sys.version_info.minor}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin/python")
    pip = [py, "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)  # the CPU wheel on this machine's disk
    # The device's versions where known, except numpy (2.5 needs Python >= 3.12; this venv is 3.11).
    device = sorted(f"{n}=={on_device[n]}" if on_device[n] and n != "numpy" else n
                    for n in reached | {"peft", "typer", "rich"} if n != "torch")
    subprocess.run(pip + device, check=True)
    env = {**os.environ, "PYTHON": py, "OUT": str(tmp_path / "out"), "GPU_WHEELS": str(wheels),
           "RLFT_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    r = subprocess.run(["bash", str(ROOT / "bench/gpu_check.sh"), "--only", "env"], env=env, capture_output=True,
                       text=True, timeout=900)
    install = json.loads((tmp_path / "out/install.json").read_text())
    assert install["status"] == "ok", (install, (tmp_path / "out/install.log").read_text()[-3000:])
    report = json.loads((tmp_path / "out/gpu_check.json").read_text())
    assert report["steps"]["env"]["status"] == "ok", r.stdout + r.stderr
    assert str(venv) in report["steps"]["env"]["rlft_from"]  # the installed wheel, not this checkout
    rlft = str(venv / "bin/rlft")
    assert subprocess.run([rlft, "--help"], env=env, cwd=tmp_path, capture_output=True).returncode == 0
    s = subprocess.run([rlft, "sft", "--data", str(DATA / "arith/sft_train.jsonl"), "-o", str(tmp_path / "sft"),
                        "--max-steps", "3", "--set", "sft.max_length=32", "--set", "data.max_rows=64"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert s.returncode == 0, s.stdout[-2000:] + s.stderr[-2000:]
    assert json.loads((tmp_path / "sft/summary.json").read_text())["status"] == "completed"
    print("install:", install, "| versions:", {k: report["steps"]["env"].get(k) for k in
                                              ("torch", "transformers", "trl", "peft", "datasets", "rlft")})
