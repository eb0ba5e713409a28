"""KTO (rlft kto): thumbs data rules, the class-balance advice, the first loss at init, and the gain (slow)."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, ROOT, write_jsonl

from rlft.data.thumbs import balance_warning, label_value, recommended_weights

THUMBS = DATA / "arith/thumbs_train.jsonl"
RECIPE = ROOT / "recipes/kto_tiny.yaml"
HELDOUT = DATA / "arith/test.jsonl"


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def thumbs(n_true: int, n_false: int) -> list[dict]:
    """Arithmetic rows: n_true right sums labelled true, n_false wrong ones labelled false."""
    rows = [{"prompt": f"{10 + i}+{20 + i}=", "completion": str(30 + 2 * i), "label": True} for i in range(n_true)]
    rows += [{"prompt": f"{40 + i}+{11 + i}=", "completion": str(50 + 2 * i), "label": False} for i in range(n_false)]
    return rows


def test_label_values():
    assert label_value(True) is True and label_value("FALSE") is False  # JSON bool, or CSV text
    assert label_value(1) is None and label_value("yes") is None and label_value(None) is None


def test_recommended_weights_follow_the_kto_ratio_rule():
    # 100 true, 900 false: desirable_weight x 100 / (1 x 900) in [1, 4/3] -> [9, 12]
    w = recommended_weights(100, 900)
    assert w["desirable_weight"] == (9.0, 12.0)
    assert w["undesirable_weight"] == (0.08, 0.11)  # 100 / 900 / (4/3) .. 100 / 900
    assert recommended_weights(500, 500) is None
    assert recommended_weights(100, 900, desirable_weight=10.0) is None  # already compensated


def test_balance_warning_only_under_ten_percent_and_names_the_weights():
    assert balance_warning(150, 850) is None  # 15% true: no warning
    msg = balance_warning(50, 950)
    assert "only 50 of 1000 labels (5%) are true" in msg and "kto.desirable_weight in [19, 25.33]" in msg
    assert balance_warning(50, 950, desirable_weight=20.0) is None
    assert "are false" in balance_warning(970, 30)


def test_non_boolean_label_is_a_file_line_error_and_writes_nothing(cli, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", [*thumbs(2, 2)[:3], {"prompt": "1+1=", "completion": "2", "label": "yes"},
                                              {"prompt": "1+2=", "completion": "3", "label": 1}])
    out = tmp_path / "kto"
    r = cli("kto", "--feedback", data, "-o", out)
    assert r.code == 2, r.text
    assert f"{data}:4: field 'label'" in r.err and f"{data}:5: field 'label'" in r.err and "true or false" in r.err
    assert not out.exists()


def test_one_sided_labels_and_batch_of_one_are_refused(cli, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", thumbs(4, 0))
    r = cli("kto", "--feedback", data, "-o", tmp_path / "a")
    assert r.code == 2 and "every label is True" in r.err, r.text
    r = cli("kto", "--feedback", write_jsonl(tmp_path / "u.jsonl", thumbs(2, 2)), "--batch-size", "1",
            "-o", tmp_path / "b")
    assert r.code == 2 and "per_device_train_batch_size must be >= 2 for KTO" in r.err, r.text
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_first_loss_is_the_weighted_half_and_rare_class_warns(cli, tmp_path, sft_model):
    # One batch of 16 rows, 4 true and 12 false, desirable_weight 3: at init policy == reference, so every
    # implied reward and the KL estimate are 0 and each row's loss is 1 - sigmoid(0) = 0.5, times its weight:
    # (4 x 3 x 0.5 + 12 x 1 x 0.5) / 16 = 0.75.
    data = write_jsonl(tmp_path / "t.jsonl", thumbs(4, 12))
    out = tmp_path / "kto"
    r = cli("kto", "--feedback", data, "--model", sft_model, "-o", out, "--batch-size", "16", "--max-steps", "2",
            "--desirable-weight", "3", "--set", "train.logging_steps=1", "--set", "kto.max_length=32")
    assert r.code == 0, r.text
    first = read_metrics(out)[0]
    assert abs(first["loss"] - 0.75) < 1e-4, first
    assert abs(first["rewards/margins"]) < 1e-4 and first["kl"] == 0.0
    # 1 true in 16 (6%): the warning names TRL's range for desirable_weight (15 x [1, 4/3] = [15, 20])
    r = cli("kto", "--feedback", write_jsonl(tmp_path / "r.jsonl", thumbs(1, 15)), "--model", sft_model,
            "-o", tmp_path / "kto2", "--batch-size", "16", "--max-steps", "1", "--set", "kto.max_length=32")
    assert r.code == 0 and "kto.desirable_weight in [15, 20]" in r.err.replace("\n", " "), r.text


def test_lint_and_choose_recognise_thumbs(cli):
    r = cli("data", "lint", THUMBS, "--json")
    assert r.code == 0, r.text
    report = json.loads(r.out)["files"][0]
    assert report["kind"] == "thumbs" and report["rows"] == 4000
    assert [f["code"] for f in report["findings"]] == ["label_balance"]
    out = json.loads(cli("choose", "--data", THUMBS, "--json").out)
    assert out["method"] == "kto" and out["next_command"].startswith(f"rlft kto --feedback {THUMBS}")


def test_lint_flags_bad_labels_and_imbalance(cli, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", [*thumbs(1, 20), {"prompt": "1+1=", "completion": "2", "label": "yes"}])
    r = cli("data", "lint", data, "--json")
    assert r.code == 1, r.text
    codes = {f["code"]: f for f in json.loads(r.out)["files"][0]["findings"]}
    assert codes["bad_label"]["lines"] == [22] and codes["bad_label"]["level"] == "error"
    assert codes["label_imbalance"]["level"] == "warning"


@pytest.mark.slow
def test_kto_from_arith_thumbs_raises_heldout_pass_at_1_by_5_points(cli, tmp_path, sft_short):
    import time

    before = json.loads(cli("eval", "--model", sft_short, "--data", HELDOUT, "--verifier", "math", "--json").out)
    start = time.time()
    out = tmp_path / "kto-full"
    r = cli("kto", "--recipe", RECIPE, "--feedback", THUMBS, "--model", sft_short, "-o", out)
    assert r.code == 0, r.text
    elapsed = time.time() - start
    after = json.loads(cli("eval", "--model", out, "--data", HELDOUT, "--verifier", "math", "--json").out)
    print(f"KTO: held-out pass@1 {before['pass_at_1']:.3f} -> {after['pass_at_1']:.3f} in {elapsed:.0f}s")
    assert after["pass_at_1"] >= before["pass_at_1"] + 0.05
