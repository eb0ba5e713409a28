"""Programs that drive the `rlft` command line, outside the library (nanochat's layout): `make demo` and the
`make pipeline-*` targets (pipeline.py), `make demo-real` (demo_real.py). Run from the repository root as
`python -m scripts.<name>`."""
