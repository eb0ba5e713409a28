# rlft: one venv, one test command, pipelines over shipped data.
#   make demo        build the tiny model, SFT it, DPO it, evaluate before/after (offline, ~3 min on 2 cores)
#   make test        the fast suite (what CI runs)
#   make test-slow   the end-to-end suite (minutes)
# MODEL, DATA and OUT let the same pipeline targets run a real model elsewhere.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On a machine without an NVIDIA GPU the CPU build of torch is installed first (the plain PyPI torch
# is a multi-GB CUDA build); with a GPU, pip's default build is kept. Override with TORCH_SPEC=...
TORCH_SPEC ?= torch==2.13.0
MODEL ?= tiny
OUT ?= runs/demo
SFT_DATA ?= data/arith/sft_train.jsonl
PAIRS ?= data/arith/pairs_train.jsonl
HELDOUT ?= data/arith/test.jsonl

.PHONY: install test test-slow lint demo pipeline-dpo clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		$(BIN)/python -m pip install -q "$(TORCH_SPEC)"; fi
	$(BIN)/python -m pip install -q -e ".[dev,quant]"
	touch $@

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

lint: install
	$(BIN)/ruff check rlft tests bench

# SFT then DPO, with held-out evaluation before and after each stage.
pipeline-dpo: install
	$(BIN)/python -m rlft.pipeline dpo --model $(MODEL) --sft-data $(SFT_DATA) --pairs $(PAIRS) \
		--heldout $(HELDOUT) --out $(OUT)

demo: pipeline-dpo

clean:
	rm -rf runs .pytest_cache
