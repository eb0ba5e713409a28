"""`make gpu-wheels`: the wheels a lent GPU machine lacks, in one folder (default gpu-wheels/, git-ignored).

The device machine has no registry (docs/gpu.md): what rlft needs beyond its image must travel with the working
tree, 64 MiB at most. This walks rlft's requirements through the installed distributions here (the versions
this repository is tested with), keeps every package that bench/gpu_device_packages.txt does not list as
already on the device, and downloads each as a wheel for the device's Python (3.12, CPython, manylinux x86_64;
pure-Python wheels match any): trl, datasets, math-verify and what they pull in. It adds
  - a few packages the device has at an unknown version where rlft's range is narrow or recent
    (ALSO_CARRY: typer 0.26.x, datasets' fsspec cap and pyarrow floor, peft's and rich's ranges): pip installs
    them there only if the installed version does not satisfy rlft;
  - for a wheel tagged for one Python version only (multiprocess's py312), the same package for this machine's
    Python too, so tests/test_gpu_wheels.py can install the very folder offline here;
  - rlft's own wheel, built from this checkout.
Then it checks the folder is under the size limit and prints its size. Nothing is downloaded twice: an existing
wheel of the same file name is kept.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
DEVICE_LIST = ROOT / "bench" / "gpu_device_packages.txt"
LIMIT_MIB = 64
# Carried although the device has them: its version is unknown and rlft's range is narrow or recent.
ALSO_CARRY = {
    "typer": "rlft pins typer>=0.26,<0.27",
    "rich": "rlft needs rich<16",
    "peft": "rlft needs peft>=0.17",
    "fsspec": "datasets 5.2 caps fsspec<=2026.9.0",
}
# Not carried by default: datasets 5.2 needs pyarrow>=24 and the device's pyarrow version is unknown, but its
# wheel is 55 MB (with the working tree, over the limit's margin). `--also pyarrow==24.0.0` adds one; without it
# bench/gpu_check.sh falls back to installing the folder without dependency resolution and says so.
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64"]


def device_packages(path: Path = DEVICE_LIST) -> dict[str, str | None]:
    """Package name -> version (None: on the device, version unknown) from bench/gpu_device_packages.txt."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, ver = line.partition("==")
        found[canonicalize_name(name)] = ver.strip() or None
    return found


def closure(root: str, on_device: dict[str, str | None], python: str) -> tuple[dict[str, str], list[str], set[str]]:
    """The packages rlft needs that the device lacks, name -> version installed here; version conflicts with
    the device's known versions (one line each); and the device's packages that rlft's requirements reach."""
    env = default_environment()
    env.update(python_version=python, python_full_version=f"{python}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", implementation_name="cpython")
    need: dict[str, str] = {}
    conflicts: list[str] = []
    todo = [(root, None)]
    seen: set[str] = set()
    reached: set[str] = set()
    while todo:
        name, parent = todo.pop()
        key = canonicalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise SystemExit(f"error: {name} (needed by {parent}) is not installed here: install rlft's venv first "
                             "(make install)") from None
        if key != canonicalize_name(root):
            need[key] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker and not req.marker.evaluate({**env, "extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            if dep in on_device:
                reached.add(dep)
                known = on_device[dep]
                if known and not req.specifier.contains(known, prereleases=True):
                    conflicts.append(f"{name} needs {req}, the device has {dep} {known}")
                if dep not in ALSO_CARRY:
                    continue
            todo.append((req.name, name))
    return need, conflicts, reached


def pip_download(names: list[str], dest: Path, python: str | None) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    if python:
        cmd += ["--python-version", python, "--implementation", "cp", "--abi", f"cp{python.replace('.', '')}",
                "--abi", "abi3", "--abi", "none"]
        for p in PLATFORMS:
            cmd += ["--platform", p]
    subprocess.run(cmd + names, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "gpu-wheels"))
    ap.add_argument("--python", default="3.12", help="the device's Python (docs/gpu.md; KINDS.md: 3.12.3)")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    ap.add_argument("--also", action="append", default=[], help="another NAME==VERSION to carry (repeatable)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    on_device = device_packages()
    need, conflicts, _ = closure("rlft", on_device, a.python)
    for line in conflicts:
        print(f"warning: {line}")
    pins = [f"{n}=={v}" for n, v in sorted(need.items())] + a.also
    print(f"carrying {len(pins)} packages for Python {a.python}: {' '.join(pins)}")
    pip_download(pins, out, a.python)
    # Wheels tagged for one Python only (e.g. multiprocess-...-py312-none-any): add this Python's, for the test.
    here = {str(t) for t in sys_tags()}
    local = []
    for whl in out.glob("*.whl"):
        name, ver, _, tags = parse_wheel_filename(whl.name)
        if not any(str(t) in here for t in tags) and name not in ALSO_CARRY and name != "rlft":
            local.append(f"{name}=={ver}")
    if local:
        print(f"also for this machine's Python (tests/test_gpu_wheels.py): {' '.join(sorted(set(local)))}")
        pip_download(sorted(set(local)), out, None)
    for old in out.glob("rlft-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:  # build from a copy: no build/ or egg-info left in the checkout
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "gpu-wheels", "runs", "out",
                                                                  "build", "*.egg-info", "__pycache__", "mutants"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(src)], check=True)
    versions: dict[str, list[str]] = {}
    for whl in out.glob("*.whl"):
        name, ver, _, _ = parse_wheel_filename(whl.name)
        versions.setdefault(name, []).append(str(ver))
    doubles = {n: v for n, v in versions.items() if len(set(v)) > 1}
    if doubles:
        print(f"error: {out} holds two versions of {', '.join(sorted(doubles))}: remove the folder and rerun",
              file=sys.stderr)
        return 1
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    tree = tree_bytes()
    print(f"{out}: {len(list(out.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB; with the working tree that "
          f"travels ({tree / 2**20:.1f} MiB) {(size + tree) / 2**20:.1f} MiB of the {a.limit_mib:.0f} MiB limit")
    if size + tree > a.limit_mib * 2**20:
        print(f"error: {out} ({size / 2**20:.1f} MiB) and the working tree ({tree / 2**20:.1f} MiB) are over "
              f"{a.limit_mib:.0f} MiB: carry fewer wheels (--also) or remove untracked files", file=sys.stderr)
        return 1
    return 0


def tree_bytes() -> int:
    """The bytes of what travels besides carried paths: tracked files and untracked files git does not ignore."""
    r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, check=True)
    files = {ROOT / f.decode() for f in r.stdout.split(b"\0") if f}
    return sum(f.stat().st_size for f in files if f.is_file())


if __name__ == "__main__":
    sys.exit(main())

