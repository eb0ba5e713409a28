"""Keep library chatter out of rlft's output (rlft shows its own progress and errors).

Called by every command that loads a model, before the heavy imports. `--debug` (RLFT_DEBUG=1) keeps the
libraries' own warnings.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings


def quiet_libraries() -> None:
    debug = os.environ.get("RLFT_DEBUG") == "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # bitsandbytes' CPU backend warns on import when the optional `kernels` package (which would fetch
    # code from the hub) is absent; rlft never wants that fetch.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    if debug:
        return
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|transformers|trl|peft)\b")
    warnings.filterwarnings("ignore", category=FutureWarning)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # `datasets` is quieted through its environment variables, not imported: PPO never needs it, and the
    # import alone costs ~90 MB of peak memory. Where it is already loaded, quiet it directly.
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("DATASETS_VERBOSITY", "error")
    if "datasets" in sys.modules:
        datasets = sys.modules["datasets"]
        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
