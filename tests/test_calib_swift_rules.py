"""The translation rules of benchmarks/calib_data.py for ms-swift's published figures (issue #23, session 14).

References: ms-swift's source at the commits each rule cites (the memory(GiB) line gated off on an Ascend NPU from
ba98cacbe, 2024-06-11, until d0368be8f, 2025-11-19), the card catalogue's marketed sizes, and the committed rows
these rules read (their ids, dates and cards as the rows file has them).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import calib_data  # noqa: E402


def _rows() -> dict[str, dict]:
    return {r["id"]: r for r in calib_data.load_rows()}


def test_an_npu_figure_from_the_months_swift_printed_no_memory_is_npu_smis():
    """NPU-support.md's table (2025-02-27, 910B, counter not stated) falls in the window in which swift logged no
    memory on an NPU: read as npu-smi. A row with a stated counter, a CUDA row and one dated after the fix keep theirs."""
    rows = _rows()
    assert calib_data.counter_of(rows["swift-npu-qwen2-7b-lora-4-z3"]) == "nvidia-smi"
    assert calib_data.counter_of(rows["swift-npu-qwen2-7b-lora-1"]) == "nvidia-smi"
    assert calib_data.counter_of(rows["r3m-swift-npu-qwen3-8b-lora-fsdp2"]) == "reserved"   # stated, 2026-02-11
    assert calib_data.counter_of(rows["swift-zero3-lora-qwen25-7b"]) == "unknown"           # a CUDA card
    row = rows["swift-npu-qwen2-7b-lora-1"]
    assert calib_data.counter_of({**row, "date": "2025-11-19"}) == "unknown"   # the fix's day: swift logs it again
    assert calib_data.counter_of({**row, "date": "2024-06-10"}) == "unknown"   # before the gate
    assert calib_data.counter_of({**row, "framework": "LLaMA-Factory"}) == "unknown"
    assert calib_data.counter_of({**row, "measured": None}) is None
