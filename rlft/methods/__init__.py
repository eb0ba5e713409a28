"""One module per method, parallel in shape: each exposes `KIND` (its data kind) and `run(cfg, ...)`."""
