"""The simulate probe's allocation trace and its replay (probes/replay.py, probes/tracedepth.py) on small models.

References: the tracker's own books (the trace must reproduce its live-byte peak exactly), a full-depth replay
(the repeated-layer synthesis must match it), and PyTorch's OOM message format (``DeviceCachingAllocator::malloc``).
The models are built in FakeTensorMode, so their sizes cost nothing; they are sized to exercise the large pool.
"""

from __future__ import annotations

import json
import re

import pytest

from lazyskip import importorskip_when_run  # noqa: E402

_needs_torch = importorskip_when_run("torch", "transformers")   # at the first test (lazyskip.py)

_needs_peft = importorskip_when_run("peft")   # at the first test (lazyskip.py)

from finetune_doctor.probes.allocconf import parse_alloc_conf  # noqa: E402
from finetune_doctor.probes.replay import format_size, oom_message, replay, replay_sim  # noqa: E402
from finetune_doctor.probes.simulate import run_depth, simulate  # noqa: E402
from finetune_doctor.probes.spec import ProbeSpec  # noqa: E402
from finetune_doctor.probes.tracedepth import synthesize  # noqa: E402

MIB = 1 << 20
SMALL = dict(model_type="qwen2", hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
             intermediate_size=1536, vocab_size=32000, tie_word_embeddings=False)


def spec(**kw) -> ProbeSpec:
    base = dict(model_type="qwen2", model_config_json=json.dumps(SMALL), num_layers=SMALL["num_hidden_layers"],
                finetuning_type="lora", micro_batch=1, seq_len=1024, gradient_checkpointing=False)
    base.update(kw)
    return ProbeSpec(**base)


def _live_peak(trace, round_to: int = 512) -> int:
    """Live bytes from the trace alone (rounded per storage as the tracker rounds), over the training part."""
    live, size, peak, training = 0, {}, 0, False
    for e in trace.events:
        if e[0] == "a":
            size[e[1]] = -(-e[2] // round_to) * round_to
            live += size[e[1]]
        elif e[0] == "f":
            live -= size.pop(e[1], 0)
        elif isinstance(e[1][0], int):
            training = True
        if training:
            peak = max(peak, live)
    return peak


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(finetuning_type="lora"), dict(finetuning_type="full"),
                                dict(finetuning_type="lora", gradient_checkpointing=True)])
def test_trace_reproduces_the_trackers_peak(kw):
    s = spec(**kw)
    books = run_depth(s, 3, 2, trace=True)
    plain = run_depth(s, 3, 2)
    assert books["peak"].total == plain["peak"].total            # tracing leaves the books as they were
    # every device allocation and free is in the trace: its live bytes peak where the tracker's do (the trace
    # also holds the model build, whose storages the books take up when the step starts)
    assert _live_peak(books["trace"]) == max(p.total for k, p in books["segments"].items() if k[0] != "setup")
    assert all(e[3] == 0 for e in books["trace"].events if e[0] == "a")   # default stream


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(finetuning_type="lora"), dict(finetuning_type="full"),
                                dict(finetuning_type="lora", gradient_checkpointing=True)])
def test_repeated_layer_replay_equals_the_full_depth_replay(kw):
    s = spec(**kw)
    a, b, full = (run_depth(s, n, 2, trace=True)["trace"] for n in (2, 3, 6))
    made = synthesize(a, b, 6)
    assert abs(_live_peak(made) - _live_peak(full)) <= 0.01 * _live_peak(full)
    r_made, r_full = replay(made), replay(full)
    # stated tolerance: 2 % of the full-depth replay's peak reserved and allocated memory
    assert r_made.peak_reserved == pytest.approx(r_full.peak_reserved, rel=0.02)
    assert r_made.peak_allocated == pytest.approx(r_full.peak_allocated, rel=0.02)


@pytest.mark.slow
def test_replay_of_a_simulation_and_the_oom_report():
    s = spec(finetuning_type="full")
    sim = simulate(s, steps=2, depth=(2, 3), trace=True)
    r = replay_sim(sim)
    assert r.depth == (2, 3) and r.num_layers == 6 and r.oom is None
    assert r.peak_reserved >= r.peak_allocated >= 0.99 * sim.peak_bytes
    assert r.peak_reserved % (2 * MIB) == 0                      # segments are 2 MiB multiples
    assert 0 <= r.fragmentation_share < 1 and r.fragmentation == r.peak_reserved - r.peak_allocated
    # a card with 70 % of that: the first request that fails, in PyTorch's words
    cap = int(0.7 * r.peak_reserved)
    short = replay_sim(sim, capacity=cap, device_total=cap + 600 * MIB, process_overhead=600 * MIB)
    oom = short.oom
    assert oom is not None and oom.tried_to_allocate >= oom.request
    assert oom.allocated + oom.reserved_unallocated + oom.free == cap
    assert oom.message.startswith(f"CUDA out of memory. Tried to allocate {format_size(oom.tried_to_allocate)}. "
                                  f"GPU 0 has a total capacity of {format_size(cap + 600 * MIB)} of which ")
    assert re.search(r"Of the allocated memory [\d.]+ (GiB|MiB) is allocated by PyTorch, and [\d.]+ (GiB|MiB|KiB|bytes)"
                     r" is reserved by PyTorch but unallocated\.", oom.message)
    assert "Including non-PyTorch memory, this process has" in oom.message
    assert replay_sim(sim, capacity=r.peak_reserved).oom is None


@pytest.mark.slow
def test_expandable_segments_change_the_replay():
    sim = simulate(spec(finetuning_type="full"), steps=2, depth="full", trace=True)
    base = replay_sim(sim)
    exp = replay_sim(sim, parse_alloc_conf("expandable_segments:True"))
    assert exp.config.expandable_segments and exp.peak_allocated == pytest.approx(base.peak_allocated, rel=0.01)
    assert exp.peak_reserved % (2 * MIB) == 0 and exp.peak_reserved != base.peak_reserved


def test_format_size_and_message_words():
    assert [format_size(n) for n in (512, 1024, 1025, 20 * MIB, 1 << 30, 3 << 29)] == [
        "512 bytes", "1024 bytes", "1.00 KiB", "20.00 MiB", "1024.00 MiB", "1.50 GiB"]
    msg = oom_message(20 * MIB, 70 * MIB, 90 * MIB, 10 * MIB, 100 * MIB)
    assert msg == ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 100.00 MiB of "
                   "which 10.00 MiB is free. Of the allocated memory 70.00 MiB is allocated by PyTorch, and 20.00 MiB "
                   "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                   "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_replay_without_a_trace_is_an_error():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="trace=True"):
        replay_sim(SimpleNamespace(traces=(), num_layers=2))
