"""Multi-stage pipelines over the CLI, with held-out evaluation before and after every stage.

    python -m scripts.pipeline dpo  --model tiny --out runs/demo    # SFT, then DPO
    python -m scripts.pipeline grpo --model tiny --out runs/demo    # SFT, then GRPO (math verifier)
    python -m scripts.pipeline rlhf --model tiny --out runs/demo    # SFT, then reward model, then PPO
    python -m scripts.pipeline kto  --model tiny --out runs/demo    # SFT, then KTO on thumbs up/down
    python -m scripts.pipeline distill --model tiny --out runs/demo # short SFT student, full SFT teacher, distill
    python -m scripts.pipeline demo --out runs/demo                 # all of them, sharing the SFT stage

    # the same pipeline on a real model (GPU): its own recipes per stage, a longer answer budget
    python -m scripts.pipeline grpo --model Qwen/Qwen2.5-0.5B-Instruct --sft-recipe recipes/sft_qwen0.5b_lora.yaml \
        --recipe grpo=recipes/grpo_qwen0.5b_lora.yaml --heldout-tokens 64 --out runs/qwen

Each stage runs the real `rlft` command in-process (the same code path as typing it). Every number in the
closing table is measured in this run: held-out pass@1 (greedy, --verifier, default math) before -> after each
stage, the reward model's held-out pair accuracy, wall time and the alarms each stage raised. The table is
also written to OUT/pipeline.json and OUT/pipeline.md, with a bar chart of the scores in OUT/pipeline.png.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from rlft.evaluate import heldout_pass_at_1
from rlft.speed.trl_patches import release_freed_memory

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()


@dataclass
class Row:
    stage: str
    method: str
    metric: str
    before: Optional[float]
    after: Optional[float]
    wall: float
    run_dir: str
    alarms: str = ""


def _alarms(out: Path) -> str:
    """The alarms a stage raised, as 'name@step' (from its alarms.jsonl), or ''."""
    path = out / "alarms.jsonl"
    if not path.exists():
        return ""
    fired = []
    for line in path.read_text().splitlines():
        try:
            fired.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a killed run
            continue
    return ", ".join(f"{a.get('name')}@{a.get('step')}" for a in fired if isinstance(a, dict))


def _rlft(*args: str) -> None:
    from rlft.cli import main

    console.print(f"[dim]$ rlft {' '.join(args)}[/]", highlight=False)
    try:
        main(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise typer.Exit(exc.code if isinstance(exc.code, int) else 1) from exc
    finally:
        # the stage kept its freed memory for its next step (rlft.speed.trl_patches.keep_freed_memory, whose
        # settings stay with this process: hence a trim after each in-process stage and scoring); this process goes on
        release_freed_memory()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; cgroup quotas are not read)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _score_child(conn, model: str, heldout: str, verifier: str, tokens: int, threads: int) -> None:
    """A background scorer (Pipeline.prefetch): sends ("ok", score) or (error type, message, fix). Ctrl-C is
    the pipeline's to handle (it stops its scorers), and a scorer whose pipeline died exits with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=lambda: (multiprocessing.connection.wait([parent.sentinel]), os._exit(1)),
                         daemon=True).start()
    import torch

    torch.set_num_threads(threads)
    try:
        conn.send(("ok", heldout_pass_at_1(model, heldout, verifier, tokens)))
    except Exception as exc:  # noqa: BLE001 - reported by the pipeline, with the fix where there is one
        conn.send((type(exc).__name__, getattr(exc, "message", str(exc)), getattr(exc, "fix", None)))


def _raise_exit(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _stop(procs: list[subprocess.Popen], interrupted: bool, grace: float = 120.0) -> None:
    """End the stages still running. After Ctrl-C they got the SIGINT too and are saving (a second signal would
    cut that short), so they get `grace` seconds first; then SIGTERM (rlft saves and records the run as
    interrupted), and SIGKILL for whatever is still running `grace` seconds later."""
    for send in ([None] if interrupted else []) + [subprocess.Popen.terminate, subprocess.Popen.kill]:
        deadline = time.time() + grace
        for proc in procs:
            if send is not None and proc.poll() is None:
                send(proc)
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        if all(proc.poll() is not None for proc in procs):
            return


class _Child:
    """One side-by-side stage: its process, and how much of its metrics and log has been shown."""

    SHOWN = ("pre-flight", "ALARM", "warning", "error", "kept")  # log lines worth a line in the pipeline's output

    def __init__(self, name: str, proc: subprocess.Popen, command: list[str], root: Path) -> None:
        self.name, self.proc, self.command = name, proc, command
        self.start = time.time()
        self.metrics = root / name / "metrics.jsonl"
        self.log = root / f"{name}.log"
        self.rows_seen = self.log_seen = 0

    def report(self) -> None:
        """Print the new complete lines: a metrics row that logs a step or a held-out check, and the log lines
        that start with one of SHOWN. A metrics file older than this process is the previous run's."""
        if self.metrics.exists() and self.metrics.stat().st_mtime >= self.start:
            rows = _complete_lines(self.metrics)
            if len(rows) < self.rows_seen:  # the folder was emptied after a first look
                self.rows_seen = 0
            for line in rows[self.rows_seen:]:
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:
                    continue
                parts = [f"{k} {m[k]:.3f}" for k in ("reward", "loss", "heldout/score")
                         if isinstance(m.get(k), float)]
                if parts:
                    console.print(f"  {self.name} step {m.get('step')}: {', '.join(parts)}", highlight=False)
            self.rows_seen = len(rows)
        lines = _complete_lines(self.log)
        for line in lines[self.log_seen:]:
            if line.lstrip().startswith(self.SHOWN):
                console.print(f"  {self.name}: {line.strip()}", markup=False, highlight=False)
        self.log_seen = len(lines)


def _complete_lines(path: Path) -> list[str]:
    """The lines of a file another process is appending to, without a last line still being written."""
    text = path.read_text(errors="replace")
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


class Pipeline:
    """Runs stages in order under one folder, measuring held-out pass@1 around each."""

    def __init__(self, out: str, heldout: str, verifier: str | None = None, max_new_tokens: int = 8,
                 recipes: dict[str, str] | None = None) -> None:
        self.root = Path(out)
        self.heldout = heldout
        self.reward_verifier = verifier  # GRPO's reward when given; otherwise the GRPO recipe's own verifiers
        self.verifier = verifier or "math"  # scores the held-out rows
        self.max_new_tokens = max_new_tokens
        self.recipes = {**TINY_RECIPES, **(recipes or {})}
        self.rows: list[Row] = []
        self._scores: dict[str, float] = {}
        self._pending: dict[str, tuple[multiprocessing.Process, multiprocessing.connection.Connection]] = {}
        self.score_seconds: dict[str, float] = {}  # how long each model scored here took (not prefetched ones)

    def score(self, model: str) -> float:
        if model in self._pending:
            self._scores[model] = self._collect(model)
        elif model not in self._scores:
            began = time.time()
            self._scores[model] = heldout_pass_at_1(model, self.heldout, self.verifier, self.max_new_tokens)
            self.score_seconds[model] = time.time() - began
            release_freed_memory()
        return self._scores[model]

    def prefetch(self, *models: str, busy: int = 0) -> None:
        """Score `models` in the background, each in its own spawned process, so the score is ready when a row
        asks for it: the starting model scores on the core a one-thread stage leaves idle, and stages that end
        together score side by side. The same function as `score`; each process gets OMP_NUM_THREADS torch
        threads where set, else its share of the cores (`busy`: cores the caller keeps working)."""
        todo = [m for m in dict.fromkeys(models) if m not in self._scores and m not in self._pending]
        threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, usable_cpus() // (len(todo) + busy or 1)))
        spawn = multiprocessing.get_context("spawn")
        for model in todo:
            here, there = spawn.Pipe(duplex=False)
            proc = spawn.Process(target=_score_child, args=(there, model, self.heldout, self.verifier,
                                                           self.max_new_tokens, threads), daemon=True)
            proc.start()
            there.close()
            self._pending[model] = (proc, here)

    def _collect(self, model: str) -> float:
        proc, conn = self._pending.pop(model)
        try:
            try:
                answer = conn.recv()  # EOFError: the scorer died without an answer
            except EOFError:
                proc.join()
                raise RuntimeError(f"scoring {model} on the held-out rows died (exit code {proc.exitcode})") from None
        finally:
            conn.close()
        proc.join()
        if answer[0] == "ok":
            return answer[1]
        kind, message, fix = answer
        if kind in ("UserError", "DataError"):
            from rlft.errors import UserError

            raise UserError(message, fix)
        raise RuntimeError(f"scoring {model}: {kind}: {message}")

    def forget(self, model: str) -> None:
        """Drop `model`'s score and stop its background scorer (it is about to be written anew)."""
        self._scores.pop(model, None)
        if model in self._pending:
            proc, conn = self._pending.pop(model)
            proc.terminate()
            proc.join()
            conn.close()

    def close(self) -> None:
        """Stop the background scorers at once (scores not yet asked for are dropped)."""
        for model in list(self._pending):
            self.forget(model)

    def stage(self, name: str, method: str, model: str, *args: str, reuse: bool = False) -> str:
        """Run `rlft METHOD --model MODEL ARGS -o OUT/name`; returns the output folder. With `reuse`, a
        completed run of the very same command (OUT/name.command.json) is kept instead of rerun."""
        out = self.root / name
        done = out / "summary.json"
        command = [method, "--model", model, *args, "-o", str(out)]
        record = self.root / f"{name}.command.json"
        start = time.time()
        self.forget(str(out))
        same = record.exists() and json.loads(record.read_text()) == command
        if not (reuse and same and done.exists() and json.loads(done.read_text()).get("status") == "completed"):
            _rlft(*command, "--overwrite")
            record.write_text(json.dumps(command))
        self._add_row(name, method, model, time.time() - start)
        return str(out)

    def _add_row(self, name: str, method: str, model: str, wall: float) -> None:
        """The table row of a finished stage: its held-out score before and after (pair accuracy for a reward
        model), its wall time and alarms."""
        out = self.root / name
        final = json.loads((out / "summary.json").read_text()).get("final_metrics", {})
        if method == "reward":
            self.rows.append(Row(name, method, "held-out pair accuracy", None,
                                 final.get("heldout_pair_accuracy"), wall, str(out), _alarms(out)))
        else:
            before = self.score(model)
            self.rows.append(Row(name, method, "held-out pass@1", before, self.score(str(out)), wall, str(out),
                                 _alarms(out)))

    def side_by_side(self, stages: list[tuple[str, str, str, list[str]]], jobs: int) -> list[str]:
        """Run independent stages (name, method, model, args) `jobs` at a time, each as its own `python -m rlft`
        process; returns their output folders, in order. On a 2-core CPU two one-thread GRPO stages side by side
        each ran at about the speed of one alone, where a second thread in one process made a step 1.44x faster
        (BENCHMARKS.md, "A real model").

        Each process gets cpus // processes torch threads unless OMP_NUM_THREADS is set; its output goes to
        OUT/NAME.log, and each logged step, pre-flight verdict and alarm shows here as one line. Rows are
        scored and tabled as `stage` does. A failed stage, Ctrl-C or SIGTERM stops the others and the
        pipeline (a failed stage with the tail of its log and its exit code)."""
        names = [name for name, *_ in stages]
        if len(set(names)) < len(names):
            raise ValueError("side_by_side: stage names must differ")
        jobs = min(jobs, len(stages))
        if jobs <= 1:
            return [self.stage(name, method, model, *args) for name, method, model, args in stages]
        env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "160")}  # log lines unwrapped
        env.setdefault("OMP_NUM_THREADS", str(max(1, usable_cpus() // jobs)))
        self.root.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.forget(str(self.root / name))
        pending, running, walls = list(stages), {}, {}
        console.print(f"{len(stages)} stages side by side, {jobs} at a time, OMP_NUM_THREADS="
                      f"{env['OMP_NUM_THREADS']} each; their logs: {self.root}/NAME.log", highlight=False)
        previous, interrupted = signal.signal(signal.SIGTERM, _raise_exit), False
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    name, method, model, args = pending.pop(0)
                    command = [method, "--model", model, *args, "-o", str(self.root / name)]
                    console.print(f"$ rlft {' '.join(command)} > {self.root / name}.log", style="dim",
                                  markup=False, highlight=False)
                    with open(self.root / f"{name}.log", "w") as log:
                        proc = subprocess.Popen([sys.executable, "-m", "rlft", *command, "--overwrite"], env=env,
                                                stdout=log, stderr=subprocess.STDOUT)
                    running[name] = _Child(name, proc, command, self.root)
                time.sleep(2)
                for name, child in list(running.items()):
                    code = child.proc.poll()
                    child.report()
                    if code is None:
                        continue
                    del running[name]
                    walls[name] = time.time() - child.start
                    if code:
                        tail = child.log.read_text(errors="replace").splitlines()[-15:]
                        console.print("\n".join(tail), markup=False, highlight=False)
                        why = f"signal {-code}" if code < 0 else f"exit {code}"
                        console.print(f"[bold red]{name} failed ({why}); its log: {child.log}[/]", highlight=False)
                        raise typer.Exit(code if code > 0 else 128 - code)
                    (self.root / f"{name}.command.json").write_text(json.dumps(child.command))
        except KeyboardInterrupt:
            interrupted = True
            console.print("interrupted: waiting for the stages still running to save", highlight=False)
            raise typer.Exit(130) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            _stop([child.proc for child in running.values()], interrupted)
        self.prefetch(*(str(self.root / name) for name, method, *_ in stages if method != "reward"))
        for name, method, model, _ in stages:
            self._add_row(name, method, model, walls[name])
        return [str(self.root / name) for name in names]

    def table(self, title: str) -> None:
        """Print the closing table and write it to OUT/pipeline.{json,md} with a before/after chart."""
        table = Table(title=title)
        for col in ("stage", "method", "metric", "before", "after", "wall time", "alarms"):
            table.add_column(col, justify="right" if col in ("before", "after", "wall time") else "left")
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        for r in self.rows:
            table.add_row(r.stage, r.method, r.metric, fmt(r.before), fmt(r.after), f"{r.wall:.0f} s",
                          r.alarms or "-")
        # Wide enough for the alarms column even when stdout is not a terminal (rich then assumes 80).
        Console(width=max(console.width, 120)).print(table)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "pipeline.json").write_text(json.dumps([r.__dict__ for r in self.rows], indent=2))
        lines = ["| stage | method | metric | before | after | wall time | alarms |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.stage} | {r.method} | {r.metric} | {fmt(r.before)} | {fmt(r.after)} | {r.wall:.0f} s "
                  f"| {r.alarms or '-'} |" for r in self.rows]
        chart = self.chart(title)
        (self.root / "pipeline.md").write_text(f"# {title}\n\n" + "\n".join(lines) + f"\n\n![stages]({chart.name})\n")
        console.print(f"table: {self.root / 'pipeline.md'}; chart: {chart}; run reports: {self.root}/*/report/")

    def chart(self, title: str) -> Path:
        """OUT/pipeline.png: each stage's held-out score before and after, alarms named under the bars."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(1.6 * len(self.rows) + 2, 3.6), dpi=110, layout="constrained")
        ax = fig.add_subplot()
        xs = range(len(self.rows))
        have = lambda attr: [(x, getattr(r, attr)) for x, r in zip(xs, self.rows)  # noqa: E731
                             if getattr(r, attr) is not None]  # no bar where a stage has no score
        ax.bar([x - 0.2 for x, _ in have("before")], [v for _, v in have("before")], 0.4, label="before",
               color="#9aa5b1")
        ax.bar([x + 0.2 for x, _ in have("after")], [v for _, v in have("after")], 0.4, label="after",
               color="#2b6cb0")
        for x, r in zip(xs, self.rows):
            if r.after is not None:
                ax.annotate(f"{r.after:.3f}", (x + 0.2, r.after), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), [f"{r.stage}\n{r.metric.replace('held-out ', '')}"
                                 + (f"\n{r.alarms}" if r.alarms else "") for r in self.rows], fontsize=8)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("held-out score")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
        path = self.root / "pipeline.png"
        fig.savefig(path)
        return path


Model = Annotated[str, typer.Option(help="Starting model (local folder, hub id or tiny).")]
Out = Annotated[str, typer.Option(help="Folder for the stage runs.")]
Heldout = Annotated[str, typer.Option(help="Held-out prompt + answer rows.")]
SftData = Annotated[str, typer.Option(help="SFT demonstrations.")]
SftRecipe = Annotated[str, typer.Option(help="SFT recipe.")]
Verifier = Annotated[Optional[str], typer.Option(
    "--verifier", help="Scores the held-out rows (default math) and, when given, replaces the GRPO recipe's reward.")]
PairsEval = Annotated[str, typer.Option(help="Held-out pairs (DPO eval, reward model pair accuracy).")]
Tokens = Annotated[int, typer.Option("--heldout-tokens", min=1, help="Generation budget per held-out answer.")]
RecipeOpt = Annotated[Optional[list[str]], typer.Option(
    "--recipe", help="STAGE=FILE, e.g. dpo=recipes/dpo_qwen0.5b_lora.yaml (repeatable; default: the tiny ones).")]

# The recipe each stage runs unless --recipe STAGE=FILE says otherwise.
TINY_RECIPES = {"dpo": "recipes/dpo_tiny.yaml", "grpo": "recipes/grpo_math_tiny.yaml",
                "reward": "recipes/reward_tiny.yaml", "ppo": "recipes/ppo_tiny.yaml", "kto": "recipes/kto_tiny.yaml",
                "rloo": "recipes/rloo_math_tiny.yaml", "distill": "recipes/distill_tiny.yaml"}
TEACHER_RECIPE = "recipes/sft_tiny.yaml"  # the teacher of the distill stage: the full SFT (1.00 held-out)


def _recipes(pairs: list[str] | None) -> dict[str, str]:
    """{stage: recipe file} from --recipe STAGE=FILE items; each file must be a recipe for that stage's method."""
    import yaml

    out = {}
    for item in pairs or []:
        stage, sep, path = item.partition("=")
        if stage == "sft":
            raise typer.BadParameter("the SFT stage's recipe is --sft-recipe (SFT_RECIPE= in make)",
                                     param_hint="--recipe")
        if not sep or stage not in TINY_RECIPES or not path:
            raise typer.BadParameter(f"'{item}': expected STAGE=FILE with STAGE one of {', '.join(TINY_RECIPES)}",
                                     param_hint="--recipe")
        if not Path(path).is_file():
            raise typer.BadParameter(f"'{path}': no such recipe file", param_hint="--recipe")
        method = (yaml.safe_load(Path(path).read_text()) or {}).get("method")
        if method not in (None, stage):
            raise typer.BadParameter(f"'{path}' is a recipe for `rlft {method}`, not the {stage} stage",
                                     param_hint="--recipe")
        out[stage] = path
    return out


def _pipeline(out: str, heldout: str, verifier: str | None, tokens: int, recipes: list[str] | None) -> Pipeline:
    """A Pipeline whose inputs are checked before any stage trains: recipes, the verifier, the held-out gold."""
    from rlft.data import read_rows
    from rlft.verifiers.loading import validate_gold

    p = Pipeline(out, heldout, verifier, tokens, _recipes(recipes))
    validate_gold(read_rows(heldout), [p.verifier])  # unknown verifier, or gold it cannot read: exit 2 now
    return p


def _sft(p: Pipeline, model: str, data: str, recipe: str) -> str:
    return p.stage("sft", "sft", model, "--recipe", recipe, "--data", data, reuse=True)


def _dpo(p: Pipeline, start: str, pairs: str, pairs_eval: str) -> None:
    p.stage("dpo", "dpo", start, "--recipe", p.recipes["dpo"], "--pairs", pairs, "--eval-data", pairs_eval)


def _grpo(p: Pipeline, start: str, prompts: str) -> None:
    reward = ["--verifier", p.reward_verifier] if p.reward_verifier else []
    p.stage("grpo", "grpo", start, "--recipe", p.recipes["grpo"], "--prompts", prompts, *reward,
            "--eval-data", p.heldout)


def _rlhf(p: Pipeline, start: str, pairs: str, pairs_eval: str, prompts: str) -> None:
    rm = p.stage("reward", "reward", start, "--recipe", p.recipes["reward"], "--pairs", pairs,
                 "--eval-data", pairs_eval)
    p.stage("ppo", "ppo", start, "--recipe", p.recipes["ppo"], "--prompts", prompts, "--reward-model", rm,
            "--eval-data", p.heldout, "--holdout-verifier", p.verifier)


def _kto(p: Pipeline, start: str, thumbs: str) -> None:
    p.stage("kto", "kto", start, "--recipe", p.recipes["kto"], "--feedback", thumbs)


def _rloo(p: Pipeline, start: str, prompts: str) -> None:
    reward = ["--verifier", p.reward_verifier] if p.reward_verifier else []
    p.stage("rloo", "rloo", start, "--recipe", p.recipes["rloo"], "--prompts", prompts, *reward,
            "--eval-data", p.heldout)


def _distill(p: Pipeline, start: str, model: str, sft_data: str, teacher_recipe: str, prompts: str) -> None:
    """A teacher SFT'd with `teacher_recipe` from `model` (reused when unchanged), then the student `start`
    distilled from it on the prompts alone."""
    teacher = p.stage("teacher", "sft", model, "--recipe", teacher_recipe, "--data", sft_data, reuse=True)
    p.stage("distill", "distill", start, "--recipe", p.recipes["distill"], "--teacher", teacher,
            "--prompts", prompts, "--eval-data", p.heldout)


@app.command()
def dpo(model: Model = "tiny", out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
        sft_data: SftData = "data/arith/sft_train.jsonl", sft_recipe: SftRecipe = "recipes/sft_tiny_short.yaml",
        pairs: Annotated[str, typer.Option(help="Preference pairs.")] = "data/arith/pairs_train.jsonl",
        pairs_eval: PairsEval = "data/arith/pairs_eval.jsonl",
        verifier: Verifier = None, heldout_tokens: Tokens = 8, recipe: RecipeOpt = None) -> None:
    """SFT, then DPO from the SFT'd model."""
    p = _pipeline(out, heldout, verifier, heldout_tokens, recipe)
    _dpo(p, _sft(p, model, sft_data, sft_recipe), pairs, pairs_eval)
    p.table("pipeline-dpo: SFT then DPO")


@app.command()
def grpo(model: Model = "tiny", out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
         sft_data: SftData = "data/arith/sft_train.jsonl", sft_recipe: SftRecipe = "recipes/sft_tiny_short.yaml",
         prompts: Annotated[str, typer.Option(help="GRPO prompts + answers.")] = "data/arith/grpo_prompts.jsonl",
         verifier: Verifier = None, heldout_tokens: Tokens = 8, recipe: RecipeOpt = None) -> None:
    """SFT, then GRPO with a verifier as the reward."""
    p = _pipeline(out, heldout, verifier, heldout_tokens, recipe)
    _grpo(p, _sft(p, model, sft_data, sft_recipe), prompts)
    p.table("pipeline-grpo: SFT then GRPO")


@app.command()
def rlhf(model: Model = "tiny", out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
         sft_data: SftData = "data/arith/sft_train.jsonl", sft_recipe: SftRecipe = "recipes/sft_tiny_short.yaml",
         pairs: Annotated[str, typer.Option(help="Pairs for the reward model.")] = "data/arith/pairs_train.jsonl",
         prompts: Annotated[str, typer.Option(help="PPO prompts.")] = "data/arith/grpo_prompts.jsonl",
         pairs_eval: PairsEval = "data/arith/pairs_eval.jsonl",
         verifier: Verifier = None, heldout_tokens: Tokens = 8, recipe: RecipeOpt = None) -> None:
    """SFT, then a reward model, then PPO against it (held-out accuracy shows any reward hacking)."""
    p = _pipeline(out, heldout, verifier, heldout_tokens, recipe)
    _rlhf(p, _sft(p, model, sft_data, sft_recipe), pairs, pairs_eval, prompts)
    p.table("pipeline-rlhf: SFT, reward model, PPO")


@app.command()
def kto(model: Model = "tiny", out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
        sft_data: SftData = "data/arith/sft_train.jsonl", sft_recipe: SftRecipe = "recipes/sft_tiny_short.yaml",
        thumbs: Annotated[str, typer.Option(help="Thumbs rows: prompt, completion, label.")]
        = "data/arith/thumbs_train.jsonl",
        verifier: Verifier = None, heldout_tokens: Tokens = 8, recipe: RecipeOpt = None) -> None:
    """SFT, then KTO on thumbs up/down feedback."""
    p = _pipeline(out, heldout, verifier, heldout_tokens, recipe)
    _kto(p, _sft(p, model, sft_data, sft_recipe), thumbs)
    p.table("pipeline-kto: SFT then KTO")


@app.command()
def distill(model: Model = "tiny", out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
            sft_data: SftData = "data/arith/sft_train.jsonl", sft_recipe: SftRecipe = "recipes/sft_tiny_short.yaml",
            teacher_recipe: Annotated[str, typer.Option(help="The teacher's SFT recipe.")] = TEACHER_RECIPE,
            prompts: Annotated[str, typer.Option(help="Prompts the student samples on.")]
            = "data/arith/grpo_prompts.jsonl",
            verifier: Verifier = None, heldout_tokens: Tokens = 8, recipe: RecipeOpt = None) -> None:
    """A short SFT (the student) and a full SFT (the teacher) of the same model, then on-policy distillation."""
    p = _pipeline(out, heldout, verifier, heldout_tokens, recipe)
    _distill(p, _sft(p, model, sft_data, sft_recipe), model, sft_data, teacher_recipe, prompts)
    p.table("pipeline-distill: SFT student, SFT teacher, distillation")


@app.command()
def demo(out: Out = "runs/demo", heldout: Heldout = "data/arith/test.jsonl",
         with_rlhf: Annotated[bool, typer.Option("--rlhf/--no-rlhf", help="Include reward model + PPO.")] = True,
         ) -> None:
    """Everything on the tiny model and shipped data: one SFT, then DPO, KTO, GRPO, RLOO, reward model + PPO,
    and distillation from a fully SFT'd teacher."""
    start = time.time()
    p = Pipeline(out, heldout)
    _rlft("init-model", "--out", str(Path(out) / "tiny"), "--overwrite")
    sft = _sft(p, str(Path(out) / "tiny"), "data/arith/sft_train.jsonl", "recipes/sft_tiny_short.yaml")
    _dpo(p, sft, "data/arith/pairs_train.jsonl", "data/arith/pairs_eval.jsonl")
    _kto(p, sft, "data/arith/thumbs_train.jsonl")
    _grpo(p, sft, "data/arith/grpo_prompts.jsonl")
    _rloo(p, sft, "data/arith/grpo_prompts.jsonl")
    if with_rlhf:
        _rlhf(p, sft, "data/arith/pairs_train.jsonl", "data/arith/pairs_eval.jsonl", "data/arith/grpo_prompts.jsonl")
    _distill(p, sft, str(Path(out) / "tiny"), "data/arith/sft_train.jsonl", TEACHER_RECIPE,
             "data/arith/grpo_prompts.jsonl")
    p.table(f"rlft demo on the tiny model ({time.time() - start:.0f} s in all)")


if __name__ == "__main__":
    from rlft.errors import UserError

    try:
        app()
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc.message}")
        raise SystemExit(2) from exc
