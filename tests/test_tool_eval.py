"""Episodes outside training: `rlft eval --env/--tools` scores held-out rows as GRPO's held-out check does, and the
pre-flight of a tool run samples whole episodes (rlft.episodes, rlft.preflight)."""

from __future__ import annotations

import json

from helpers import DATA, write_jsonl

ROWS = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)} for a, b in
        [(2, 3), (10, 7), (4, 4)]]

# An environment that owns its reward: 1.0 on the rows whose answer is 5, read from the row reset() was given.
ENV = '''
class Env:
    def reset(self, **row):
        self.answer = row["answer"]

    def get_reward(self) -> float:
        return 1.0 if self.answer == "5" else 0.0

    def look(self, key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return key
'''


def test_eval_env_scores_episodes_with_the_environments_reward(cli, tmp_path, tiny_dir):
    env = tmp_path / "env.py"
    env.write_text(ENV)
    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    r = cli("eval", "-m", "tiny", "-d", data, "--env", f"{env}:Env", "--max-new-tokens", "8", "--json")
    assert r.code == 0, r.text
    out = json.loads(r.out[r.out.index("{"):])
    assert out["n"] == 3 and out["task_success"] == round(1 / 3, 4)  # a fresh environment per row, reset on it
    assert {"tool_calls_per_episode", "tool_errors_per_episode", "tool_use"} <= set(out)
    # with a verifier too, both must pass (the random tiny model never answers right)
    r = cli("eval", "-m", "tiny", "-d", data, "--env", f"{env}:Env", "--verifier", "math", "--max-new-tokens", "8")
    assert r.code == 0 and "task_success=0.000" in r.out, r.text


def test_eval_env_bad_input_is_one_line(cli, tmp_path, tiny_dir):
    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    calc = str(DATA / "tools/calculator.py") + ":Calculator"
    r = cli("eval", "-m", "tiny", "-d", data, "--env", calc)  # no verifier, no get_reward: nothing scores
    assert r.code == 2 and "no --verifier" in r.err and "Traceback" not in r.text
    r = cli("eval", "-m", "tiny", "-d", data, "--env", calc, "--verifier", "math", "--samples", "4")
    assert r.code == 2 and "--samples" in r.err
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "2+3=", "answer": "5"}])
    r = cli("eval", "-m", "tiny", "-d", plain, "--env", calc, "--verifier", "math")
    assert r.code == 2 and "plain string" in r.err


def test_the_preflight_of_a_tool_run_samples_episodes(cli, tmp_path, tiny_dir):
    out = tmp_path / "run"
    r = cli("grpo", "-d", write_jsonl(tmp_path / "p.jsonl", ROWS), "--env",
            str(DATA / "tools/calculator.py") + ":Calculator", "--verifier", "math", "-o", out, "--max-steps", "1",
            "--batch-size", "2", "--num-generations", "2", "--set", "grpo.max_completion_length=12",
            "--set", "grpo.preflight_prompts=3", "--set", "grpo.preflight_max_prompts=3")
    assert r.code == 0, r.text
    text = " ".join(r.text.split())  # the console wraps long lines
    assert "tool calls/episode 0.00" in text and "over 3 prompts x 2 episodes" in text
    pre = json.loads((out / "preflight.json").read_text())
    # the random tiny model: every episode fails, no group is mixed (3 prompts are too few to refuse on)
    assert pre["pass_rate"] == 0 and pre["mixed_fraction"] == 0 and pre["within_noise"]
    assert pre["tool_calls_per_episode"] == 0 and pre["tool_errors_per_episode"] == 0


def test_the_held_out_check_of_a_tool_run_plays_episodes(cli, tmp_path, tiny_dir):
    """During training too (what watch.keep_best and the alarms read): task success of greedy episodes with the
    tools, not single-turn pass@1 on a turn that is a tool call."""
    out = tmp_path / "run"
    rows = write_jsonl(tmp_path / "p.jsonl", ROWS)
    r = cli("grpo", "-d", rows, "--env", str(DATA / "tools/calculator.py") + ":Calculator", "--verifier", "math",
            "-o", out, "--max-steps", "2", "--batch-size", "2", "--num-generations", "2", "--no-preflight",
            "--holdout", rows, "--set", "watch.holdout_every=1", "--set", "grpo.max_completion_length=12",
            "--set", "train.logging_steps=1")
    assert r.code == 0, r.text
    checks = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if "heldout/metric" in x]
    assert checks and all(c["heldout/metric"] == "task_success" and c["heldout/n"] == 3 for c in checks)
    assert {"heldout/pass_at_1", "heldout/tool_use", "heldout/tool_errors_per_episode"} <= set(checks[0])
