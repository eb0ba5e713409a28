"""Tool-call demonstrations are trained as written: rows whose calls take different arguments keep each row's own
arguments through rlft's dataset step (Arrow would unify them: {"x": "1"} became {"x": "1", "y": null}) and the
chat template renders exactly what each row says."""

from __future__ import annotations

import json

from rlft.data import Row
from rlft.data.table import to_dataset
from rlft.tools import TOOL_CHATML_TEMPLATE


def _row(name: str, arguments: dict) -> Row:
    return Row("rows.jsonl", 1, {"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                             "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "a"}]})


def test_each_row_keeps_its_own_arguments_through_the_dataset_and_the_template(tiny_dir):
    from transformers import AutoTokenizer

    rows = [_row("f", {"x": "1"}), _row("g", {"y": 2, "z": [1, 2]}), _row("h", {})]
    ds = to_dataset(rows, ("messages",))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    tok.chat_template = TOOL_CHATML_TEMPLATE
    for row, got in zip(rows, ds):
        written = row.data["messages"][1]["tool_calls"][0]["function"]
        assert got["messages"][1]["tool_calls"][0]["function"] == written
        text = tok.apply_chat_template(got["messages"], tokenize=False)
        assert f"<tool_call>\n{json.dumps(written)}\n</tool_call>" in text
        assert "null" not in text


def test_rows_without_tool_calls_are_unchanged():
    ds = to_dataset([Row("r.jsonl", 1, {"prompt": "a", "completion": "b"})])
    assert ds[0] == {"prompt": "a", "completion": "b"}
