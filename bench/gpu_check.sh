#!/usr/bin/env bash
# The prepared device check (docs/gpu.md): on a machine with an NVIDIA GPU whose python3 holds torch,
# transformers, peft, accelerate, typer and rich (and no registry), within GPU_CHECK_SECONDS (default 480):
#   1. installs rlft and what it lacks offline from GPU_WHEELS (default gpu-wheels/, built by `make gpu-wheels`);
#   2. runs bench/gpu_check.py: tiny-model learning checks, a random Qwen2.5-0.5B-shaped model through
#      sft, dpo, reward, ppo, grpo (and bootstrap where `rlft --help` lists it), each step under its own timeout;
#   3. writes $OUT/gpu_check.json, gpu_check.log, install.json and install.log ($OUT defaults to ./out).
# --dry-run (or DEVICE=cpu): every step on the CPU at tiny sizes, rlft from this checkout, no install
# (tests/test_gpu_check.py). Other arguments go to bench/gpu_check.py (--only STEPS, --isolation spawn, ...).
# Exit 0: every step passed; 1: a failure (each one is a line in the output and in the JSON).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PY=${PYTHON:-python3}
OUT=${OUT:-out}
WHEELS=${GPU_WHEELS:-gpu-wheels}
SECONDS_TOTAL=${GPU_CHECK_SECONDS:-480}
mkdir -p "$OUT"
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
[ "${DEVICE:-}" = "cpu" ] && dry=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

install_json() {  # status, seconds, error, mode
  "$PY" - "$OUT/install.json" "$1" "$2" "$3" "$4" <<'EOF'
import json, sys
path, status, seconds, error, mode = sys.argv[1:]
json.dump({"status": status, "seconds": float(seconds), "error": error or None, "mode": mode or None},
          open(path, "w"), indent=1)
EOF
}

if [ "$dry" = 1 ] && [ "${GPU_CHECK_INSTALL:-0}" != 1 ]; then
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  echo "[skipped] install: dry run, rlft from this checkout"
  install_json skipped 0 "" "checkout"
elif [ ! -d "$WHEELS" ]; then
  echo "[ failed] install: no wheels folder $WHEELS: run 'make gpu-wheels' here and carry it (docs/gpu.md)"
  install_json failed 0 "no wheels folder $WHEELS (make gpu-wheels, then carry it)" ""
else
  t0=$(date +%s)
  mode=resolved
  # Resolution against what is installed: only what is missing or out of rlft's ranges comes from the folder.
  if ! timeout 240 "$PY" -m pip install -q --no-index --no-cache-dir --find-links "$WHEELS" rlft >"$OUT/install.log" 2>&1; then
    # Some requirement the device cannot meet from the folder (e.g. datasets' pyarrow floor, docs/gpu.md):
    # install every carried package at its carried version without resolution, and say so.
    mode=no-deps
    pins=$("$PY" - "$WHEELS" <<'EOF'
import sys
from pathlib import Path
print(" ".join(sorted({"==".join(w.name.split("-")[:2]) for w in Path(sys.argv[1]).glob("*.whl")})))
EOF
)
    echo "---- resolved install failed; installing without dependency resolution: $pins" >>"$OUT/install.log"
    timeout 180 "$PY" -m pip install -q --no-index --no-cache-dir --no-deps --find-links "$WHEELS" $pins >>"$OUT/install.log" 2>&1
  fi
  rc=$?
  "$PY" -m pip check >>"$OUT/install.log" 2>&1 || true
  t1=$(date +%s)
  if [ $rc = 0 ]; then
    echo "[     ok] install ($((t1 - t0)) s, $mode)"
    install_json ok $((t1 - t0)) "$([ $mode = no-deps ] && grep -m1 -i 'error' "$OUT/install.log")" $mode
  else
    err=$(grep -m1 -i 'error' "$OUT/install.log" || tail -1 "$OUT/install.log")
    echo "[ failed] install ($((t1 - t0)) s): $err"
    install_json failed $((t1 - t0)) "$err" $mode
  fi
fi

left=$(( SECONDS_TOTAL - ($(date +%s) - start) - 15 ))  # 15 s for the closing writes
exec "$PY" bench/gpu_check.py --out "$OUT" --budget "$left" --install "$OUT/install.json" "$@"
