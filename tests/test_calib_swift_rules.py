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


def test_a_figure_at_the_cards_marketed_size_is_the_card_not_a_reading():
    """ms-swift's '4 * 24GB GPU memory' on four RTX 3090s (nominal 24 GB in the catalogue) and '80GB' on an
    A100-80GB are the card: no measurement (the outcome stays). 76 GiB on an A100-80GB, 22 GiB on an A10 (24 GB), a
    stated counter, another framework's 78 GiB and a row without a named card are readings as written."""
    rows = _rows()
    for rid in ("r3m-swift1-qwen14bchat-lora-z3-4x3090", "r7m-swift1-q15doc-qwen15-7b-lora-z3-4x3090",
                "r3m-swift1-qwen7bchat-full-1xa100"):
        assert calib_data.whole_card(rows[rid]), rid
        assert calib_data.measured_gib(rows[rid], 23.69) is None
        assert rows[rid]["outcome"] == "trained"
    for rid in ("swift-full-qwen25-7b", "swift-qwen3-8b-lora-a10", "r3m-swiftbench-qwen7b-full-4096",
                "r7m-flagperf-llava15-7b-finetune-z3-8xa800", "swift-zero3-lora-qwen25-7b"):
        assert not calib_data.whole_card(rows[rid]), rid
    assert calib_data.measured_gib(rows["swift-full-qwen25-7b"]) == 76.0   # GiB as written
    row = rows["r3m-swift1-qwen14bchat-lora-z3-4x3090"]
    assert not calib_data.whole_card({**row, "measured": {**row["measured"], "value": 22}})
    assert not calib_data.whole_card({**row, "gpu": None})


def test_a_multi_rank_swift_row_is_launched_by_its_own_torchrun_unless_its_script_exports_expandable_segments():
    """swift/cli/main.py runs torch.distributed.run with the shell's environment: a 2-process ZeRO-3 row is given a
    torchrun line (no expandable segments); a row whose script exports PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    (examples/train/cached_dataset/sft.sh:11 at 3602360a5), a one-GPU row, an FSDP row and an LLaMA-Factory row get
    none. The line reads back as torchrun over that many ranks."""
    from finetune_doctor.readers.config.accelerate import parse_launch_or_none

    rows = _rows()
    line = calib_data.launch_line(rows["swift-zero3-lora-qwen25-7b"])   # world 2, no card named
    assert line == "torchrun --nproc_per_node 2 swift/cli/sft.py"
    launch = parse_launch_or_none(line, "cmdline.txt")
    assert launch.launcher == "torchrun" and launch.options["nproc_per_node"] == "2"
    assert calib_data.launch_line(rows["r3m-swift1-qwen7bchat-full-z3-4xa100"]).startswith("torchrun --nproc_per_node 4 ")
    for rid in ("swift-cached-full-qwen25-7b-z3", "swift-full-qwen25-7b", "swift-fsdp2-lora-qwen25-7b"):
        assert calib_data.launch_line(rows[rid]) is None, rid
    assert calib_data.launch_line({**rows["swift-zero3-lora-qwen25-7b"], "framework": "LLaMA-Factory"}) is None
