"""`rlft choose`: from the signal a user has to the method, why, and the exact next commands.

  rules.py          the Signal, the Recommendation and the RULES that map one to the other (pure, fast)
  from_data.py      a Signal read from data files (row kinds, gold fields, lint), and the pre-flight with --model
  next_commands.py  the commands printed for a recommendation: recipes, flags, derived files

No torch, transformers, trl or datasets at import (a test checks it): `rlft choose --data` answers on 10k rows
in well under half a second.
"""
