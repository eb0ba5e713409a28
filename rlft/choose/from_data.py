"""What `rlft choose --data` reads: the signal inferred from data files, and the pre-flight with `--model`.

Reads and lints rows (no torch); only `preflight` loads a model, through a lazy import of rlft.preflight.
The rules that turn the Signal into a recommendation are in rlft/choose/rules.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlft.choose.rules import KIND_TO_SIGNAL, PRIORITY, Signal
from rlft.data.lint import lint_rows, rating_stats
from rlft.data.rows import completion_field, pick_verifier, rating_field, row_kinds, verifier_registry
from rlft.errors import UserError

# --------------------------------------------------------------------------- reading data

def get_verifier(name: str) -> Any:
    """The verifier a --verifier value names: a registered name, or whatever rlft.verifiers.resolve takes
    (NAME:WEIGHT, path/to/file.py:function); resolve's UserError (with a "did you mean") when it names none."""
    registry = verifier_registry()
    if name in registry:
        return registry[name]
    from rlft.verifiers import resolve

    return resolve(name)[0]


def infer_signal(paths: list[str], verifier: str | None = None, **flags: Any) -> Signal:
    """Read `paths` and describe the signal in them; `flags` (has_sft_model, budget, taste, model, ...) pass on.

    Each file is read (stdlib only), its rows classified by shape, and linted. Files of several kinds are
    allowed (demonstrations next to pairs is the usual SFT-then-DPO pair); the strongest kind leads.
    """
    from rlft.data import read_rows

    if not paths:
        raise UserError("no data files given", "pass --data FILE")
    by_kind: dict[str, list[tuple[str, list]]] = {}
    for path in paths:
        rows = read_rows(path)
        kinds = row_kinds(rows)
        counted = {k: kinds.count(k) for k in set(kinds) if k}
        if not counted and verifier and all("prompt" in r.data for r in rows):
            counted = {"verifiable": len(rows)}  # prompts only: a verifier that reads no gold (format)
        if not counted:
            cols = sorted({k for r in rows[:50] for k in r.data})
            raise UserError(f"{path}: cannot tell what signal the rows carry (columns: {', '.join(cols)})",
                            "use prompt+completion or messages (demonstrations), prompt+chosen+rejected (pairs), "
                            "prompt+answer/label/tests/schema (verifiable), or prompt+completion+rating (ratings)")
        kind = max(counted, key=counted.get)
        by_kind.setdefault(KIND_TO_SIGNAL[kind], []).append((path, rows))
    lead = next(k for k in PRIORITY if k in by_kind)
    files = by_kind[lead]
    rows = [r for _, rs in files for r in rs]
    s = Signal(kind=lead, rows=len(rows), paths=[p for p, _ in files], data_rows=rows,
               other={k: [p for p, _ in v] for k, v in by_kind.items() if k != lead},
               suffix=Path(files[0][0]).suffix.lower(), **flags)
    v = None
    if lead == "verifier":
        v = get_verifier(verifier) if verifier else pick_verifier(rows)
        if v is not None:  # the spec as the user wrote it (a plugin's name is only its function's)
            s.verifier, s.format_only = verifier or v.name, bool(getattr(v, "format_only", False)) or s.format_only
            s.partial_credit = bool(getattr(v, "partial_credit", False))
        s.sft_field = next((f for f in ("solution", "completion", "answer", "label")
                            if all(isinstance(r.data.get(f), str) and r.data[f].strip() for r in rows)), None)
    elif verifier:
        raise UserError(f"--verifier {verifier} given, but the data holds {lead}, not verifiable rows",
                        "drop --verifier, or pass prompt+gold rows (answer, label, tests, schema)")
    lint_kind = {v2: k for k, v2 in KIND_TO_SIGNAL.items()}
    for kind, group in by_kind.items():
        for _path, file_rows in group:
            s.findings += lint_rows(file_rows, lint_kind[kind], v if kind == lead else None)
    if lead == "pairs":
        identical = sum(f.count for f in s.findings if f.code == "identical_pairs")
        s.usable_rows = s.rows - identical
        s.sft_field = "chosen"
    if lead == "ratings":
        s.ratings = rating_stats(rows)
        s.rating_field = next((f for f in (rating_field(r.data) for r in rows) if f), None)
        s.sft_field = next((f for f in (completion_field(r.data) for r in rows) if f), None)
    return s


def preflight(s: Signal, num_generations: int = 8, max_prompts: int = 64, rows: list | None = None) -> Signal:
    """Measure pass rate and mixed-group share with rlft.preflight (imported here: it loads the model)."""
    from rlft.preflight import run_preflight

    result = run_preflight(s.model, rows or s.data_rows, s.verifier, num_generations, max_prompts)
    # seconds per sampled and scored answer on this machine (batched as training samples), for the rollout prices
    seconds = getattr(result, "sample_seconds", 0.0)
    s.seconds_per_rollout = seconds / max(1, result.prompts * result.num_generations) if seconds else None
    s.pass_rate = float(result.pass_rate)
    s.mixed_fraction = float(result.mixed_fraction) if result.mixed_fraction is not None else None
    s.preflight_verdict = getattr(result, "verdict", None)
    s.mixed_interval = getattr(result, "mixed_interval", None)
    s.preflight_prompts = getattr(result, "prompts", None)
    return s
