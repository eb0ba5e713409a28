"""One module per method, parallel in shape (rlft.methods.common): the TRL-backed ones expose `KIND` (the
rows they train on, named by signal as in rlft.data), `prepare`, `build` and `after`; rlft's own PPO exposes
`KIND`, `prepare` and `run`. Shared parts: common (the run lifecycle), callback (the trainers' watch),
group_rl (GRPO and RLOO)."""
