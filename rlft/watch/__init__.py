"""The watch: what a run checks about itself while it trains (alarms, held-out scores, which model it keeps).

  setup        the `watch` section read before the run folder exists: thresholds, on_alarm, the held-out rows
  monitor      `Watcher`: metrics.jsonl, the alarm rules on the logged history, samples, the progress line
  heldout      the held-out signal every run gets by default: which rows, and the method's metric on them
  overfit      the `overfitting` alarm and which model a run keeps, from its held-out checks (pure)
  tool_alarms  the tool-collapse alarm of GRPO runs with --tools / --env (pure)

The alarm rules themselves (rlft.alarms) stay below the config schema, which takes its defaults from them.
"""
