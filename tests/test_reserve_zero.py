"""probes/zerotrace.py: DeepSpeed ZeRO-2/3 allocation traces, and their replay through the allocator model,
checked against hand computations on tiny traces (sizes in MiB so every segment is counted by hand)."""

from __future__ import annotations

import json

import pytest

from finetune_doctor.analyzers.memory import reserve
from finetune_doctor.probes.allocator import CachingAllocator
from finetune_doctor.probes.replay import replay
from finetune_doctor.probes.trace import AllocTrace
from finetune_doctor.probes.zerotrace import (ZeroLayout, _Coordinator, _Out, _ZeroState, layout_from_arch, part,
                                              step_plan, zero_trace)

MIB = 1 << 20
E = 12 * MIB         # elements: 24 MiB whole in bf16, 12 MiB per partition over 2 ranks


def _layout(stage: int, full: bool, **kw) -> ZeroLayout:
    # embedding, one layer of two modules, an untied head; every tensor >= 10 MiB whole, so each takes a segment
    # of its own rounded size (allocator rule 3) and the replay can be followed by hand
    base = dict(stage=stage, world=2, embed=(E,), layers=(((E,), (E,)),), layer_other=(0,), head=(E,),
                final_norm=0, full=full, reduce_bucket=E, prefetch_bucket=0, persistence=1000)
    base.update(kw)
    return ZeroLayout(**base)


def _replica() -> AllocTrace:
    """A one-layer replica step: one activation of 24 MiB alive through each pass."""
    ev = [("a", 1, 4096, 0)]   # the replica's build: dropped by zero_trace
    s = 10
    for step in (1, 2):
        for label in ("embed", ("b", 0), "head", "logits"):
            lab = (step, 0, "fwd", *(label if isinstance(label, tuple) else (label,)))
            ev.append(("m", lab))
        ev += [("a", s, 24 * MIB, 0)]
        for label in ("logits", ("b", 0), "embed", "end"):
            ev.append(("m", (step, 0, "bwd", *(label if isinstance(label, tuple) else (label,)))))
        ev += [("f", s), ("m", (step, 0, "opt")), ("m", (step, 0, "zero"))]
        s += 1
    return AllocTrace(tuple(ev), 1)


def test_zero_init_build_replay_by_hand():
    # zero.Init per parameter: whole (24 MiB), partition (12 MiB), whole freed. The first whole's 24 MiB segment
    # is reused by each later whole; every partition needs a segment of its own because the 24 MiB block is
    # taken when it is asked for: 24 + 4 x 12 = 72 MiB reserved for 48 MiB of partitions.
    lay = _layout(3, full=False)
    o = _Out()
    _ZeroState(lay, o).build()
    a = CachingAllocator()
    live = {}
    for e in o.events:
        if e[0] == "a":
            live[e[1]] = a.malloc(e[2])
        else:
            a.free(live.pop(e[1]))
    assert [e[2] for e in o.events if e[0] == "a"] == [24 * MIB, 12 * MIB] * 4 + [24 * MIB]
    # partitions + the IPG bucket (24 MiB), which takes the cached whole's segment; no gradient buffer (nothing
    # trains), so nothing is cached and unallocated
    assert a.allocated == (4 * 12 + 24) * MIB
    assert a.reserved == (24 + 4 * 12) * MIB


def test_zero3_full_build_defragments_and_leaves_the_partitions_cached():
    # full fine-tuning: the partitions are copied into one flat buffer (48 MiB, a new segment: only the 24 MiB
    # whole is free) and freed; their four 12 MiB segments stay cached. The fp32 partition of the one sub-group
    # (4 x 6 Mi elements x 4 B = 96 MiB), the bucket (24 MiB, into the cached whole's segment), the gradient
    # partition buffer (48 MiB: the cached 12 MiB blocks are separate segments and cannot hold it).
    lay = _layout(3, full=True)
    o = _Out()
    _ZeroState(lay, o).build()
    sizes = [e[2] for e in o.events if e[0] == "a"]
    assert sizes[:3] == [24 * MIB, 12 * MIB, 24 * MIB]
    assert sizes[-4:] == [48 * MIB, 96 * MIB, 24 * MIB, 48 * MIB]
    a = CachingAllocator()
    live = {}
    for e in o.events:
        if e[0] == "a":
            live[e[1]] = a.malloc(e[2])
        else:
            a.free(live.pop(e[1]))
    assert a.allocated == (48 + 96 + 24 + 48) * MIB
    # 24 (whole, then the bucket) + 4 x 12 (freed partitions, cached) + 48 + 96 + 48
    assert a.reserved == (24 + 48 + 48 + 96 + 48) * MIB


def test_coordinator_first_step_releases_every_module():
    lay = _layout(3, full=False)
    o = _Out()
    plan = step_plan(lay)
    c = _Coordinator(lay, o, plan)
    c.start(recorded=False)
    for u in range(len(plan)):
        c.fetch(u)
        c.release(u)
    # each use gathers its module (24 MiB) and frees it: E, 2 layer modules, H, H, 2 recompute + 2 backward
    assert [e[2] for e in o.events if e[0] == "a"] == [24 * MIB] * 9
    assert sum(e[0] == "f" for e in o.events) == 9
    assert not c.where


def test_coordinator_recorded_step_keeps_params_reused_within_the_distance():
    # after the first step the release keeps a module whose next use is within max_reuse elements: the head
    # (forward, then the backward right after) and each layer module between its recompute and its backward
    lay = _layout(3, full=False, max_reuse=E)
    o = _Out()
    plan = step_plan(lay)
    c = _Coordinator(lay, o, plan)
    c.start(recorded=True)
    gathered = []
    for u in range(len(plan)):
        c.fetch(u)
        gathered.append(sum(e[0] == "a" for e in o.events))
        c.release(u)
    # plan: E, L0.0, L0.1, H(fwd), H(bwd), L0.0r, L0.1r, L0.1b, L0.0b. The head is fetched once, the second
    # layer module is fetched once for its recompute and kept for its backward (next use within 12 Mi elements)
    assert gathered == [1, 2, 3, 4, 4, 5, 6, 6, 7]


def test_prefetch_takes_whole_params_until_the_bucket_is_reached():
    # prefetch bucket of one parameter: after fetching a module the next not-available one is gathered too
    lay = _layout(3, full=False, prefetch_bucket=1, max_reuse=0)
    o = _Out()
    plan = step_plan(lay)
    c = _Coordinator(lay, o, plan)
    c.start(recorded=True)
    c.fetch(0)                 # the embedding, then the first layer module prefetched
    assert [e[2] for e in o.events if e[0] == "a"] == [24 * MIB, 24 * MIB]
    c.release(0)
    c.fetch(1)                 # already there: only the next module is prefetched
    assert len([e for e in o.events if e[0] == "a"]) == 3


def test_zero2_buckets_are_reallocated_per_micro_step_in_the_same_segment():
    lay = _layout(2, full=True, overlap_comm=True)
    tr = zero_trace(_replica(), lay)
    rep = replay(tr)
    # ZeRO-2 full: four whole params (4 x 24 MiB segments) flattened into one 96 MiB buffer, the originals
    # freed; the fp32 partition (24 Mi elements x 4 B = 96 MiB). Each backward: two IPG buffers of 24 MiB (into
    # two cached wholes), the first full bucket allocates grads_in_partition (48 MiB, a new segment). The step:
    # the fp32 gradient (96 MiB) and, on the first step, Adam's two states (96 MiB each); grads_in_partition
    # is freed after it. Peak at the step: 96 + 96 + 48 + 48 + 96 + 192 = 576 MiB.
    assert rep.peak_allocated == 576 * MIB
    # the originals' four 24 MiB segments go back to the device (empty_cache before the second parameter
    # group) and four new ones hold the activation, the two buckets and the gradients; the second step reuses
    # every segment of the first: 4 x 24 + 96 + 96 + 48 + 96 + 2 x 96
    assert rep.peak_reserved == 624 * MIB


def test_zero_trace_refuses_another_depth():
    with pytest.raises(ValueError, match="layers"):
        zero_trace(AllocTrace((), 3), _layout(3, full=False))


def test_layout_auto_values_follow_transformers():
    class Lin:
        def __init__(self, i, o, bias=False):
            self.in_features, self.out_features, self.bias, self.count = i, o, bias, 1

    class Arch:
        hidden_size = 1024

        def layer_linears(self, i):
            return [Lin(1024, 1024, True), Lin(1024, 4096)]

        def layer_other_params(self, i):
            return 2048

        def embedding_params(self):
            return 32000 * 1024

        def lm_head_params(self):
            return 32000 * 1024

        def final_norm_params(self):
            return 1024

    lay = layout_from_arch(Arch(), 3, 4, 2, True, zero={"reduce_bucket_size": "auto",
                                                         "stage3_prefetch_bucket_size": "auto",
                                                         "stage3_param_persistence_threshold": "auto",
                                                         "sub_group_size": 1e9})
    assert (lay.reduce_bucket, lay.prefetch_bucket, lay.persistence) == (1024 ** 2, int(0.9 * 1024 ** 2), 10240)
    assert lay.layers[0] == ((1024 * 1024, 1024), (1024 * 4096,))
    z2 = layout_from_arch(Arch(), 2, 4, 2, True, zero={"reduce_bucket_size": 5e8})
    assert z2.reduce_bucket == 500_000_000 and z2.persistence == 100_000
    assert part(10, 4) == 3


def test_zero_class_in_the_table_is_the_replays_medians():
    """reserve_table.json's `zero` entry is what benchmarks/derive_zero_reserve.py wrote from its replays
    (benchmarks/results/reserve_zero_rows.json): the median, min and max of each column over the grid."""
    import statistics

    zero = json.loads(reserve.TABLE.read_text(encoding="utf-8"))["classes"]["zero"]
    rows = json.loads((reserve.TABLE.parents[3] / "benchmarks" / "results" /
                       "reserve_zero_rows.json").read_text(encoding="utf-8"))["rows"]
    assert zero["n"] == len(rows) == len(zero["members"]) == 48 and "derive_zero_reserve" in zero["source"]
    for mode in ("off", "on"):
        vals = [r[mode] for r in rows]
        assert zero[mode] == {"median": round(statistics.median(vals), 4), "min": round(min(vals), 4),
                              "max": round(max(vals), 4)}
        for kind in ("adapter", "full"):
            need = [r[f"needed_{mode}"] for r in rows if r["trains"] == kind]
            assert zero["needed"][kind][mode]["median"] == round(statistics.median(need), 4)
            # the allocator's retry frees what holds no live block: a run never needs more than it shows
            assert all(r[f"needed_{mode}"] <= r[mode] + 1e-9 for r in rows)
    # both stages, both kinds, 2/4/8 ranks, 2k and 8k tokens
    assert {(r["stage"], r["trains"], r["world"], r["seq"]) for r in rows} == {
        (s, k, w, q) for s in (2, 3) for k in ("adapter", "full") for w in (2, 4, 8) for q in (2048, 8192)}


def test_zero2_full_build_empties_the_cache_after_flattening():
    lay = _layout(2, full=True)
    o = _Out()
    _ZeroState(lay, o).build()
    kinds = [e[0] if e[0] != "a" else e[2] // MIB for e in o.events]
    # four wholes, empty_cache, the flat buffer, the four originals freed, empty_cache, the fp32 partition
    assert kinds == [24, 24, 24, 24, "e", 96, "f", "f", "f", "f", "e", 96]
    tr = AllocTrace(tuple(o.events) + (("m", (1, 0, "fwd", "embed")),), 1)
    rep = replay(tr)
    # after the second empty_cache only the flat buffer and the fp32 partition are reserved; the peak reserved
    # (taken over the whole replay) was the four wholes and the flat buffer together
    assert rep.segments["1/0/fwd/embed"] == (192 * MIB, 192 * MIB)
    assert rep.peak_reserved == (4 * 24 + 96) * MIB


def test_empty_cache_keeps_split_segments():
    a = CachingAllocator()
    x, y = a.malloc(24 * MIB), a.malloc(4 * MIB)      # y: a 20 MiB segment, split
    z = a.malloc(4 * MIB)                              # the rest of y's segment
    a.free(x)
    a.free(z)
    a.empty_cache()
    # x's segment goes back; y's segment still holds a live block, so it stays whole (20 MiB)
    assert (a.reserved, a.allocated) == (20 * MIB, 4 * MIB)
    a.free(y)
    a.empty_cache()
    assert a.reserved == 0


def test_offloaded_optimizer_keeps_the_fp32_side_off_the_card():
    # ZeRO-3 + offload_optimizer: the build ends with the defragmented partitions (48 MiB) and the bucket (24 MiB);
    # no fp32 sub-group partitions and no gradient-partition buffer (both on the host), and the step allocates
    # nothing on the card
    lay = _layout(3, full=True, offload=True)
    o = _Out()
    zs = _ZeroState(lay, o)
    zs.build()
    assert [e[2] for e in o.events if e[0] == "a"][-2:] == [48 * MIB, 24 * MIB]
    n = len(o.events)
    zs.optimizer_step()
    assert len(o.events) == n
    two = _layout(2, full=True, offload=True)
    o2 = _Out()
    _ZeroState(two, o2).build()
    assert [e[2] for e in o2.events if e[0] == "a"][-1] == 96 * MIB     # the flat bf16 buffer, no fp32 partition
