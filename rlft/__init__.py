"""rlft: LLM fine-tuning recipes (SFT, DPO, KTO, GRPO, RLOO, reward model + PPO, distillation) on Hugging Face TRL.

Importing this package must stay cheap: no torch, transformers, trl or datasets here.
"""

__version__ = "0.1.0"

import os as _os
import sys as _sys

if _os.path.basename(_sys.argv[0]) in ("rlft", "rlft.exe"):  # the console script: Ctrl-C while it imports
    from rlft.errors import exit_on_signals  # is one line (`python -m rlft` does this in __main__.py)

    exit_on_signals()
