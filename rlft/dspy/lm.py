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


# A self-taught BootstrapFinetune's bootstrap pass (allow_self_teacher): the first trace of each example greedy,
# as DSPy takes it, then up to SELF_TEACHER_SAMPLES - 1 more sampled for the examples the metric has not accepted
# yet: rejection sampling, as `rlft bootstrap` does with its `bootstrap.samples` (8) a prompt. The first sampled
# pass is at SELF_TEACHER_TEMPERATURE (the model's own distribution), each later one SELF_TEACHER_HEAT times
# hotter up to SELF_TEACHER_MAX_TEMPERATURE: what is still refused is what the model rarely says, and a flatter
# draw finds it sooner (a kept trace is one the metric accepted, whatever the temperature that drew it).
SELF_TEACHER_TEMPERATURE = 1.0
SELF_TEACHER_HEAT = 1.25
SELF_TEACHER_MAX_TEMPERATURE = 2.0
SELF_TEACHER_SAMPLES = 8


def self_teacher_temperature(attempt: int) -> float:
    """The temperature of the self-teacher's pass `attempt` (0: greedy, then 1.0, 1.25, 1.56, 1.95, 2.0, ...)."""
    if attempt == 0:
        return 0.0
    return min(SELF_TEACHER_MAX_TEMPERATURE, SELF_TEACHER_TEMPERATURE * SELF_TEACHER_HEAT ** (attempt - 1))

# Students whose BootstrapFinetune teaches them from themselves, by id, with a weak reference to tell a reused id.
_SELF_TAUGHT: dict[int, Any] = {}


def allow_self_teacher() -> None:
    """Make a self-taught `BootstrapFinetune` (`teacher=program` or `teacher=None`) able to teach anything.

    - `teacher=program`: DSPy 3.4.1 asserts that the teacher shares no predictor with the student ("The
      programs share the following predictor(s)"). Its prepare_teacher is wrapped, once, so that a teacher that
      *is* the student is returned as the student, as DSPy itself does for teacher=None. Any other teacher goes
      through DSPy's checks unchanged.
    - Where it departs from DSPy: a self-teacher's bootstrap pass is *rejection sampling*. DSPy runs the teacher
      once per example at the LM's temperature; rlft's LMs are greedy, and a greedy model's accepted traces are
      answers it already gives, so fine-tuning on them changes nothing it answers (on a two-label program where
      the untrained model says one label, every kept trace is that label). Here the pass is DSPy's own
      bootstrap_trace_data run again on the examples the metric has not accepted yet (a truthy score, DSPy's
      filter), up to SELF_TEACHER_SAMPLES passes: the first greedy, the others with each of the student's greedy
      rlft LMs sampling, hotter each pass (self_teacher_temperature); each example keeps its first accepted
      trace (else its greedy one). The LMs' temperature is put back after the pass. A program whose LMs all have a
      temperature of their own gets DSPy's one pass at it; any other teacher runs as DSPy runs it."""
    import weakref

    from dspy.teleprompt import bootstrap_finetune

    original = bootstrap_finetune.prepare_teacher
    if getattr(original, "rlft_self_teacher", False):
        return
    original_trace = bootstrap_finetune.bootstrap_trace_data

    def prepare_teacher(student, teacher=None):
        if teacher is None or teacher is student:
            _SELF_TAUGHT[id(student)] = weakref.ref(student)
            return student
        return original(student, teacher)

    def bootstrap_trace_data(program, dataset, metric=None, **kwargs):
        ref = _SELF_TAUGHT.pop(id(program), None)
        if ref is None or ref() is not program or metric is None:
            return original_trace(program=program, dataset=dataset, metric=metric, **kwargs)
        return self_taught_traces(program, dataset, metric, lambda rows: original_trace(
            program=program, dataset=rows, metric=metric, **kwargs))

    prepare_teacher.rlft_self_teacher = True
    bootstrap_finetune.prepare_teacher = prepare_teacher
    bootstrap_finetune.bootstrap_trace_data = bootstrap_trace_data


def self_taught_traces(program, dataset: list, metric, trace) -> list[dict]:
    """The self-teacher's pass (allow_self_teacher): `trace(rows)` is DSPy's bootstrap_trace_data on `rows`;
    DSPy's trace dicts, one per example, `example_ind` into `dataset`."""
    kept: dict[int, dict] = {}
    todo = list(range(len(dataset)))
    sampled: list = []
    samples = 0
    try:
        for attempt in range(SELF_TEACHER_SAMPLES):
            if attempt == 1:
                sampled = sampled_lms(program)
                if not sampled:
                    break  # every LM samples at its own temperature already: more passes are DSPy's to decide
            for lm, _ in sampled:
                lm.kwargs["temperature"] = self_teacher_temperature(attempt)
            samples += len(todo)
            for d in trace([dataset[i] for i in todo]):
                i = todo[d["example_ind"]]
                d["example_ind"] = i
                if i not in kept or (d.get("score") and not kept[i].get("score")):
                    kept[i] = d
            todo = [i for i in todo if not kept.get(i, {}).get("score")]
            if not todo:
                break
    finally:
        for lm, temperature in sampled:
            lm.kwargs["temperature"] = temperature
    accepted = len(dataset) - len(todo)
    _console().print(f"rlft.dspy: the program teaches itself: {accepted} of {len(dataset)} examples accepted in "
                     f"{samples} samples (the first greedy, then up to {SELF_TEACHER_SAMPLES - 1} more at "
                     f"temperatures {SELF_TEACHER_TEMPERATURE} to {SELF_TEACHER_MAX_TEMPERATURE})", highlight=False)
    return [kept[i] for i in sorted(kept)]


def _console():
    from rich.console import Console

    return Console(stderr=True)


def sampled_lms(program) -> list:
    """Set each greedy rlft LM of `program`'s predictors to SELF_TEACHER_TEMPERATURE; (LM, its temperature) for
    each LM set, to put back."""
    from rlft.dspy.provider import RlftProvider

    lms: dict[int, Any] = {}
    for predictor in program.predictors():
        lm = getattr(predictor, "lm", None)
        if lm is not None and isinstance(getattr(lm, "provider", None), RlftProvider) \
                and not lm.kwargs.get("temperature"):
            lms[id(lm)] = lm
    olds = [lm.kwargs.get("temperature") for lm in lms.values()]
    for lm in lms.values():
        lm.kwargs["temperature"] = SELF_TEACHER_TEMPERATURE
    return [(lm, old) for lm, old in zip(lms.values(), olds)]
