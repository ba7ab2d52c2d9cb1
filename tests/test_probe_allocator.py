"""The caching-allocator model (probes/allocator.py), one test per rule of c10/cuda/CUDACachingAllocator.cpp.

Each test names the function of the source (pytorch/pytorch, read at commit 001074d2) whose rule it checks and
derives the expected bytes from that rule's constants (kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB,
kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB).
"""

from __future__ import annotations

import pytest

from finetune_doctor.probes.allocator import CachingAllocator, OutOfMemory, _roundup_power2_next_division
from finetune_doctor.probes.allocconf import parse_alloc_conf

MIB = 1 << 20


def test_round_size_512_bytes():
    # round_size: below kMinBlockSize -> 512; else a multiple of 512
    a = CachingAllocator()
    assert [a.round_size(n) for n in (1, 511, 512, 513, 1536, 1537)] == [512, 512, 512, 1024, 1536, 2048]


def test_round_size_power2_divisions():
    # roundup_power2_next_division: the source's own example, 1200 with 4 divisions -> 1280; powers of 2 stay
    assert _roundup_power2_next_division(1200, 4) == 1280
    assert _roundup_power2_next_division(4096, 4) == 4096
    a = CachingAllocator(parse_alloc_conf("roundup_power2_divisions:4"))
    # 1.14 MiB lies between 1 and 2 MiB: steps of 256 KiB -> 1.25 MiB; only for size > 512 * divisions
    assert a.round_size(1_200_000) == 1_310_720
    assert a.round_size(1200) == 1536


def test_pools_and_segment_sizes():
    # get_pool: <= kSmallSize small; get_allocation_size: 2 MiB / 20 MiB / rounded to 2 MiB from 10 MiB on
    size = CachingAllocator.allocation_size
    assert [size(n) for n in (512, MIB)] == [2 * MIB, 2 * MIB]
    assert [size(MIB + 512), size(10 * MIB - 512)] == [20 * MIB, 20 * MIB]
    assert [size(10 * MIB), size(10 * MIB + 512), size(101 * MIB)] == [10 * MIB, 12 * MIB, 102 * MIB]
    a = CachingAllocator()
    a.malloc(MIB)
    a.malloc(MIB + 1)
    assert a.reserved == 2 * MIB + 20 * MIB and a.num_segments == 2


def test_small_requests_share_a_2_mib_segment():
    # should_split in the small pool: any rest of at least 512 bytes is split off
    a = CachingAllocator()
    blocks = [a.malloc(700 * 1024) for _ in range(3)]
    assert a.reserved == 2 * 2 * MIB                     # 3 × 700 KiB need two 2 MiB segments
    assert a.allocated == 3 * 700 * 1024
    assert blocks[0].seg == blocks[1].seg != blocks[2].seg


def test_large_split_needs_more_than_1_mib_left():
    # should_split, large pool: size < max_split_size and remaining > kSmallSize
    a = CachingAllocator()
    a.malloc(int(1.5 * MIB))                             # 20 MiB segment, 18.5 MiB left: split
    assert a.allocated == int(1.5 * MIB) and a.reserved == 20 * MIB
    b = CachingAllocator()
    b.malloc(11 * MIB)                                   # 12 MiB segment, 1 MiB left: not split
    assert b.allocated == 12 * MIB and b.reserved == 12 * MIB


def test_best_fit_by_size_then_address():
    # get_free_block: lower_bound on (stream, size, address)
    a = CachingAllocator()
    big, small, small2 = a.malloc(40 * MIB), a.malloc(30 * MIB), a.malloc(30 * MIB)
    for blk in (big, small, small2):
        a.free(blk)
    got = a.malloc(25 * MIB)
    assert got.seg == small.seg and a.reserved == 100 * MIB   # the lower-address 30 MiB block, no new segment


def test_freed_neighbours_merge():
    # free_block / try_merge_blocks
    a = CachingAllocator()
    x, y = a.malloc(int(1.5 * MIB)), a.malloc(int(1.5 * MIB))
    assert x.seg == y.seg
    a.free(x)
    a.free(y)
    pool = a.pools[False]
    assert len(pool.keys) == 1 and pool.keys[0][1] == 20 * MIB


def test_oversize_blocks_with_max_split_size():
    # get_free_block: a request under max_split_size never takes an oversize block; a larger one takes it only
    # within max_non_split_rounding (20 MiB) of its size; should_split: oversize requests are not split
    conf = parse_alloc_conf("max_split_size_mb:100")
    a = CachingAllocator(conf)
    a.free(a.malloc(150 * MIB))
    a.malloc(50 * MIB)
    assert a.reserved == 200 * MIB                       # 50 MiB did not use the cached 150 MiB block
    b = CachingAllocator(conf)
    b.free(b.malloc(150 * MIB))
    got = b.malloc(140 * MIB)
    assert b.reserved == 150 * MIB and got.size == 150 * MIB and b.allocated == 150 * MIB
    c = CachingAllocator(conf)
    c.free(c.malloc(150 * MIB))
    c.malloc(120 * MIB)                                  # 150 >= 120 + 20: not taken
    assert c.reserved == 270 * MIB


def test_failed_cudamalloc_frees_cached_segments_and_retries():
    # malloc: alloc_block fails -> release_cached_blocks (every unsplit cached segment) -> alloc_block again
    a = CachingAllocator(capacity=100 * MIB)
    a.free(a.malloc(60 * MIB))
    a.malloc(70 * MIB)
    assert a.reserved == 70 * MIB and a.num_device_free == 1


def test_oversize_release_before_freeing_everything():
    # release_available_cached_blocks (max_split_size set): frees the oversize cached block, keeps the others
    a = CachingAllocator(parse_alloc_conf("max_split_size_mb:40"), capacity=150 * MIB)
    keep = a.malloc(30 * MIB)
    a.free(keep)                                         # cached 30 MiB, not oversize
    a.free(a.malloc(100 * MIB))                          # cached 100 MiB, oversize
    a.malloc(45 * MIB)                                   # 100 >= 45 + 20: not reused; 130 + 46 > 150: release it
    assert a.reserved == 76 * MIB and (0, 30 * MIB, keep.addr) in a.pools[False].keys


def test_out_of_memory_reports_torchs_figures():
    # malloc's OOM branch: "Tried to allocate" is alloc_size; allocated/reserved after releasing the cache
    a = CachingAllocator(capacity=100 * MIB)
    a.malloc(int(1.5 * MIB))                            # 20 MiB segment, 1.5 MiB allocated
    a.malloc(70 * MIB)
    with pytest.raises(OutOfMemory) as err:
        a.malloc(25 * MIB)                              # no cached block fits; a 26 MiB segment, 10 MiB free
    info = err.value.info
    assert (info.alloc_size, info.request) == (26 * MIB, 25 * MIB)
    # the split 20 MiB segment cannot be released: its 18.5 MiB stay reserved but unallocated
    assert (info.allocated, info.reserved, info.device_free) == (int(71.5 * MIB), 90 * MIB, 10 * MIB)


def test_blocks_are_per_stream():
    # BlockComparatorSize orders by stream first: a block cached on stream 0 is not reused on stream 1
    a = CachingAllocator()
    a.free(a.malloc(25 * MIB, stream=0))
    a.malloc(25 * MIB, stream=1)
    assert a.reserved == 52 * MIB
    a.malloc(25 * MIB, stream=0)
    assert a.reserved == 52 * MIB


def test_garbage_collection_frees_old_cached_blocks_above_the_threshold():
    # garbage_collect_cached_blocks: only with a memory fraction; frees unsplit cached large blocks
    conf = parse_alloc_conf("garbage_collection_threshold:0.3")
    a = CachingAllocator(conf, capacity=200 * MIB, memory_fraction=1.0)
    a.free(a.malloc(80 * MIB))
    a.malloc(100 * MIB)                                 # a miss with 80 MiB reserved > 0.3 * 200: GC first
    assert a.reserved == 100 * MIB
    b = CachingAllocator(conf, capacity=200 * MIB)      # no fraction set: GC never runs
    b.free(b.malloc(80 * MIB))
    b.malloc(100 * MIB)
    assert b.reserved == 180 * MIB


def test_expandable_segments_map_20_mib_pages():
    # try_allocate_expandable_block / map_block: pages of kLargeBuffer in the large pool; should_split with
    # expandable segments keeps any rest of >= 512 bytes
    a = CachingAllocator(parse_alloc_conf("expandable_segments:True"))
    a.malloc(30 * MIB)
    assert a.reserved == 40 * MIB                        # two 20 MiB pages
    a.malloc(5 * MIB)                                    # fits the mapped 10 MiB rest
    assert a.reserved == 40 * MIB
    a.malloc(30 * MIB)                                   # grows the same segment by 2 pages (5 MiB were free)
    assert a.reserved == 80 * MIB and a.num_segments == 0
    b = CachingAllocator()
    b.malloc(30 * MIB)
    b.malloc(5 * MIB)
    assert b.reserved == 50 * MIB                        # a cudaMalloc'ed 30 MiB segment and a 20 MiB one


def test_expandable_segments_unmap_free_pages_on_oom():
    # release_blocks -> unmap_block: fully free pages go back to the device, then the request is retried
    a = CachingAllocator(parse_alloc_conf("expandable_segments:True"), capacity=100 * MIB)
    x = a.malloc(30 * MIB, stream=0)
    a.free(x)
    a.malloc(90 * MIB, stream=1)                        # stream 1's segment needs 100 MiB: stream 0's 40 unmapped
    assert a.reserved == 100 * MIB
