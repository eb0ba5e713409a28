"""`python -m rlft` is the same as the `rlft` console script (and works under `accelerate launch -m rlft`)."""

from rlft.errors import exit_on_signals

exit_on_signals()  # Ctrl-C while the CLI imports, or after it is done, is one line and exit 130

from rlft.cli import main  # noqa: E402

main()
