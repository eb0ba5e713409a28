"""rlft.quiet: library chatter off by default, kept with --debug (RLFT_DEBUG=1). Each case runs in a fresh
interpreter: the settings are process-wide."""

import subprocess
import sys

PROBE = """
import os, warnings
from rlft.quiet import quiet_libraries
quiet_libraries()
import transformers
print(transformers.utils.logging.get_verbosity(), os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"),
      os.environ.get("TOKENIZERS_PARALLELISM"))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    quiet_libraries()
    warnings.warn_explicit("chatter", FutureWarning, "x.py", 1, module="transformers.x")
print(len(caught))
"""


def _probe(debug: bool) -> list[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", **({"RLFT_DEBUG": "1"} if debug else {})}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_libraries_are_quiet_by_default():
    import logging

    verbosity, bars, parallel, warned = _probe(debug=False)
    assert int(verbosity) == logging.ERROR and bars == "1" and parallel == "false" and warned == "0"


def test_debug_keeps_the_libraries_warnings():
    import logging

    verbosity, bars, parallel, warned = _probe(debug=True)
    assert int(verbosity) < logging.ERROR and bars == "1" and warned == "1"
