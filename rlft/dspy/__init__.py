"""rlft as the in-process training backend of a DSPy program (optional extra `dspy`, dspy 3.4.x).

One entry point, `rlft.dspy.local_lm(model, **train_kwargs) -> dspy.LM`:

    import dspy, rlft.dspy
    lm = rlft.dspy.local_lm("smollm2", lora=True)
    dspy.configure(lm=lm)
    program = dspy.Predict("ticket -> label")
    tuned = dspy.BootstrapFinetune(metric=metric).compile(program, trainset=trainset, teacher=program)

What DSPy 3.4.1 offers, and what this package plugs into it (read from dspy/clients/lm.py, provider.py,
execution.py, engines/base.py, teleprompt/bootstrap_finetune.py and grpo.py):
- `dspy.LM(model, engine=...)`: a custom engine object with `complete(Request) -> Response`. DSPy keeps its
  cache, retries, history, callbacks and `n` fan-out (one engine call per candidate) and hands the engine one
  canonical request. rlft.dspy.engine.LocalEngine is that engine: the transformers model in-process, no
  HTTP server, no litellm call. An LM's copies share the engine; the engine serves the model named by
  `Request.model` (so the LM DSPy copies after a fine-tune, `lm.copy(model=<new id>)`, is served the new
  weights by the same engine object). No subclass of dspy.LM is needed.
- `dspy.LM(provider=...)`: a `dspy.Provider` with `finetunable` / `reinforceable`, its `finetune(job, model,
  train_data, train_data_format, train_kwargs) -> model id` and its `ReinforceJob` class.
  rlft.dspy.provider.RlftProvider: finetune is an rlft SFT run (rlft.methods.sft through
  rlft.methods.common.train: a normal run folder), the ReinforceJob (rlft.dspy.reinforce) takes GRPO steps
  on DSPy's groups in this process.

Nothing here imports dspy, torch or transformers at import time; `rlft --help` never loads this package.
docs/dspy.md has the whole story (what runs where, what does not carry over).
"""

from __future__ import annotations

from typing import Any

__all__ = ["local_lm"]


def local_lm(model: str = "smollm2", **train_kwargs: Any):
    """A `dspy.LM` served in-process by rlft (see rlft.dspy.lm.local_lm)."""
    from rlft.dspy.lm import local_lm as _local_lm

    return _local_lm(model, **train_kwargs)
