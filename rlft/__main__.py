"""`python -m rlft` is the same as the `rlft` console script (and works under `accelerate launch -m rlft`)."""

from rlft.cli import main

main()
