"""On-policy distillation with TRL's DistillationTrainer: the student samples, the teacher scores its tokens.

Rows are prompts only. For each prompt the student (`--model`) generates a completion at `distill.temperature`;
the loss is the per-token generalized Jensen-Shannon divergence between the student's and the teacher's
next-token distributions on that completion (`distill.beta`: 0 forward KL, 0.5 JSD, 1 reverse KL, TRL's
default). No reward, no reference model, no written answers: what the teacher would say about the student's
own tokens is the signal (Agarwal et al. 2024, "On-Policy Distillation of Language Models").

Same tokenizer required: the divergence compares distributions over token ids, so the teacher's vocabulary must
be the student's token for token. TRL only compares vocab sizes (two tokenizers of equal size but different ids
pass it and train on garbage); rlft compares the two vocabularies after loading the tokenizers (no model
weights yet) and before the run folder is created, and refuses with one line. The teacher is loaded frozen
once (`distill.teacher_model_name_or_path`, `--teacher`), with the student's dtype; `tiny` and local folders work
offline. After training, greedy pass@1 on data.eval (rows with gold answers) scored by `distill.heldout_verifier`
goes into summary.json.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rlft.config import RunConfig, Section
from rlft.errors import UserError
from rlft.methods.common import Prepared, build_trl_config, load_run_tokenizer

KIND = "prompts"
SAMPLES_WHILE_TRAINING = True  # the policy samples as it trains: rlft.speed.attach in methods.common.train


def vocab_mismatch(student_tok, teacher_tok) -> str | None:
    """Why the two tokenizers cannot be distilled across (their token -> id maps differ), or None."""
    a, b = student_tok.get_vocab(), teacher_tok.get_vocab()
    if a == b:
        return None
    differ = sum(1 for t, i in a.items() if b.get(t) != i) + sum(1 for t in b if t not in a)
    return f"{len(a)} vs {len(b)} tokens, {differ} token ids differ"


def check_tokenizers(cfg: RunConfig):
    """Load both tokenizers (no weights) and refuse a teacher whose vocabulary is not the student's."""
    from rlft.models import load_tokenizer

    teacher = cfg.distill.teacher_model_name_or_path
    tok = load_run_tokenizer(cfg)
    teacher_tok = load_tokenizer(teacher, None, cfg.model.trust_remote_code)
    why = vocab_mismatch(tok, teacher_tok)
    if why:
        raise UserError(f"teacher '{teacher}' has a different tokenizer from the student '{cfg.model.name_or_path}' "
                        f"({why}): distillation compares next-token distributions id by id",
                        "use a teacher from the student's model family (same tokenizer)")
    return tok


def teacher_config(cfg: RunConfig) -> Section:
    """The teacher's model section: the student's dtype and trust setting, no LoRA, no 4-bit."""
    return Section(name_or_path=cfg.distill.teacher_model_name_or_path, dtype=cfg.model.dtype,
                   revision=cfg.distill.get("teacher_model_revision"),
                   trust_remote_code=cfg.model.trust_remote_code, load_in_4bit=False, lora=Section(enabled=False))


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: the two tokenizers compared, the held-out rows' gold validated."""
    tok = check_tokenizers(cfg)
    if eval_rows:
        from rlft.verifiers.loading import validate_gold

        validate_gold(eval_rows, [cfg.distill.heldout_verifier])
    return Prepared(train_rows, eval_rows, tok=tok)


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import DistillationConfig, DistillationTrainer

    from rlft.data.table import to_dataset
    from rlft.models import load_model

    model = load_model(cfg.model)
    teacher = load_model(teacher_config(cfg), trainable=False, with_lora=False)
    args = build_trl_config(cfg, DistillationConfig, out, False)
    return DistillationTrainer(model=model, teacher_model=teacher, args=args, processing_class=prepared.tok,
                               train_dataset=to_dataset(prepared.train_rows, ("prompt",)))


def after(cfg: RunConfig, trainer, prepared: Prepared, console: Console) -> dict[str, float]:
    """Greedy pass@1 of the student on the held-out rows, scored by distill.heldout_verifier."""
    if not prepared.eval_rows:
        return {}
    from rlft.evaluate import evaluate_rows
    from rlft.verifiers.loading import load_verifiers

    budget = cfg.distill.heldout_max_new_tokens or cfg.distill.max_completion_length
    checker = load_verifiers([cfg.distill.heldout_verifier])[0]
    result = evaluate_rows(trainer.model, trainer.processing_class, [r.data for r in prepared.eval_rows],
                           scorer=checker, max_new_tokens=budget, served=True)
    return {"heldout_pass_at_1": result.pass_at_1}
