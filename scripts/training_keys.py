"""Whether `rlft reward --recipe recipes/reward_smollm2.yaml` will take the model of `rlft dpo --recipe
recipes/dpo_smollm2.yaml` (rlft/run/reuse.py): builds both trainers on the same SFT model and store, prints each
one's training key and whether they are the same. Loads the model twice and tokenizes the pairs; trains nothing.

    python -m scripts.training_keys --model runs/sft-store --data data/support/store
"""

from __future__ import annotations

import argparse
from pathlib import Path


def key(method: str, recipe: str, model: str, data: Path, out: Path) -> str | None:
    import importlib

    from rich.console import Console
    from transformers import set_seed

    from rlft.config import resolve
    from rlft.data import load_split
    from rlft.run.reuse import training_key
    from rlft.speed import precision

    mod = importlib.import_module(f"rlft.methods.{method}")
    truth = f"watch.holdout={data / 'test.jsonl'}" if method == "dpo" else f"reward.truth_data={data / 'test.jsonl'}"
    cfg = resolve(method, recipe, {}, [f"model.name_or_path={model}", f"data.train=[{data / 'pairs_train.jsonl'}]",
                                       f"data.eval={data / 'pairs_eval.jsonl'}", f"train.output_dir={out}", truth])
    quiet = Console(quiet=True)
    precision.apply(cfg, quiet)
    train_rows, eval_rows = load_split(cfg.data, mod.KIND, seed=cfg.train.seed)
    set_seed(cfg.train.seed)
    return training_key(cfg, mod.build(cfg, out, mod.prepare(cfg, train_rows, eval_rows, quiet)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the SFT model both stages start from")
    ap.add_argument("--data", type=Path, default=Path("data/support/store"), help="a data/make_store.py folder")
    ap.add_argument("--out", type=Path, default=Path("/tmp/rlft-training-keys"), help="scratch output_dir")
    args = ap.parse_args(argv)
    keys = {m: key(m, f"recipes/{r}_smollm2.yaml", args.model, args.data, args.out / m)
            for m, r in (("dpo", "dpo"), ("reward", "reward"))}
    for m, k in keys.items():
        print(f"{m:7s} {k}")
    same = keys["dpo"] is not None and keys["dpo"] == keys["reward"]
    print("same training: the reward stage takes the DPO run's model" if same else "different: the reward stage trains")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
