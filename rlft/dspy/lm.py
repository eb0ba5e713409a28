"""`local_lm(model, **train_kwargs) -> dspy.LM`: a plain `dspy.LM` (no subclass) served in-process by rlft.

`engine=` the process's one rlft.dspy.engine.LocalEngine (rlft.dspy.config.shared_engine), `provider=`
rlft.dspy.provider.RlftProvider, `model=` the model as `--model` takes it, `train_kwargs=` rlft config keys
(rlft.dspy.config).
"""

from __future__ import annotations

from typing import Any

from rlft.dspy.config import config_flags, shared_engine


def local_lm(model: str = "smollm2", *, temperature: float | None = None, max_tokens: int = 128,
             cache: bool = False, **train_kwargs: Any):
    """A dspy.LM served in-process by rlft: `model` as `--model` takes it, train_kwargs as rlft config keys
    (module docstring). Greedy unless `temperature` is set (a GRPO job samples at grpo.temperature while it
    trains). `max_tokens` 128: a DSPy ChatAdapter answer of a few short fields is 15-60 tokens. DSPy's response
    cache is off by default (a local model changes as it trains; `cache=True` turns it on).

    The model is checked now (a missing folder or a bad key: one line, nothing loaded); it loads at the first
    request."""
    import dspy

    from rlft.dspy.provider import RlftProvider
    from rlft.models import resolve_model_path

    allow_self_teacher()
    resolve_model_path(model)  # a wrong name fails here, in one line, not inside a DSPy thread
    config_flags("grpo", model, train_kwargs)
    config_flags("sft", model, train_kwargs)
    return dspy.LM(model, engine=shared_engine(), provider=RlftProvider(), temperature=temperature,
                   max_tokens=max_tokens, cache=cache, train_kwargs=dict(train_kwargs), num_retries=0)


def allow_self_teacher() -> None:
    """Let `BootstrapFinetune.compile(program, trainset, teacher=program)` mean what `teacher=None` means (the
    program teaches itself) instead of DSPy 3.4.1's AssertionError "The programs share the following
    predictor(s)": its prepare_teacher is wrapped, once, so that a teacher that *is* the student is returned as
    the student, as DSPy itself does for teacher=None. Any other teacher goes through DSPy's checks unchanged."""
    from dspy.teleprompt import bootstrap_finetune

    original = bootstrap_finetune.prepare_teacher
    if getattr(original, "rlft_self_teacher", False):
        return

    def prepare_teacher(student, teacher=None):
        return student if teacher is student else original(student, teacher)

    prepare_teacher.rlft_self_teacher = True
    bootstrap_finetune.prepare_teacher = prepare_teacher
