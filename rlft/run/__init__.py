"""The run folder: everything about one run's `output_dir`, from the check before any slow work to its ending.

  folder      the folder's layout, RunRecord (summary.json), the Run lifecycle's endings, versions, checkpoints,
              `check_run_folder` (one pass before any model loads) and `prepare_output_dir`
  guard       a lock while a process trains in the folder, the run's fingerprint (what --resume must match), and
              digests of data files and model weights
  reuse       the same training done once: a completed DPO run's model is the implicit reward model that
              `rlft reward` would train with the same start, pairs and settings
  outputs     the one rule for what a command writes (never an input, never inside one) and one way to write
  time_limit  train.max_minutes: when the next step and a closing check would pass the limit
  step_plan   the one decision after a step (held-out due, closing check, checkpoint, stop and why) that
              rlft.methods.callback (TRL-backed methods) and PPO's loop both act on
  budget      how many passes over the training rows a run plans, and when to warn
  prompt_format  the prompt format (data.as_chat) a finished run trained with, read back for eval and best-of-n

Light at import: each module imports only the standard library and rlft.errors / rlft.data.bounded at module level.
"""
