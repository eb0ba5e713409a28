"""Tokens that match the conversation: the check that what GRPO trains on is what the chat template renders.

TRL's tool loop never re-renders an episode: it concatenates the prompt's ids, the generated ids, the ids of the
tool-result suffix (from a dummy conversation, `GRPOTrainer._get_tool_suffix_ids`) and the next generated ids, and
masks the suffix out of the loss (`tool_mask`). Where a template is not prefix-preserving, or a separator at the
assistant -> tool boundary is lost, the trained ids drift from the conversation a deployed model will be shown.
`first_mismatch` compares one episode's ids with the template's rendering of its final conversation (a test runs it
on every episode); `mask_covers_tool_results` checks the masked runs are exactly the tool turns; `watch_rendering`
samples both at run time and raises an alarm line (with the first differing position) instead of staying silent.
Departure from TRL: TRL has no such check.
"""

from __future__ import annotations

from rlft.tools import ToolStats


def first_mismatch(tok, prompt: list, completion: list, prompt_ids: list, completion_ids: list, tools=None,
                   chat_template: str | None = None) -> int | None:
    """None when the ids of one episode (TRL builds them by concatenation: prompt, generated turn, tool-result
    suffix, next generated turn...) equal the chat template's rendering of its final conversation, else the first
    position (from the prompt's start) where they differ. The rendering may go on past the ids (the template's
    newline after the last end-of-turn); a truncated episode is compared on its length."""
    ids = list(prompt_ids) + list(completion_ids)
    rendered = tok.apply_chat_template(prompt + completion, tools=tools or None, chat_template=chat_template,
                                       tokenize=True, return_dict=False)
    if isinstance(rendered, dict):
        rendered = rendered["input_ids"]
    for i, (a, b) in enumerate(zip(ids, rendered)):
        if a != b:
            return i
    return None if len(ids) <= len(rendered) else len(rendered)


def expected_tool_mask(tok, prompt: list, completion: list, prompt_ids: list, tools=None,
                       chat_template: str | None = None) -> list[int]:
    """The loss mask the template implies for an episode's completion: 0 from just after the end-of-turn token of
    each tool-calling assistant turn up to the next assistant header (the tool turns and the template's glue,
    none of it generated), 1 elsewhere."""
    def length(messages, gen):
        ids = tok.apply_chat_template(messages, tools=tools or None, chat_template=chat_template, tokenize=True,
                                      return_dict=False, add_generation_prompt=gen)
        return ids["input_ids"] if isinstance(ids, dict) else ids

    n = len(length(prompt + completion, False))
    mask = [1] * (n - len(prompt_ids))
    i = 0
    while i < len(completion):
        if completion[i].get("role") != "tool":
            i += 1
            continue
        j = i
        while j + 1 < len(completion) and completion[j + 1].get("role") == "tool":
            j += 1
        before = length(prompt + completion[:i], False)
        eos = max(k for k, t in enumerate(before) if t == tok.eos_token_id)
        stop = len(length(prompt + completion[:j + 1], True))
        for k in range(eos + 1 - len(prompt_ids), stop - len(prompt_ids)):
            mask[k] = 0
        i = j + 1
    return mask


def mask_covers_tool_results(tok, prompt: list, completion: list, prompt_ids: list, completion_ids: list,
                             tool_mask: list, tools=None, chat_template: str | None = None) -> bool:
    """The tokens kept out of the loss (tool_mask 0) are exactly the tool turns the template renders
    (`expected_tool_mask`), compared over the episode's length (a truncated episode on what it has)."""
    expected = expected_tool_mask(tok, prompt, completion, prompt_ids, tools, chat_template)
    return list(tool_mask)[:len(completion_ids)] == expected[:len(completion_ids)]


def watch_rendering(trainer, stats: ToolStats, console, every: int = 1) -> None:
    """At run time, check one episode of every `every`-th generation batch (`first_mismatch`, on the trainer's
    own `_generate` output); a mismatch is counted (tools/render_mismatch) and printed as an alarm naming the first
    differing position and the tokens there."""
    original = trainer._generate
    calls = {"n": 0}

    def checked(prompts):
        out = original(prompts)
        calls["n"] += 1
        if calls["n"] % every:
            return out
        prompt_ids, completion_ids, tool_mask, completions = out[0], out[1], out[2], out[3]
        i = 0
        tools = trainer._env_tools[trainer._batch_environments[i]] if trainer.environment_factories else trainer.tools
        try:
            pos = first_mismatch(trainer.processing_class, list(prompts[i]), completions[i], prompt_ids[i],
                                 completion_ids[i], tools, trainer.chat_template)
        except Exception as exc:  # noqa: BLE001 - a check must not end the run
            pos, note = -1, f"the rendering failed: {type(exc).__name__}: {exc}"
        else:
            ids = list(prompt_ids[i]) + list(completion_ids[i])
            note = f"trained on {trainer.processing_class.decode(ids[pos:pos + 12])!r}" if pos is not None else ""
            if pos is not None and _same_text(trainer, prompts[i], completions[i], ids, tools):
                note += "; the same text tokenized differently: the model spelled out a token the template " \
                        "renders whole (on-policy ids are trained as sampled)"
        if pos is None and tool_mask is not None and not mask_covers_tool_results(
                trainer.processing_class, list(prompts[i]), completions[i], prompt_ids[i], completion_ids[i],
                tool_mask[i], tools, trainer.chat_template):
            pos, note = -1, "the loss mask does not cover exactly the tool results"
        if pos is not None:
            stats.render_mismatches += 1
            console.print(f"[red]alarm[/] tokens_mismatch: the token ids trained on differ from the chat template's "
                          f"rendering of the episode at position {pos} ({note})", highlight=False)
        return out

    trainer._generate = checked


def _same_text(trainer, prompt, completion, ids, tools) -> bool:
    """The episode's ids decode to the text the template renders (a tokenization difference, not a lost
    separator); the rendering may go on past the ids (the template's newline after the last end-of-turn)."""
    tok = trainer.processing_class
    rendered = tok.apply_chat_template(list(prompt) + completion, tools=tools or None,
                                       chat_template=trainer.chat_template, tokenize=False)
    return rendered.startswith(tok.decode(ids))


def run_episode(model, tok, prompt: list, tools: list, max_calls: int = 4, max_new_tokens: int = 64,
                temperature: float | None = None) -> list:
    """One episode, as TRL's loop runs it at training time: generate a turn (greedy, or sampled at `temperature`);
    when it parses as tool calls (the tokenizer's response template), call the (guarded) tools and append their
    results as `tool` turns; stop at an answer or after `max_calls` rounds. Returns the completion's messages (the
    verifiers score the assistant turns). A bad call becomes an error result, as in training."""
    import torch
    from trl.chat_template_utils import parse_response

    from rlft.tools import ToolError

    by_name = {t.__name__: t for t in tools}
    completion: list = []
    for _round in range(max_calls + 1):
        ids = tok.apply_chat_template(prompt + completion, tools=tools or None, add_generation_prompt=True,
                                      tokenize=True, return_dict=False)
        ids = ids["input_ids"] if isinstance(ids, dict) else ids
        with torch.no_grad():
            sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature else {}
            out = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=max_new_tokens,
                                 pad_token_id=tok.pad_token_id, **({"do_sample": False} | sampling))
        turn = parse_response(tok, out[0, len(ids):].tolist(), prefix=ids, tools=tools)
        completion.append(turn)
        calls = turn.get("tool_calls") or []
        if not calls or _round == max_calls:
            break
        for call in calls:
            fn = call.get("function") or {}
            name, args = fn.get("name", "?"), fn.get("arguments")
            try:
                if name not in by_name or not isinstance(args, dict):
                    raise ToolError("unknown", f"Tool {name} not found." if name not in by_name else "bad arguments")
                result = by_name[name](**args)
            except ToolError as exc:
                result = str({"error": str(exc)})
            completion.append({"role": "tool", "name": name, "content": result})
    return completion


def _is_error(message: dict) -> bool:
    return message.get("role") == "tool" and str(message.get("content", "")).startswith("{'error'")


def score_episodes(model, tok, rows: list[dict], setup, scorer=None, max_new_tokens: int = 64,
                   temperature: float | None = None) -> list[dict]:
    """One episode per row (`run_episode`; greedy, or sampled at `temperature`), scored as in training: the
    verifiers (`scorer`, f(completions,
    **row) -> rewards) on the completion plus the environment's get_reward() when it has one (TRL adds it with
    weight 1). An episode succeeds when every source gives it >= 1. `setup` (rlft.tools.ToolSetup) gives each row
    its guarded tools, from a fresh environment when there is one. Per row: prompt, completion (the messages),
    reward, success, tool_calls, tool_errors."""
    was_training = model.training
    model.eval()
    out = []
    failures = setup.stats.env
    before = failures.counts.copy()
    failed_before = sum(failures.counts.values())
    try:
        for row in rows:
            tools, observation, env = setup.episode_tools(row)
            prompt = list(row["prompt"])
            if observation:  # TRL appends reset()'s string to the last prompt message
                prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
            completion = run_episode(model, tok, prompt, tools, setup.max_tool_calls, max_new_tokens, temperature)
            sources = []
            if scorer is not None:
                extra = {k: [v] for k, v in row.items() if k != "prompt"}
                sources.append(scorer([completion], prompts=[row["prompt"]], **extra)[0])
            if setup.env_reward:
                sources.append(env.get_reward())
            sources = [0.0 if r is None else float(r) for r in sources]
            out.append({"prompt": row["prompt"], "completion": completion, "reward": sum(sources),
                        "success": bool(sources) and all(r >= 1.0 for r in sources),
                        "tool_calls": sum(len(m.get("tool_calls") or []) for m in completion),
                        "tool_errors": sum(_is_error(m) for m in completion),
                        "answered": not completion[-1].get("tool_calls")})
    finally:
        model.train(was_training)
        failures.outside.update(failures.counts - before)  # not a training batch's (rlft.tools.process.watch_batches)
    if rows and sum(setup.stats.env.counts.values()) - failed_before >= len(rows):
        from rlft.tools.process import all_failed

        raise all_failed(setup.stats, f"all {len(rows)} episodes")
    return out


def summarize(episodes: list[dict]) -> dict[str, float]:
    """Task success, mean reward, tool calls and bad calls per episode, the share of episodes that call a tool."""
    n = max(len(episodes), 1)
    return {"heldout_task_success": sum(e["success"] for e in episodes) / n,
            "heldout_mean_reward": sum(e["reward"] for e in episodes) / n,
            "heldout_tool_calls_per_episode": sum(e["tool_calls"] for e in episodes) / n,
            "heldout_tool_errors_per_episode": sum(e["tool_errors"] for e in episodes) / n,
            "heldout_tool_use": sum(e["tool_calls"] > 0 for e in episodes) / n}


def episode_success(model, tok, rows: list[dict], setup, scorer=None, max_new_tokens: int = 64) -> dict[str, float]:
    """Greedy task success over held-out rows, episode by episode (`score_episodes`), summarized."""
    return summarize(score_episodes(model, tok, rows, setup, scorer, max_new_tokens))
