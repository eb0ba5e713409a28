"""CLI commands that live in their own modules; rlft/cli.py registers them (and imports them lightly)."""
