"""What `rlft reward` measured against the truth at its end, kept in the reward model's folder so that `rlft ppo`'s
pre-flight need not measure it again.

rlft reward (with reward.truth_data) measures the reward model against the truth on the start model's sampled
replies (rlft.reward_model.truth.Agreement) and, for an implicit reward model, its own policy's greedy truth
against the start's (PolicyGain). rlft ppo's pre-flight measures the same two things before it trains, and with
the shipped recipes (recipes/reward_smollm2.yaml, recipes/ppo_smollm2.yaml) on the same prompts with the same
settings: several minutes of generation on a CPU, repeated for the same numbers.

`record` writes each measurement beside what it depends on; `recall` gives one back only when every one of those
is the same now, and None otherwise (then the pre-flight measures, as before):
- the reward model's weights: a digest of the files of the model that was measured, compared with the digest of
  the folder PPO loads (a reward run that kept an earlier check's model, or a folder trained again, misses);
- the start model's weights (a digest of its folder's files; a hub name that is not a local folder never
  matches);
- the truth file's bytes, the verifier, the number of prompts, chat wrapping, reply length, and for the sampled
  agreement the replies per prompt, temperature and seed.
The file is the reward run's own output, like its weights: a user who edits it can as well pass
`--set ppo.min_reward_agreement=0`. A damaged or foreign file is a miss, never an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlft.run.guard import content_hash, weights_digest

MEASURED = "truth_measured.json"
VERSION = 1


def key(start: str, truth_file: str, spec: str, as_chat: bool) -> dict[str, Any] | None:
    """What every measurement depends on besides the reward model and its own settings (`narrowed`); None when the
    start or the truth file cannot be identified by content (nothing is then recorded or recalled)."""
    from rlft.models import resolve_model_path

    try:
        start_digest = weights_digest(resolve_model_path(start))
    except Exception:  # noqa: BLE001 - a name that does not resolve here is not a local model: no key
        return None
    truth_digest = content_hash(truth_file)
    if start_digest is None or truth_digest is None:
        return None
    return {"start": start_digest, "truth": truth_digest, "spec": str(spec), "as_chat": bool(as_chat)}


def narrowed(base: dict[str, Any] | None, **settings: Any) -> dict[str, Any] | None:
    """`key`'s result with one measurement's own settings (prompts, reply length, ...); None stays None."""
    return None if base is None else {**base, **settings}


def record(folder: str | Path, measured: str | Path, entries: dict[str, tuple[dict | None, dict]]) -> None:
    """Write `entries` ({name: (key, value)}) to `folder`/truth_measured.json, for the reward model whose files
    are in `measured` (the folder itself, or its `last/` when the folder kept another check's model)."""
    (Path(folder) / MEASURED).unlink(missing_ok=True)  # an earlier run's record never outlives its weights
    weights = weights_digest(measured)
    kept = {name: {"key": k, "value": value} for name, (k, value) in entries.items() if k is not None}
    if weights is None or not kept:
        return
    (Path(folder) / MEASURED).write_text(json.dumps({"version": VERSION, "reward_model": weights, **kept},
                                                    indent=2) + "\n")


def load(folder: str | Path) -> dict | None:
    """The record in the reward model folder `folder` when the folder's weights are the ones it measured; else
    None (no record, a damaged or foreign one, other weights)."""
    try:
        saved = json.loads((Path(folder) / MEASURED).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("version") != VERSION:
        return None
    return saved if saved.get("reward_model") == weights_digest(folder) else None


def recall(saved: dict | None, name: str, want: dict | None) -> dict | None:
    """The value recorded under `name` in `saved` (`load`'s) when its key equals `want`; else None."""
    if saved is None or want is None:
        return None
    entry = saved.get(name)
    if not isinstance(entry, dict) or entry.get("key") != want or not isinstance(entry.get("value"), dict):
        return None
    return entry["value"]


def value_of(measurement: Any) -> dict[str, Any]:
    """A measurement (Agreement, PolicyGain) as the dict `record` stores."""
    import dataclasses

    return dataclasses.asdict(measurement)


def rebuilt(cls: type, value: dict | None) -> Any:
    """`cls` from a recalled value; None when the value does not fit it (a miss)."""
    if value is None:
        return None
    try:
        return cls(**{k: tuple(v) if k == "interval" else v for k, v in value.items()})
    except TypeError:
        return None
