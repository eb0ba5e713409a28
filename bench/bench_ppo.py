"""Benchmark: rlft's PPO against TRL 1.12's PPOTrainer (trl.experimental.ppo), same model, prompts, updates.

    python bench/bench_ppo.py [--steps 100] [--batch 64] [--lr 1e-4] [--threads 1] [--seeds 42 43 44]
                              [--model DIR] [--trl-venv DIR] [--skip-trl] [--json]

Both sides train the short-SFT'd tiny model (recipes/sft_tiny_short.yaml, built once into the cache unless
--model is given) on data/arith/grpo_prompts.jsonl for --steps PPO updates of --batch prompts (one response
each) with the same knobs: lr (constant), 4 PPO epochs x 1 minibatch, response_length 8, temperature 1.0,
kl_coef 0.05 (k1), cliprange 0.2, cliprange_value 0.2, vf_coef 0.1, gamma 1.0, lam 0.95, missing-eos
penalty 1.0, stop at eos, no reward whitening, value model = the SFT model with a one-output score head
(zeroed on both sides), one run per seed (--seeds). The reward is the rule `rlft.verifiers` math check of the answer:
  rlft  `--verifier math` (rlft.methods.ppo.run, the code behind `rlft ppo`);
  TRL   a reward "model" whose backbone decodes each query+response, looks the prompt's gold answer up and
        returns the math verifier's score as its hidden state, with an identity score head: TRL 1.12 only
        takes reward models (sequence classifiers), and pre-tokenised `input_ids`.
TRL 1.12.0 is installed by this script with `pip install --no-deps trl==1.12.0` into its own virtual
environment (default ~/.cache/rlft/bench-trl112-venv, or --trl-venv), which sees the project's .venv
packages (torch, transformers, peft, accelerate, datasets) through a .pth file placed after its own
site-packages: its `trl` shadows the project's, and the project's .venv is never modified.

Each run is its own process, sides interleaved (rlft, TRL, rlft, TRL, ... one pair per seed), so that load
on the machine hits both alike; per side the median over its runs is reported:
  episodes/s   episodes (responses trained on) / seconds of the training loop (model loading, held-out
               evaluation and rlft's report are outside the timer; rlft's loop includes its metrics log)
  peak memory  the process's peak RSS when training ends (ru_maxrss; with CUDA also the peak allocated GPU
               memory), libraries included: what a user's machine must hold
  accuracy     greedy pass@1 under the math verifier on data/arith/test.jsonl (200 rows, 8 new tokens),
               measured the same way (rlft.evaluate.evaluate_rows) before and after each run; the gain is
               the mean over seeds (one seed moves it by +-0.05 here; TRL 1.12's PPO is not deterministic
               even for one seed: its minibatch shuffle uses numpy's unseeded global RNG)
Goals (issue 4): rlft >= 1.5x TRL's episodes/s, no more peak memory, an accuracy gain at least as large.
Exit code 0 only when every run of both sides completed and every goal was measured and met; 1 when a run
failed (any side, any seed: a crash, a refused config, a stopped run), the TRL side could not be installed, or a
goal was missed (the accuracy gain is a mean over --seeds: with one seed it is a coin toss); 3 when the rlft runs
completed but nothing was compared (--skip-trl: the goals are about the comparison).
--threads sets torch's CPU threads on both sides (default 1: on a shared 2-core machine two threads spin
against each other and make every timing noise).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "data/arith/grpo_prompts.jsonl"
HELDOUT = ROOT / "data/arith/test.jsonl"
TRL_VERSION = "1.12.0"
RESPONSE_LENGTH = 8


def cache_dir() -> Path:
    return Path(os.environ.get("RLFT_CACHE") or Path.home() / ".cache" / "rlft")


# --------------------------------------------------------------------------- shared by both sides


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def heldout_pass_at_1(model, tok) -> float:
    sys.path.insert(0, str(ROOT))
    from rlft.evaluate import evaluate_rows
    from rlft.verifiers.loading import load_verifiers

    scorer, _ = load_verifiers(["math"])
    was = tok.padding_side
    result = evaluate_rows(model, tok, read_rows(HELDOUT), scorer=scorer, max_new_tokens=RESPONSE_LENGTH)
    tok.padding_side = was
    return result.pass_at_1


def peak_memory() -> dict:
    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    import torch

    if torch.cuda.is_available():
        out["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
    return out


# --------------------------------------------------------------------------- rlft side (project .venv)


def side_rlft(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    import rlft.report
    from rlft.config import resolve
    from rlft.methods import ppo

    rlft.report.report_and_print = lambda *a, **k: None  # the report (matplotlib) is not training
    out = Path(args.work) / "rlft"
    cfg = resolve("ppo", None, {
        "data.train": ([str(PROMPTS)], "bench"), "model.name_or_path": (args.model, "bench"),
        "train.output_dir": (str(out), "bench"), "ppo.verifiers": (["math"], "bench")}, [
        f"train.max_steps={args.steps}", f"train.seed={args.seed}", f"train.per_device_train_batch_size={args.batch}",
        f"train.learning_rate={args.lr}", "train.lr_scheduler_type=constant",
        "train.logging_steps=10", f"train.save_steps={args.steps + 1}", "ppo.num_ppo_epochs=4",
        "ppo.num_mini_batches=1", f"ppo.response_length={RESPONSE_LENGTH}", "ppo.temperature=1.0",
        "ppo.kl_coef=0.05", "ppo.cliprange=0.2", "ppo.cliprange_value=0.2", "ppo.vf_coef=0.1", "ppo.gamma=1.0",
        "ppo.lam=0.95", "ppo.missing_eos_penalty=1.0", "ppo.whiten_rewards=false", "watch.samples=0"])
    from rich.console import Console

    result = ppo.run(cfg, overwrite=True, console=Console(stderr=True, quiet=True))
    summary = json.loads((out / "summary.json").read_text())
    mem = peak_memory()
    from transformers import AutoModelForCausalLM

    from rlft.models import load_tokenizer

    tok = load_tokenizer(str(out))
    model = AutoModelForCausalLM.from_pretrained(out)
    return {"side": "rlft", "status": result.status, "episodes": summary["final_metrics"]["episodes"],
            "train_seconds": summary["train_seconds"], **mem, "heldout_after": heldout_pass_at_1(model, tok)}


# --------------------------------------------------------------------------- TRL side (the trl 1.12 venv)


def side_trl(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl
    from datasets import Dataset
    from torch import nn
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    assert trl.__version__ == TRL_VERSION, f"expected trl {TRL_VERSION}, got {trl.__version__} ({trl.__file__})"
    sys.path.insert(0, str(ROOT))
    from rlft.verifiers.loading import load_verifiers

    verifier, _ = load_verifiers(["math"])
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    rows = read_rows(PROMPTS)
    gold = {r["prompt"]: r["answer"] for r in rows}

    class RuleBackbone(nn.Module):
        """Decodes query+response, scores the response with the math verifier; the 'hidden state' of every
        position is that score (TRL reads it at the response's last token)."""

        def forward(self, input_ids, attention_mask=None, **_):
            texts = tok.batch_decode(input_ids, skip_special_tokens=True)
            prompts = [t[: t.index("=") + 1] if "=" in t else t for t in texts]
            completions = [t[len(p):] for t, p in zip(texts, prompts)]
            scores = verifier(completions, answer=[gold.get(p, "") for p in prompts], prompts=prompts)
            s = torch.tensor([0.0 if x is None else float(x) for x in scores], device=input_ids.device)
            hidden = s[:, None, None].expand(input_ids.shape[0], input_ids.shape[1], 1)
            return type("Out", (), {"hidden_states": (hidden,)})()

    class RuleReward(nn.Module):
        base_model_prefix = "backbone"

        def __init__(self):
            super().__init__()
            self.backbone = RuleBackbone()
            self.score = nn.Identity()

    policy = AutoModelForCausalLM.from_pretrained(args.model)
    value = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1)
    value.config.pad_token_id = tok.pad_token_id
    with torch.no_grad():
        value.score.weight.zero_()  # as rlft does: values start at 0
    enc = [{"input_ids": tok(r["prompt"], add_special_tokens=False)["input_ids"]} for r in rows]
    train = Dataset.from_list(enc)
    config = PPOConfig(
        output_dir=str(Path(args.work) / "trl"), learning_rate=args.lr, lr_scheduler_type="constant",
        per_device_train_batch_size=args.batch, gradient_accumulation_steps=1, num_mini_batches=1,
        num_ppo_epochs=4, total_episodes=args.steps * args.batch, local_rollout_forward_batch_size=args.batch,
        response_length=RESPONSE_LENGTH, temperature=1.0, stop_token="eos", missing_eos_penalty=1.0,
        kl_coef=0.05, kl_estimator="k1", cliprange=0.2, cliprange_value=0.2, vf_coef=0.1, gamma=1.0, lam=0.95,
        whiten_rewards=False, num_sample_generations=0, logging_steps=10, save_strategy="no", report_to="none",
        bf16=False, fp16=False, gradient_checkpointing=False, seed=args.seed, disable_tqdm=True)
    trainer = PPOTrainer(args=config, processing_class=tok, model=policy, ref_model=None, reward_model=RuleReward(),
                         train_dataset=train, value_model=value, eval_dataset=train.select(range(8)))
    start = time.time()
    trainer.train()
    seconds = time.time() - start
    mem = peak_memory()
    trained = trainer.model.policy if hasattr(trainer.model, "policy") else trainer.policy_model
    return {"side": "trl", "status": "completed", "episodes": int(trainer.state.episode),
            "train_seconds": round(seconds, 2), **mem, "heldout_after": heldout_pass_at_1(trained, tok)}


# --------------------------------------------------------------------------- driver


def ensure_trl_venv(path: Path) -> tuple[Path | None, str]:
    """The trl 1.12 venv: create it, point it at the project's packages, install trl. (python, problem)."""
    py = path / "bin" / "python"
    probe = [str(py), "-c", "import trl; print(trl.__version__)"]
    if py.exists():
        got = subprocess.run(probe, check=False, capture_output=True, text=True)
        if got.returncode == 0 and got.stdout.strip() == TRL_VERSION:
            return py, ""
    base = getattr(sys, "_base_executable", None) or sys.executable
    steps = [[base, "-m", "venv", str(path)]]
    for cmd in steps:
        got = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if got.returncode:
            return None, f"{' '.join(cmd)} failed: {got.stderr.strip()[-300:]}"
    site = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], check=False,
                          capture_output=True, text=True).stdout.strip()
    project_site = next(p for p in sys.path if p.endswith("site-packages"))
    # a .pth file named to sort last: the venv's own site-packages (trl 1.12) come first on sys.path
    Path(site, "zz_project_venv.pth").write_text(project_site + "\n")
    got = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", f"trl=={TRL_VERSION}"], check=False,
                         capture_output=True, text=True)
    if got.returncode:
        return None, f"pip install trl=={TRL_VERSION} failed: {got.stderr.strip()[-300:]}"
    got = subprocess.run(probe, check=False, capture_output=True, text=True)
    if got.returncode or got.stdout.strip() != TRL_VERSION:
        return None, f"trl {TRL_VERSION} does not import in {path}: {got.stderr.strip()[-300:]}"
    return py, ""


def ensure_model(args) -> str:
    if args.model:
        return args.model
    out = cache_dir() / "bench-sft-short"
    if not (out / "config.json").exists():
        print(f"building the short-SFT'd tiny model into {out} (recipes/sft_tiny_short.yaml) ...", flush=True)
        subprocess.run([sys.executable, "-m", "rlft", "sft", "--recipe", str(ROOT / "recipes/sft_tiny_short.yaml"),
                        "-o", str(out), "--overwrite"], check=True, cwd=ROOT)
    return str(out)


def run_side(python: str, side: str, args, work: Path, seed: int) -> dict:
    cmd = [python, __file__, "--side", side, "--model", args.model, "--steps", str(args.steps), "--batch",
           str(args.batch), "--lr", str(args.lr), "--threads", str(args.threads), "--work", str(work),
           "--seed", str(seed)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    got = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in got.stdout.splitlines() if line.startswith("{")]
    if got.returncode or not lines:
        return {"side": side, "status": "failed", "error": (got.stderr.strip() or got.stdout.strip())[-800:]}
    result = json.loads(lines[-1])
    result["episodes_per_second"] = round(result["episodes"] / result["train_seconds"], 2)
    return result


def aggregate(runs: list[dict], before: float) -> dict:
    """Median speed and memory over a side's runs, the mean accuracy gain, every run's accuracy."""
    import statistics

    ok = [r for r in runs if r.get("status") == "completed"]
    if not ok:
        return runs[-1] if runs else {"status": "failed", "error": "no run"}
    out = {"status": "completed", "runs": len(ok)}
    for key in ("episodes_per_second", "train_seconds", "peak_rss_mb", "peak_cuda_mb"):
        if all(key in r for r in ok):
            out[key] = statistics.median(r[key] for r in ok)
    out["heldout_after"] = [r["heldout_after"] for r in ok]
    out["gain"] = round(statistics.mean(out["heldout_after"]) - before, 4)
    return out


def verdict(report: dict, results: dict[str, list[dict]], skip_trl: bool) -> tuple[int, str]:
    """(exit code, closing line): see the module docstring. A goal dict that is empty or absent is never "met"."""
    failed = [f"{name} seed {seed}" for name, runs in results.items() for seed, r in zip(report["seeds"], runs)
              if r.get("status") != "completed"]
    if failed or not results.get("rlft"):
        return 1, "FAILED: " + (", ".join(failed) if failed else "no rlft run") + ": the goals were not measured"
    if report.get("missing"):
        return 1, f"FAILED: TRL side not run ({report['missing']}): the goals were not measured"
    goals = report.get("goals") or {}
    if not goals:
        if skip_trl:
            return 3, "goals not measured (--skip-trl: no TRL side to compare with)"
        return 1, "FAILED: the goals were not measured"
    missed = [k for k, v in goals.items() if not v]
    return (1, "goals NOT met: " + ", ".join(missed)) if missed else (0, "every goal met")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", choices=("rlft", "trl"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--model", help="the starting model (default: recipes/sft_tiny_short.yaml, built once)")
    ap.add_argument("--steps", type=int, default=100, help="PPO updates (rollout + 4 epochs) per side")
    ap.add_argument("--batch", type=int, default=64, help="prompts per update (one response each)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads on both sides")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44],
                    help="one run per side per seed (one seed moves the accuracy by +-0.05: three by default)")
    ap.add_argument("--seed", type=int, default=42, help=argparse.SUPPRESS)
    ap.add_argument("--trl-venv", type=Path, default=None, help="where to install trl 1.12")
    ap.add_argument("--skip-trl", action="store_true", help="run the rlft side only")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side_rlft(args) if args.side == "rlft" else side_trl(args)), flush=True)
        return 0

    args.model = ensure_model(args)
    sides = [("rlft", sys.executable)]
    missing = ""
    if not args.skip_trl:
        py, missing = ensure_trl_venv(args.trl_venv or cache_dir() / "bench-trl112-venv")
        if py is not None:
            sides.append(("trl", str(py)))
    import torch

    sys.path.insert(0, str(ROOT))
    from transformers import AutoModelForCausalLM

    from rlft.models import load_tokenizer

    torch.set_num_threads(args.threads)
    before = heldout_pass_at_1(AutoModelForCausalLM.from_pretrained(args.model), load_tokenizer(args.model))
    results: dict[str, list[dict]] = {name: [] for name, _ in sides}
    with tempfile.TemporaryDirectory(prefix="bench-ppo-") as tmp:
        for seed in args.seeds:
            for name, python in sides:
                print(f"[seed {seed}] {name}: {args.steps} updates x {args.batch} prompts ...", flush=True)
                res = run_side(python, name, args, Path(tmp) / f"{name}-{seed}", seed)
                print(f"    {json.dumps(res)}", flush=True)
                results[name].append(res)
    summary = {name: aggregate(runs, before) for name, runs in results.items()}
    report = {"model": args.model, "steps": args.steps, "batch": args.batch, "lr": args.lr, "threads": args.threads,
              "seeds": args.seeds, "heldout_before": before, "sides": summary, "runs": results,
              "missing": missing or None}
    rl, tr = summary.get("rlft", {}), summary.get("trl", {})
    if rl.get("status") == "completed" and tr.get("status") == "completed":
        report["episodes_per_second_ratio"] = round(rl["episodes_per_second"] / tr["episodes_per_second"], 3)
        report["peak_rss_ratio"] = round(rl["peak_rss_mb"] / tr["peak_rss_mb"], 3)
        if "peak_cuda_mb" in rl and "peak_cuda_mb" in tr:
            report["peak_cuda_ratio"] = round(rl["peak_cuda_mb"] / max(tr["peak_cuda_mb"], 1e-9), 3)
        mem_ratio = report.get("peak_cuda_ratio", report["peak_rss_ratio"])
        report["goals"] = {"speed >= 1.5x": report["episodes_per_second_ratio"] >= 1.5,
                           "peak memory <= TRL": mem_ratio <= 1.0,
                           "accuracy gain >= TRL": rl["gain"] >= tr["gain"]}
    code, line = verdict(report, results, args.skip_trl)
    report["exit_code"], report["verdict"] = code, line
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    print(f"\nPPO, {args.steps} updates x {args.batch} prompts, tiny model {args.model}, {args.threads} thread(s), "
          f"seeds {args.seeds}; held-out pass@1 before: {before:.3f}")
    print(f"{'side':6} {'episodes/s':>10} {'train s':>8} {'peak RSS MB':>11} {'pass@1 after (per seed)':>26} "
          f"{'mean gain':>9}")
    for name, res in summary.items():
        if res.get("status") != "completed":
            print(f"{name:6} failed: {res.get('error', '')}")
            continue
        after = " ".join(f"{x:.3f}" for x in res["heldout_after"])
        print(f"{name:6} {res['episodes_per_second']:>10.1f} {res['train_seconds']:>8.1f} {res['peak_rss_mb']:>11.0f} "
              f"{after:>26} {res['gain']:>+9.3f}")
    if "episodes_per_second_ratio" in report:
        print(f"episodes/s ratio rlft/TRL: {report['episodes_per_second_ratio']:.2f}x   peak memory ratio: "
              f"{report.get('peak_cuda_ratio', report['peak_rss_ratio']):.2f}   mean accuracy gain rlft "
              f"{rl['gain']:+.3f} vs TRL {tr['gain']:+.3f}")
        print("goals: " + "  ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in report["goals"].items()))
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
