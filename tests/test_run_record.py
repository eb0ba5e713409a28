"""summary.json tells how a run ended, whatever ended it."""

from __future__ import annotations

import json

import pytest

from rlft.run.folder import RunRecord


def status(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_an_exception_marks_the_run_failed_with_its_message_and_goes_on(tmp_path):
    record = RunRecord(tmp_path, "sft")
    assert status(tmp_path)["status"] == "running"
    with pytest.raises(RuntimeError, match="CUDA out of memory"), record.closing_on_error():
        raise RuntimeError("CUDA out of memory")
    summary = status(tmp_path)
    assert summary["status"] == "failed" and summary["error"] == "RuntimeError: CUDA out of memory"
    assert summary["wall_seconds"] >= 0


def test_ctrl_c_outside_the_trainer_marks_the_run_interrupted(tmp_path):
    record = RunRecord(tmp_path, "dpo")
    with pytest.raises(KeyboardInterrupt), record.closing_on_error():
        raise KeyboardInterrupt
    assert status(tmp_path)["status"] == "interrupted" and status(tmp_path)["signal"] == 2


def test_a_clean_exit_leaves_the_status_to_the_run(tmp_path):
    record = RunRecord(tmp_path, "grpo")
    with record.closing_on_error():
        record.finish("completed", global_step=3)
    assert status(tmp_path)["status"] == "completed"


def test_secondary_processes_write_nothing(tmp_path):
    record = RunRecord(tmp_path / "run", "sft", write=False)
    record.update(train_rows=10)
    with pytest.raises(ValueError), record.closing_on_error():
        raise ValueError("x")
    assert not (tmp_path / "run").exists()
