"""The tool-collapse alarm of GRPO runs with --tools / --env: the policy stops calling its tools, or its calls
mostly fail, while the reward does not rise.

It reads what TRL logs for a tool run (metrics.jsonl): `tools/call_frequency` (tool calls per episode),
`tools/failure_frequency` (the share of calls that failed: an error result) and `reward`. Like the rules in
rlft.alarms it is a pure function of the history (so it is tested on recorded rows); rlft.watch.monitor.Watcher runs it
beside them, once per run, skipped with watch.ignore: [tool_collapse]. A model that learns to answer without the
tool while its reward rises is not a collapse, so a rising reward keeps it quiet.
"""

from __future__ import annotations

from rlft.alarms import Alarm, History, Thresholds, _mean, _r, series

# Tool calls per episode fell below a quarter of the first logged value on TOOL_LOGS logs in a row (each already
# a mean over logging_steps steps). Measured on the tiny model after SFT on calculator demonstrations: GRPO at lr
# 3e-4 went 0.7 -> 0.075 -> 0 calls per episode by step 30 with reward 0.25 -> 0 (no task success after), while
# the healthy lr 3e-5 run stayed within 0.8-0.93 (tests/fixtures/grpo_tools_*_metrics.jsonl).
TOOL_COLLAPSE_RATIO = 0.25
TOOL_MIN_START = 0.2  # calls per episode at the first log: below it the model hardly used its tools to begin with
# More than half of the calls were error results (raised, timed out, too long, bad arguments, unknown tool) on
# TOOL_LOGS logs in a row: most episodes teach the model about broken calls, not the task (healthy run: <= 0.05).
TOOL_ERROR_SHARE = 0.5
TOOL_LOGS = 2
# "The reward does not rise": the mean reward of the last TOOL_LOGS logs gained less than this share of the
# starting spread (mean reward_std of the first logs; 0.05 of 0.3-0.5 is 1.5-2.5 points of pass rate).
TOOL_FLAT_RISE = 0.05


def tool_collapse(history: History, th: Thresholds | None = None) -> Alarm | None:
    """Tool use collapsed (calls per episode below TOOL_COLLAPSE_RATIO of the start) or tool errors dominate
    (failure share >= TOOL_ERROR_SHARE) on the last TOOL_LOGS logs, while the reward stayed flat or fell."""
    calls = series(history, "tools/call_frequency")
    rewards = series(history, "reward")
    if len(calls) < TOOL_LOGS + 1 or len(rewards) < TOOL_LOGS + 1:
        return None
    spread = [v for _, v in series(history, "reward_std")[:TOOL_LOGS]]
    scale = _mean(spread) if spread and _mean(spread) > 0 else 1.0
    r0, r1 = _mean([v for _, v in rewards[:TOOL_LOGS]]), _mean([v for _, v in rewards[-TOOL_LOGS:]])
    if r1 - r0 >= TOOL_FLAT_RISE * scale:
        return None
    start, last = calls[0][1], calls[-TOOL_LOGS:]
    evidence = {"steps": [s for s, _ in last], "tools/call_frequency": [_r(v) for _, v in last],
                "reward": [_r(r0), _r(r1)], "first_call_frequency": _r(start)}
    if start >= TOOL_MIN_START and all(v < TOOL_COLLAPSE_RATIO * start for _, v in last):
        return Alarm("tool_collapse", last[-1][0],
                     f"tool calls per episode fell {start:.3g} -> {last[-1][1]:.3g} (under "
                     f"{TOOL_COLLAPSE_RATIO:.0%} of the start on the last {TOOL_LOGS} logs) while the reward went "
                     f"{r0:.3g} -> {r1:.3g}: the policy stopped using its tools", evidence,
                     "lower the learning rate (the tiny calculator demo collapsed at 3e-4, kept its tools at "
                     "1e-4), SFT longer on tool-call demonstrations, or keep the best held-out checkpoint")
    fails = [(s, v) for s, v in series(history, "tools/failure_frequency")[-TOOL_LOGS:]]
    if len(fails) == TOOL_LOGS and all(v >= TOOL_ERROR_SHARE for _, v in fails):
        evidence["tools/failure_frequency"] = [_r(v) for _, v in fails]
        return Alarm("tool_collapse", fails[-1][0],
                     f"{_mean([v for _, v in fails]):.0%} of tool calls were errors over the last {TOOL_LOGS} logs "
                     f"while the reward went {r0:.3g} -> {r1:.3g}: episodes are spent on broken calls",
                     evidence, "read tools.json and samples.jsonl for the error kinds: fix the tool (or raise "
                               "grpo.tool_timeout / grpo.tool_output_chars), or SFT on correct calls first")
    return None
