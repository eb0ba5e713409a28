"""rlft.dspy's engine guidance on the tiny model: a typed int/float field is answered as a number, a plain str
field does not open with a placeholder, and BootstrapFinetune takes the program as its own teacher."""

from __future__ import annotations

import pytest

dspy = pytest.importorskip("dspy")


def test_int_field_is_answered_with_a_number(tiny_dir):
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", max_tokens=16)
    predict = dspy.Predict("problem -> answer: int")
    with dspy.context(lm=lm):
        out = predict(problem="12+30")
    assert isinstance(out.answer, int)  # an untrained model: digits, parsed by DSPy's ChatAdapter
    text = lm.history[-1]["outputs"][0]
    assert text.startswith("[[ ## answer ## ]]\n") and text.split("\n")[1].lstrip("-").isdigit(), text


def test_float_field_is_answered_with_a_number(tiny_dir):
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", max_tokens=16, temperature=1.0)
    predict = dspy.Predict("problem -> answer: float")
    with dspy.context(lm=lm):
        out = predict(problem="1/4")
    assert isinstance(out.answer, float)


def test_float_answers_hold_one_dot_followed_by_a_digit(tiny_dir):
    """Sampled at 1.0 from an untrained model, a float field's answers were "297653..7897" and "5153..077448"
    (DSPy's parse fails, then its JSON retry is unguided): the guide allows one "." and a digit after it."""
    import re

    import torch

    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", max_tokens=16, temperature=1.0)
    predict = dspy.Predict("problem -> answer: float")
    for seed in (18, 26, 29, 37, 1, 2, 3, 4):
        torch.manual_seed(seed)
        n = len(lm.history)
        with dspy.context(lm=lm):
            out = predict(problem=f"1/{seed + 2}")
        assert isinstance(out.answer, float)
        text = lm.history[n]["outputs"][0].split("]]", 1)[-1].strip()
        assert re.fullmatch(r"-?\d+(\.\d+)?", text), text


def test_str_field_does_not_open_with_a_placeholder(tiny_dir):
    from rlft.dspy.engine import number_masks
    from rlft.models import load_tokenizer

    tok = load_tokenizer("tiny")
    masks, digits, _, _ = number_masks(tok, (tok.eos_token_id,))
    first = masks["str"][0]
    for banned in ("{", "[", "#", "`", " "):
        ids = tok(banned, add_special_tokens=False)["input_ids"]
        assert not bool(first[ids[0]]), banned
    assert bool(first[tok("billing", add_special_tokens=False)["input_ids"][0]])
    assert not bool(masks["int"][0][tok("x", add_special_tokens=False)["input_ids"][0]])
    assert bool(masks["int"][1][tok.eos_token_id]) and not bool(masks["int"][0][tok.eos_token_id])


def test_guidance_kind_read_off_dspy_request():
    from rlft.dspy.engine import dspy_number

    def request(outputs: str, last: str):
        system = f"Your output fields are:\n{outputs}\nAll interactions will be structured"
        return [{"role": "system", "content": system}, {"role": "user", "content": last}]

    one = "1. `answer` (int):"
    assert dspy_number(request(one, "Respond with the corresponding output fields, starting with the field "
                                    "`[[ ## answer ## ]]` (must be formatted as a valid Python int), then")) == "int"
    assert dspy_number(request("1. `answer` (str):", "starting with the field `[[ ## answer ## ]]`, then")) == "str"
    assert dspy_number(request("1. `a` (int):\n2. `b` (str):", "starting with the field `[[ ## a ## ]]` "
                                                                 "(must be formatted as a valid Python int)")) is None
    assert dspy_number([{"role": "user", "content": "hi"}]) is None


def test_bootstrap_finetune_takes_the_program_as_its_own_teacher(tiny_dir):
    from dspy.teleprompt import bootstrap_finetune

    import rlft.dspy

    rlft.dspy.local_lm("tiny")
    program = dspy.Predict("question -> answer")
    assert bootstrap_finetune.prepare_teacher(program, program) is program  # DSPy 3.4.1 alone: AssertionError
    other = dspy.Predict("question -> answer")
    assert bootstrap_finetune.prepare_teacher(program, other) is other
    with pytest.raises(AssertionError):  # DSPy's own checks still guard any other teacher
        bootstrap_finetune.prepare_teacher(program, dspy.ChainOfThought("question -> answer"))


def test_int_field_guided_while_a_grpo_job_samples(tmp_path, tiny_dir):
    """The policy a ReinforceJob serves (on the CPU: rlft.speed.sampling's copy) samples under the guide too."""
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", lora=True, max_tokens=16, output_dir=str(tmp_path / "grpo"), groups_per_step=1)
    job = lm.reinforce(train_kwargs={"num_generations": 2})
    try:
        predict = dspy.Predict("problem -> answer: int")
        with dspy.context(lm=lm):
            answers = [predict(problem=f"{i}+1").answer for i in range(3)]
        assert all(isinstance(a, int) for a in answers), answers
    finally:
        job._restore()


def test_each_self_taught_pass_samples_hotter_up_to_the_cap(tiny_dir, tmp_path):
    """What every pass refused is what the model rarely says: each later pass draws hotter (1.0, 1.25, ... 2.0),
    and the LM is greedy again after the pass."""
    from typing import Literal

    import rlft.dspy
    from rlft.dspy.lm import SELF_TEACHER_MAX_TEMPERATURE, SELF_TEACHER_SAMPLES, self_teacher_temperature

    temps = [self_teacher_temperature(a) for a in range(SELF_TEACHER_SAMPLES)]
    assert temps[:3] == [0.0, 1.0, 1.25] and temps[-1] == SELF_TEACHER_MAX_TEMPERATURE
    assert all(b >= a for a, b in zip(temps, temps[1:]))
    mood = dspy.Signature({"review": (str, dspy.InputField()),
                           "mood": (Literal["positive", "negative"], dspy.OutputField())}, "Positive or negative?")
    trainset = [dspy.Example(review=f"review {i}", mood="positive").with_inputs("review") for i in range(4)]
    seen: list = []

    def refuse_cold(example, prediction, trace=None):  # accepts only what a draw at 1.5 or hotter gave
        seen.append(lm.kwargs.get("temperature"))
        return float((seen[-1] or 0) >= 1.5)

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "hot"), max_steps=1)
    program = dspy.Predict(mood)
    program.set_lm(lm)
    dspy.BootstrapFinetune(metric=refuse_cold, num_threads=4).compile(program, trainset=trainset, teacher=program)
    assert seen == [None] * 4 + [1.0] * 4 + [1.25] * 4 + [1.5625] * 4  # the fourth pass is accepted: no fifth
    assert lm.kwargs.get("temperature") is None


def test_a_self_taught_bootstrap_samples_what_greedy_misses_and_puts_greedy_back(tiny_dir, tmp_path):
    """A greedy self-teacher keeps only answers the model already gives: rlft's self-taught pass is greedy first,
    then sampled for the examples the metric refused (rlft.dspy.lm.allow_self_teacher); another teacher, and
    the LM after the pass, stay greedy."""
    import json
    from typing import Literal

    import rlft.dspy
    from rlft.dspy.lm import SELF_TEACHER_TEMPERATURE

    mood = dspy.Signature({"review": (str, dspy.InputField()),
                           "mood": (Literal["positive", "negative"], dspy.OutputField())}, "Positive or negative?")
    trainset = [dspy.Example(review=f"review {i}", mood="positive").with_inputs("review") for i in range(8)]
    seen: list = []

    def sampled_only(example, prediction, trace=None):  # refuses every greedy answer
        seen.append(lm.kwargs.get("temperature"))
        return float(seen[-1] == SELF_TEACHER_TEMPERATURE)

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "self"), max_steps=1)
    program = dspy.Predict(mood)
    program.set_lm(lm)
    dspy.BootstrapFinetune(metric=sampled_only, num_threads=4).compile(program, trainset=trainset, teacher=program)
    assert seen == [None] * 8 + [SELF_TEACHER_TEMPERATURE] * 8  # greedy, then a sampled pass on the refused
    assert json.loads((tmp_path / "self" / "summary.json").read_text())["train_rows"] == 8
    assert lm.kwargs.get("temperature") is None  # greedy again for dspy.Evaluate

    seen.clear()
    lm2 = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "other"), max_steps=1)
    student, teacher = dspy.Predict(mood), dspy.Predict(mood)
    student.set_lm(lm2)
    teacher.set_lm(lm2)
    lm = lm2

    def accept(example, prediction, trace=None):
        seen.append(lm.kwargs.get("temperature"))
        return 1.0

    dspy.BootstrapFinetune(metric=accept, num_threads=4).compile(student, trainset=trainset, teacher=teacher)
    assert seen == [None] * 8  # another teacher is run as DSPy runs it: one greedy pass
