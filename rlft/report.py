"""`rlft report RUN_DIR`: plots and a markdown summary of one run folder, alarms marked where they fired.

Reads what the run wrote (summary.json, config.yaml, metrics.jsonl, alarms.jsonl, samples.jsonl) and
writes under RUN_DIR/report/:
  report.md     method, data, steps, status, the alarms with their evidence and fix, final metrics,
                sample outputs, and the plots inline
  <panel>.png   one plot per metric family the run logged: loss, reward, held-out pass@1, KL, entropy,
                zero-signal groups, DPO log-probs, completion length, repetition. Every alarm is a red
                dashed line at the step it fired; the logged points that tripped it are red dots.
  overview.png  all the panels on one page
Matplotlib draws through `matplotlib.figure.Figure` (the Agg canvas; no pyplot, no display), imported
only when a report is written, so `rlft --help` never pays for it. The report is a pure function of the
folder: running it again on a finished run rewrites the same files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlft.alarms import to_float
from rlft.errors import UserError
from rlft.run.folder import read_jsonl


@dataclass(frozen=True)
class Panel:
    name: str
    title: str
    keys: tuple[str, ...]
    ylabel: str = ""
    hline: tuple[float, str] | None = None  # (y, label), e.g. the zero-signal threshold


PANELS = (
    Panel("loss", "Loss", ("loss", "eval_loss")),
    Panel("reward", "Reward", ("reward", "rewards/chosen", "rewards/rejected", "rewards/margins")),
    Panel("heldout", "Held-out pass@1 (greedy)", ("heldout/pass_at_1",), "pass@1"),
    Panel("heldout_score", "Held-out metric (rlft.watch.heldout; higher is better)", ("heldout/score",), "score"),
    Panel("kl", "KL to the reference", ("kl", "objective/kl"), "nats/token"),
    Panel("entropy", "Entropy", ("entropy",), "nats/token"),
    Panel("zero_signal", "GRPO groups with all-equal rewards", ("frac_reward_zero_std",), "share",
          (0.8, "alarm threshold")),
    Panel("band", "GRPO/RLOO prompts by pass record (rlft.methods.prompt_band)",
          ("band/in", "band/retired", "band/failed"), "prompts"),
    Panel("logps", "DPO log-probs", ("logps/chosen", "logps/rejected"), "nats"),
    Panel("acceptance", "Bootstrap: share of samples accepted, per round", ("bootstrap/acceptance_rate",), "share"),
    Panel("bootstrap_bands", "Bootstrap: prompts by share of samples accepted, per round",
          ("band/none", "band/some", "band/most", "band/all"), "prompts"),
    Panel("length", "Completion length", ("completions/mean_length",), "tokens"),
    Panel("repetition", "Completion repetition", ("completions/repetition",), "share of repeated 4-grams"),
)
# Shown in the final-metrics table as first -> last, when logged.
HEADLINE = ("loss", "eval_loss", "reward", "heldout/pass_at_1", "heldout/score", "kl", "entropy",
            "frac_reward_zero_std", "band/left", "rewards/accuracies", "rewards/margins", "logps/chosen",
            "mean_token_accuracy", "completions/mean_length", "tools/call_frequency", "tools/failure_frequency",
            "tools/calls", "tools/errors", "tools/render_mismatches")


def series(history: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of the finite values logged under `key`."""
    out = []
    for r in history:
        v = to_float(r.get(key))
        if v is not None and math.isfinite(v):
            out.append((int(r.get("step", 0)), v))
    return out


def load_run(run_dir: Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run folder '{run_dir}' does not exist", "pass the --output-dir of a training run")
    if not any((run_dir / f).exists() for f in ("summary.json", "metrics.jsonl", "config.yaml")):
        raise UserError(f"'{run_dir}' is not an rlft run folder (no summary.json, config.yaml or metrics.jsonl)",
                        "pass the --output-dir of a training run")
    import yaml

    summary = _read_doc(run_dir / "summary.json", json.loads, {})
    config = _read_doc(run_dir / "config.yaml", yaml.safe_load, {})
    return {"dir": run_dir, "summary": summary, "config": config or {},
            "history": read_jsonl(run_dir / "metrics.jsonl"),
            "alarms": [a for a in read_jsonl(run_dir / "alarms.jsonl") if _is_alarm(a)],  # damaged ones skipped
            "samples": read_jsonl(run_dir / "samples.jsonl"),
            "preflight": _read_doc(run_dir / "preflight.json", json.loads, None)}


def _is_alarm(record: dict) -> bool:
    """An alarm record as rlft.alarms writes it (name, step, message, fix)."""
    return (isinstance(record.get("name"), str) and isinstance(record.get("step"), (int, float))
            and not isinstance(record.get("step"), bool) and all(k in record for k in ("message", "fix")))


def _read_doc(path: Path, parse, default):
    """A run file parsed (JSON or YAML, a mapping), `default` when absent; damaged: one UserError."""
    if not path.exists():
        return default
    try:
        doc = parse(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - JSONDecodeError, YAMLError, UnicodeDecodeError, OSError
        raise UserError(f"{path} is damaged ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})",
                        f"restore it, or delete {path.name} to report from the other files") from exc
    if doc is not None and not isinstance(doc, dict):
        raise UserError(f"{path} is damaged (a {type(doc).__name__}, not a mapping)",
                        f"restore it, or delete {path.name} to report from the other files")
    return doc if doc is not None else default


# --------------------------------------------------------------------------- plots


def _draw(ax, panel: Panel, history: list[dict], alarms: list[dict], hline: float | None = None) -> None:
    for key in panel.keys:
        pts = series(history, key)
        if pts:
            style = "o-" if len(pts) <= 30 else "-"
            ax.plot([s for s, _ in pts], [v for _, v in pts], style, markersize=3, linewidth=1.4, label=key)
    if panel.hline:
        y = panel.hline[0] if hline is None else hline
        ax.axhline(y, color="grey", linestyle=":", linewidth=1, label=f"{panel.hline[1]} {y:g}")
    by_step: dict[int, list[str]] = {}
    for alarm in alarms:
        by_step.setdefault(int(alarm["step"]), []).append(alarm["name"])
    for i, (step, names) in enumerate(sorted(by_step.items())):
        ax.axvline(step, color="red", linestyle="--", linewidth=1.2, alpha=0.8, label="alarm" if i == 0 else None)
        ax.annotate("\n".join(names), xy=(step, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -4),
                    textcoords="offset points", color="red", fontsize=8, va="top")
    for alarm in alarms:
        ev = alarm.get("evidence") or {}
        steps = ev.get("steps") or []
        for key in panel.keys:
            vals = ev.get(key)
            if isinstance(vals, list) and len(vals) == len(steps):
                xy = [(s, f) for s, f in zip(steps, map(to_float, vals)) if f is not None and math.isfinite(f)]
                ax.scatter([s for s, _ in xy], [v for _, v in xy], color="red", s=28, zorder=5)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    if panel.ylabel:
        ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def plot_panels(history: list[dict], alarms: list[dict], out: Path,
                hlines: dict[str, float] | None = None) -> list[tuple[Panel, Path]]:
    """One PNG per panel with data, plus overview.png; returns the panels written, in order. `hlines`
    overrides a panel's reference line (the run's own zero-signal threshold)."""
    from matplotlib.figure import Figure

    hlines = hlines or {}
    present = [p for p in PANELS if any(series(history, k) for k in p.keys)]
    written = []
    for panel in present:
        fig = Figure(figsize=(6.4, 3.4), dpi=110, layout="constrained")
        _draw(fig.add_subplot(), panel, history, alarms, hlines.get(panel.name))
        path = out / f"{panel.name}.png"
        fig.savefig(path)
        written.append((panel, path))
    if present:
        cols = 2 if len(present) > 1 else 1
        rows = math.ceil(len(present) / cols)
        fig = Figure(figsize=(6.4 * cols, 3.2 * rows), dpi=90, layout="constrained")
        for i, panel in enumerate(present):
            _draw(fig.add_subplot(rows, cols, i + 1), panel, history, alarms, hlines.get(panel.name))
        fig.savefig(out / "overview.png")
    return written


# --------------------------------------------------------------------------- markdown


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _cell(text: Any, n: int = 80) -> str:
    if isinstance(text, list) and text and isinstance(text[-1], dict):  # a chat prompt: its last message
        text = text[-1].get("content", "")
    s = str(text).replace("\n", "\\n").replace("|", "\\|")
    return "`" + (s if len(s) <= n else s[:n - 1] + "…") + "`"


def _duration(seconds: Any) -> str:
    s = to_float(seconds)
    if s is None:
        return "?"
    return f"{int(s // 60)}m {int(s % 60)}s" if s >= 60 else f"{s:.0f}s"


def render_markdown(run: dict[str, Any], written: list[tuple[Panel, Path]]) -> str:
    summary, config, history, alarms = run["summary"], run["config"], run["history"], run["alarms"]
    method = summary.get("method") or config.get("method") or "?"
    data = summary.get("data") or (config.get("data") or {}).get("train") or []
    model = (config.get("model") or {}).get("name_or_path", "?")
    steps = summary.get("global_step", max((int(r.get("step", 0)) for r in history), default=0))
    lines = [f"# rlft report: {method} run `{run['dir']}`", ""]
    files = ", ".join(f"`{d}`" for d in data) or "?"
    lines += [f"- method: **{method}**, model `{model}`",
              f"- data: {files} ({summary.get('train_rows', '?')} training rows, "
              f"{summary.get('eval_rows', 0)} eval rows)",
              f"- status: **{summary.get('status', '?')}** after {steps} steps "
              f"({_duration(summary.get('wall_seconds'))})"]
    watch = config.get("watch") or {}
    if watch.get("holdout"):
        every = f"every {watch['holdout_every']} steps" if watch.get("holdout_every") else "10 times per run"
        lines.append(f"- held-out check: `{watch['holdout']}` scored by `{watch.get('holdout_verifier')}` {every} "
                     f"(on_alarm: {watch.get('on_alarm')})")
    held = summary.get("heldout") or {}
    if held.get("curve"):
        curve = ", ".join(f"{c['step']}: {_fmt(c['score'])}" for c in held["curve"])
        noise = held["curve"][-1].get("stderr")
        lines.append(f"- held-out {held.get('metric')} on {held.get('rows')} rows (+- {_fmt(noise)}, one standard "
                     f"error), by step: {curve}")
    if summary.get("kept"):
        lines.append(f"- model kept in the run folder: step {summary['kept'].get('step')}, because "
                     f"{summary['kept'].get('why')}")
        if isinstance(b := summary["kept"].get("best_beside"), dict):
            lines.append(f"- the best check's model (step {b.get('step')}, {_fmt(b.get('score'))}) is beside it in "
                         f"{b.get('folder')}/")
    if run.get("preflight"):
        p = run["preflight"]
        interval = p.get("mixed_interval")
        lines.append(f"- pre-flight: {p.get('verdict')} (pass rate {p.get('pass_rate')}, mixed groups "
                     f"{p.get('mixed_fraction')}" + (f", 90% interval {interval[0]}-{interval[1]} over "
                                                    f"{p.get('prompts')} prompts" if interval else "") + ")")
    tools = run["dir"] / "tools.json"  # a GRPO run with --tools / --env (rlft.tools.ToolStats)
    if tools.is_file():
        t = json.loads(tools.read_text())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted((t.get("by_kind") or {}).items())) or "none"
        lines.append(f"- tools: {t.get('tool_calls')} calls reached a tool, {t.get('tool_errors')} bad (each cost "
                     f"its episode, not the run: {kinds}); token/rendering mismatches {t.get('render_mismatches')}")
        if t.get("env_failed_episodes"):
            lines.append("- environment: episodes a failing method cost (the run went on): " + ", ".join(
                f"{m} {n}" for m, n in sorted(t["env_failed_episodes"].items())))
    if summary.get("stopped_by"):
        lines.append(f"- stopped by the **{summary['stopped_by'].get('name')}** alarm; checkpoint "
                     f"`{summary.get('checkpoint')}`")
    lines += ["", "## Verdict", ""]
    if alarms:
        for a in alarms:
            lines.append(f"- **ALARM {a['name']}** at step {a['step']}: {a['message']}  \n  fix: {a['fix']}")
            sample = (a.get("evidence") or {}).get("top_reward_sample")
            if sample:
                lines[-1] += (f"  \n  top-reward sample: {_cell(sample['prompt'], 40)} -> "
                              f"{_cell(sample['completion'])} (reward {_fmt(sample['reward'])})")
    else:
        lines.append("No alarm fired." + ("" if watch.get("holdout") or method not in ("grpo", "ppo") else
                                          " (No held-out check ran: pass --holdout FILE to watch for reward "
                                          "hacking.)"))
    lines += ["", "## Metrics", "", "| metric | first | last | steps |", "| --- | --- | --- | --- |"]
    for key in HEADLINE:
        pts = series(history, key)
        if pts:
            lines.append(f"| {key} | {_fmt(pts[0][1])} | {_fmt(pts[-1][1])} | {pts[0][0]}-{pts[-1][0]} |")
    final = summary.get("final_metrics") or {}
    if final:
        lines += ["", "Final metrics (summary.json): " + ", ".join(
            f"{k} {_fmt(v)}" for k, v in final.items() if isinstance(v, (int, float)) and not k.endswith("_per_second")
            and k not in ("total_flos",))]
    if written:
        legend = "Red dashed lines: alarms, at the step they fired; red dots: the logged values that tripped them."
        lines += ["", "## Plots", "", legend, "", "![overview](overview.png)", ""]
        lines += [f"![{p.title}]({path.name})" for p, path in written]
    if alarms:
        lines += ["", "## Alarm evidence", ""]
        for a in alarms:
            lines.append(f"- **{a['name']}** (step {a['step']}, {a.get('action', 'warn')}): "
                         f"`{json.dumps(a.get('evidence'), default=str)}`")
    lines += _samples_section(run["samples"])
    return "\n".join(lines) + "\n"


def _samples_section(samples: list[dict]) -> list[str]:
    """The last two sample records: per prompt the best and worst rollout, or the best and worst scored
    held-out rows (one completion each)."""
    if not samples:
        return []
    lines = ["", "## Samples", ""]
    for entry in samples[-2:]:
        groups = entry.get("samples", [])
        if groups and all(g.get("n") == 1 for g in groups):
            lines += [f"Step {entry['step']}, {entry.get('source', '')}: the best and the worst scored rows.", "",
                      "| prompt | completion | reward |", "| --- | --- | --- |"]
            lines += [f"| {_cell(g['prompt'], 40)} | {_cell(g['best']['completion'])} | {_fmt(g['best']['reward'])} |"
                      for g in groups]
        else:
            lines += [f"Step {entry['step']}, {entry.get('source', '')}: best and worst completion per prompt.", "",
                      "| prompt | best | reward | worst | reward |", "| --- | --- | --- | --- | --- |"]
            lines += [f"| {_cell(g['prompt'], 40)} | {_cell(g['best']['completion'])} | {_fmt(g['best']['reward'])} "
                      f"| {_cell(g['worst']['completion'])} | {_fmt(g['worst']['reward'])} |" for g in groups]
        lines.append("")
    return lines


def write_report(run_dir: str | Path) -> Path:
    """Write RUN_DIR/report/report.md and its PNGs; returns the path of report.md."""
    from rlft.run.outputs import check_writable, staged

    run = load_run(Path(run_dir))
    final = run["dir"] / "report"
    if final.exists() and not final.is_dir():
        raise UserError(f"'{final}' is a file, where the report folder goes", f"move or delete {final}")
    check_writable(final, "report folder")
    frac = to_float((run["config"].get("watch") or {}).get("zero_signal_frac"))
    # Written whole into a temporary sibling and renamed over the old report (its PNGs included), so a full or
    # read-only disk leaves the previous report, never half of one.
    with staged(final, "report folder") as out:
        out.mkdir()
        written = plot_panels(run["history"], run["alarms"], out, {"zero_signal": frac} if frac is not None else {})
        written = [(panel, final / png.name) for panel, png in written]
        (out / "report.md").write_text(render_markdown(run, written))
    return final / "report.md"


def report_and_print(run_dir: Path, console) -> Path | None:
    """What every training command does at its end: write the report and print its path. A report that
    fails to write says so in one line and never fails the run (the model is already saved)."""
    try:
        path = write_report(run_dir)
    except Exception as exc:  # noqa: BLE001
        console.print(f"[yellow]report not written[/]: {type(exc).__name__}: {exc} "
                      f"(retry with: rlft report {run_dir})", highlight=False)
        return None
    console.print(f"report: {path}", highlight=False)
    return path
