"""A model of PyTorch's CUDA caching allocator (the ``native`` backend), driven by allocation/free requests.

Pure Python (no torch, no GPU). Written from ``c10/cuda/CUDACachingAllocator.cpp`` of pytorch/pytorch, read at
commit 001074d2 (the 2.4-era file: constants, ``DeviceCachingAllocator::malloc``/``free``, ``get_free_block``,
``should_split``, ``alloc_found_block``, ``free_block``/``try_merge_blocks``, ``alloc_block``,
``release_available_cached_blocks``, ``release_cached_blocks``/``release_blocks``, ``garbage_collect_cached_blocks``,
``round_size``/``roundup_power2_next_division``, the expandable-segment functions ``find_expandable_block``,
``map_block``, ``try_allocate_expandable_block``, ``unmap_block``) and compared with commit eb42ad6e (2.1-era) and
the 2.5+ changes named below. Rules, with the function each comes from (tests/test_probe_allocator.py tests each):

1. ``round_size``: requests below 512 B take 512 B (``kMinBlockSize``); larger ones round up to a multiple of 512,
   or, when ``roundup_power2_divisions`` gives N > 1 for the size's interval and size > 512·N, up to the next of N
   equal divisions between the surrounding powers of two (``roundup_power2_next_division``).
2. ``get_pool``: rounded sizes up to 1 MiB (``kSmallSize``) use the small pool, larger ones the large pool.
3. ``get_allocation_size``: a new small segment is 2 MiB (``kSmallBuffer``); a large request under 10 MiB
   (``kMinLargeAlloc``) gets a 20 MiB segment (``kLargeBuffer``); from 10 MiB on the segment is the request
   rounded up to 2 MiB (``kRoundLarge``).
4. ``get_free_block``: best fit: the smallest cached block of the same stream and pool with size ≥ request, ties by
   address (``BlockComparatorSize``: stream, size, address). A request under ``max_split_size`` never takes an
   oversize block (≥ max_split_size); a request of max_split_size or more takes one only when it is less than
   ``max_non_split_rounding`` (20 MiB; ``kLargeBuffer`` before 2.5) larger than the request.
5. ``should_split``: the rest of a block is split off when it is at least 512 B in the small pool (or with
   expandable segments), and in the large pool when the request is under max_split_size and the rest is over
   1 MiB (``remaining > kSmallSize``). Unsplit, the whole block counts as allocated.
6. ``free_block``/``try_merge_blocks``: a freed block merges with free neighbours of its segment.
7. ``malloc``: on a miss: garbage collection (only with a memory fraction set and a threshold > 0), then
   ``alloc_block`` (cudaMalloc of the segment size; fails when the device has less free memory, or the fraction's
   limit would be passed), then ``release_available_cached_blocks`` (max_split_size set: free the smallest
   oversize cached block that is large enough, or oversize blocks from the largest down) and retry, then
   ``release_cached_blocks`` (free every unsplit cached segment of both pools) and retry; then the OOM error.
8. ``garbage_collect_cached_blocks``: when reserved memory exceeds threshold × allowed memory, free unsplit large
   cached blocks whose age (``get_free_blocks_call_count`` since they were cached) is at least the mean age,
   repeating until enough is reclaimed. (2.5+, pytorch#134338: expandable blocks are skipped here and in rule 7's
   oversize release.)
9. Expandable segments (``expandable_segments:True``): one virtual segment per stream and pool, mapped in pages of
   2 MiB (small pool) or 20 MiB (large pool); a request is placed at the lowest address where free and unmapped
   space suffice (``find_expandable_block``), pages are mapped to cover it (``map_block``, rounding up to whole
   pages), and on OOM fully free pages are unmapped (``unmap_block``). Best fit treats a block followed by
   unmapped space as that much larger (``get_free_block``'s ``expandable_size``).

Streams: blocks belong to the stream they were allocated on and are reused only by it (rule 4's comparator);
cross-stream uses (``recordStream``) are not modelled: every free is immediate. Private pools (CUDA graphs) are
not modelled. Device "free memory" is `capacity` minus what this process reserved (one process per card).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from finetune_doctor.probes.allocconf import K_LARGE_BUFFER, AllocatorConfig

K_MIN_BLOCK = 512                  # kMinBlockSize
K_SMALL_SIZE = 1 << 20             # kSmallSize: largest small-pool request, 1 MiB
K_SMALL_BUFFER = 2 << 20           # kSmallBuffer: small segments, 2 MiB
K_MIN_LARGE_ALLOC = 10 << 20       # kMinLargeAlloc: below this a large request gets a 20 MiB segment
K_ROUND_LARGE = 2 << 20            # kRoundLarge: large segments round up to 2 MiB
_VA_GAP = 1 << 44                  # virtual address room between cudaMalloc'ed segments / expandable segments


class Block:
    """A range of one segment: free (cached) or allocated. `mapped` is False only for the unmapped tail space of an
    expandable segment."""

    __slots__ = ("addr", "size", "stream", "small", "allocated", "prev", "next", "expandable", "mapped",
                 "requested", "gc_base", "seg")

    def __init__(self, addr: int, size: int, stream: int, small: bool, seg: int, expandable: bool = False,
                 mapped: bool = True):
        self.addr, self.size, self.stream, self.small, self.seg = addr, size, stream, small, seg
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.expandable, self.mapped = expandable, mapped
        self.requested = 0
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class _Pool:
    """Free blocks of one pool, ordered as ``BlockComparatorSize`` orders them (stream, size, address)."""

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[tuple[int, int, int]] = []
        self.blocks: dict[tuple[int, int, int], Block] = {}
        self.unmapped: dict[tuple[int, int], Block] = {}   # expandable tails by (stream, address)
        self.free_calls = 0                                 # get_free_blocks_call_count (GC ages)

    def insert(self, b: Block) -> None:
        key = (b.stream, b.size, b.addr)
        bisect.insort(self.keys, key)
        self.blocks[key] = b
        b.gc_base = self.free_calls

    def remove(self, b: Block) -> None:
        key = (b.stream, b.size, b.addr)
        i = bisect.bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            self.keys.pop(i)
            del self.blocks[key]

    def lower_bound(self, stream: int, size: int) -> int:
        return bisect.bisect_left(self.keys, (stream, size, -1))


@dataclass(frozen=True)
class OomInfo:
    """What PyTorch knows when it raises the OOM error (bytes): `request` the rounded request, `alloc_size` the
    segment size it tried to cudaMalloc ("Tried to allocate" prints this), `allocated`/`reserved` the allocator's
    current counters, `device_free` what the device had left, `capacity` the bytes the allocator could use."""

    request: int
    alloc_size: int
    allocated: int
    reserved: int
    device_free: int
    capacity: int
    stream: int


class OutOfMemory(Exception):
    def __init__(self, info: OomInfo):
        super().__init__("CUDA out of memory")
        self.info = info


class CachingAllocator:
    """The allocator of one device. `capacity`: bytes the process may reserve on the card (None: unlimited);
    `memory_fraction`: ``torch.cuda.set_per_process_memory_fraction`` of `capacity` (enables the fraction limit
    and garbage collection). Counters in bytes: `allocated`, `reserved` and their peaks."""

    def __init__(self, config: AllocatorConfig | None = None, capacity: int | None = None,
                 memory_fraction: float | None = None, gc_skips_expandable: bool = True):
        self.config = config or AllocatorConfig()
        self.capacity = capacity
        self.allowed = int(memory_fraction * capacity) if memory_fraction is not None and capacity else None
        self.gc_skips_expandable = gc_skips_expandable
        self.pools = {True: _Pool(True), False: _Pool(False)}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.num_segments = self.num_retries = self.num_device_free = 0
        self._next_va = _VA_GAP
        self._seg_id = 0
        self._seg_base: dict[int, int] = {}   # expandable segment id -> its first address (pages align to it)
        self.max_split = self.config.max_split_size if self.config.max_split_size is not None else 1 << 62

    # ---- sizes (rules 1-3) ---------------------------------------------------------------------------------
    def round_size(self, size: int) -> int:
        if size < K_MIN_BLOCK:
            return K_MIN_BLOCK
        div = self.config.divisions_for(size)
        if div > 1 and size > K_MIN_BLOCK * div:
            return _roundup_power2_next_division(size, div)
        return -(-size // K_MIN_BLOCK) * K_MIN_BLOCK

    @staticmethod
    def allocation_size(size: int) -> int:
        if size <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if size < K_MIN_LARGE_ALLOC:
            return K_LARGE_BUFFER
        return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE

    # ---- malloc / free -------------------------------------------------------------------------------------
    def malloc(self, orig_size: int, stream: int = 0) -> Block:
        """Allocate `orig_size` bytes on `stream`; raises `OutOfMemory` with PyTorch's figures when it cannot."""
        size = self.round_size(orig_size)
        pool = self.pools[size <= K_SMALL_SIZE]
        alloc_size = self.allocation_size(size)
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.allowed is not None and self.config.garbage_collection_threshold > 0:
                self._garbage_collect()
            block = self._alloc_block(pool, size, alloc_size, stream)
            if block is None and self._release_available(pool, size, stream):
                block = self._alloc_block(pool, size, alloc_size, stream)
            if block is None:
                self._release_cached()
                self.num_retries += 1
                block = self._alloc_block(pool, size, alloc_size, stream)
            if block is None:
                free = (self.capacity - self.reserved) if self.capacity is not None else 0
                raise OutOfMemory(OomInfo(size, alloc_size, self.allocated, self.reserved, max(free, 0),
                                          self.capacity or 0, stream))
        return self._alloc_found(pool, block, size, orig_size)

    def free(self, block: Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        pool = self.pools[block.small]
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)

    # ---- rule 4 -------------------------------------------------------------------------------------------
    def _get_free_block(self, pool: _Pool, size: int, stream: int) -> Block | None:
        if self.allowed is not None and self.config.garbage_collection_threshold > 0:
            pool.free_calls += 1
        keys = pool.keys
        i = pool.lower_bound(stream, size)
        if i >= len(keys) or keys[i][0] != stream:
            return None
        b = pool.blocks[keys[i]]
        if b.expandable:
            if self.config.expandable_segments:
                # best fit over the size a block can grow to (its size plus an unmapped tail after it)
                j = i + 1
                while b.expandable and j < len(keys) and keys[j][0] == stream:
                    nb = pool.blocks[keys[j]]
                    if _expandable_size(nb) < _expandable_size(b):
                        b, i = nb, j
                        j += 1
                    else:
                        break
            else:
                j = i + 1
                while j < len(keys) and keys[j][0] == stream and pool.blocks[keys[j]].expandable:
                    j += 1
                if j >= len(keys) or keys[j][0] != stream:
                    return None
                b = pool.blocks[keys[j]]
        if size < self.max_split and b.size >= self.max_split:
            return None
        if size >= self.max_split and b.size >= size + self.config.max_non_split_rounding:
            return None
        pool.remove(b)
        return b

    # ---- rule 5 -------------------------------------------------------------------------------------------
    def _should_split(self, b: Block, size: int) -> bool:
        remaining = b.size - size
        if b.small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK
        return size < self.max_split and remaining > K_SMALL_SIZE

    def _alloc_found(self, pool: _Pool, b: Block, size: int, orig_size: int) -> Block:
        if self._should_split(b, size):
            rest = b
            b = Block(rest.addr, size, rest.stream, rest.small, rest.seg, rest.expandable)
            b.prev, b.next = rest.prev, rest
            if b.prev is not None:
                b.prev.next = b
            rest.prev = b
            rest.addr += size
            rest.size -= size
            pool.insert(rest)
        b.allocated = True
        b.requested = orig_size
        self.allocated += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return b

    # ---- rule 6 -------------------------------------------------------------------------------------------
    def _try_merge(self, dst: Block, src: Block | None, pool: _Pool) -> int:
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            pool.unmapped.pop((src.stream, src.addr), None)
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # ---- rule 7 -------------------------------------------------------------------------------------------
    def _device_has(self, nbytes: int) -> bool:
        if self.allowed is not None and self.reserved + nbytes > self.allowed:
            return False
        return self.capacity is None or self.reserved + nbytes <= self.capacity

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int, stream: int) -> Block | None:
        if self.config.expandable_segments:
            return self._alloc_expandable(pool, size, stream)
        if not self._device_has(alloc_size):
            return None
        self._seg_id += 1
        b = Block(self._next_va, alloc_size, stream, pool.small, self._seg_id)
        self._next_va += alloc_size + _VA_GAP
        self._reserve(alloc_size)
        self.num_segments += 1
        return b

    def _reserve(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release_block(self, b: Block, pool: _Pool) -> None:
        pool.remove(b)
        self.reserved -= b.size
        self.num_segments -= 1
        self.num_device_free += 1

    def _release_available(self, pool: _Pool, size: int, stream: int) -> bool:
        """``release_available_cached_blocks``: only with max_split_size set; frees oversize cached blocks."""
        if self.config.max_split_size is None:
            return False
        target = max(size, self.max_split)
        keys = pool.keys
        i = pool.lower_bound(stream, target)
        skip = self.gc_skips_expandable
        if i < len(keys) and keys[i][0] == stream and not (skip and pool.blocks[keys[i]].expandable):
            b = pool.blocks[keys[i]]
            if not b.is_split() and not b.expandable:
                self._release_block(b, pool)
                return True
            return False
        released = 0
        j = i - 1
        victims = []
        while j >= 0 and released < target:
            b = pool.blocks[keys[j]]
            if b.stream != stream or b.size < self.max_split:
                break
            if not b.is_split() and not b.expandable:
                victims.append(b)
                released += b.size
            j -= 1
        for b in victims:
            self._release_block(b, pool)
        return released >= target

    def _release_cached(self) -> None:
        """``release_cached_blocks``/``release_blocks``: free every unsplit cached segment, unmap free pages of
        expandable segments."""
        for pool in self.pools.values():
            for key in list(pool.keys):
                b = pool.blocks.get(key)
                if b is None:
                    continue
                if b.expandable:
                    self._unmap(b, pool)
                elif not b.is_split():
                    self._release_block(b, pool)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: ``emptyCache`` → ``release_cached_blocks``, as on an OOM retry."""
        self._release_cached()

    # ---- rule 8 -------------------------------------------------------------------------------------------
    def _garbage_collect(self) -> None:
        threshold = int(self.config.garbage_collection_threshold * (self.allowed or 0))
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool = self.pools[False]
        cands = [b for b in pool.blocks.values() if not b.is_split()
                 and not (self.gc_skips_expandable and b.expandable)]
        reclaimed = 0
        while cands and reclaimed < target:
            ages = [pool.free_calls - b.gc_base for b in cands]
            mean = sum(ages) / len(ages)
            old = [b for b, a in zip(cands, ages) if a >= mean]
            if not old:
                break
            for b in old:
                reclaimed += b.size
                self._release_block(b, pool)
            cands = [b for b in cands if b not in old]

    # ---- rule 9 -------------------------------------------------------------------------------------------
    def _page(self, pool: _Pool) -> int:
        return K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER

    def _new_expandable(self, pool: _Pool, stream: int) -> Block:
        self._seg_id += 1
        span = 1 << 43   # address space of one expandable segment (torch reserves 1.125 × the card's memory)
        b = Block(self._next_va, span, stream, pool.small, self._seg_id, expandable=True, mapped=False)
        self._seg_base[self._seg_id] = self._next_va
        self._next_va += span + _VA_GAP
        pool.unmapped[(stream, b.addr)] = b
        return b

    def _find_expandable(self, pool: _Pool, size: int, stream: int) -> Block:
        def allocatable(b: Block | None) -> bool:
            return b is not None and not b.allocated

        for key in sorted(k for k in pool.unmapped if k[0] == stream):
            c = pool.unmapped[key]
            if allocatable(c.prev) and c.prev.mapped:
                c = c.prev
            got, b = 0, c
            while got < size and allocatable(b):
                got += b.size
                b = b.next
            if got >= size:
                return c
        return self._new_expandable(pool, stream)

    def _map(self, b: Block, size: int, pool: _Pool) -> bool:
        page = self._page(pool)
        mapped = -(-size // page) * page
        mapped = min(mapped, b.size)
        if not self._device_has(mapped):
            return False
        pool.unmapped.pop((b.stream, b.addr), None)
        b.mapped = True
        if mapped < b.size:
            rest = Block(b.addr + mapped, b.size - mapped, b.stream, b.small, b.seg, expandable=True, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            pool.unmapped[(rest.stream, rest.addr)] = rest
            b.size = mapped
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.insert(b)
        self._reserve(mapped)
        return True

    def _alloc_expandable(self, pool: _Pool, size: int, stream: int) -> Block | None:
        """``try_allocate_expandable_block``: map pages at the lowest address with room, growing the candidate
        (a free block merged with each newly mapped range) until it covers `size`."""
        c = self._find_expandable(pool, size, stream)
        if not c.mapped and not self._map(c, min(c.size, size), pool):
            return None
        while c.size < size:
            nxt = c.next
            if nxt is None or nxt.mapped or not self._map(nxt, min(size - c.size, nxt.size), pool):
                return None
            c = nxt   # map_block merged the candidate into the newly mapped block
        pool.remove(c)
        return c

    def _unmap(self, b: Block, pool: _Pool) -> None:
        page = self._page(pool)
        base = self._seg_base[b.seg]
        start = base + -(-(b.addr - base) // page) * page
        end = base + (b.addr + b.size - base) // page * page
        if end <= start:
            return
        pool.remove(b)
        if start > b.addr:
            before = Block(b.addr, start - b.addr, b.stream, b.small, b.seg, expandable=True)
            before.prev, before.next = b.prev, b
            if b.prev is not None:
                b.prev.next = before
            b.prev = before
            pool.insert(before)
        if b.addr + b.size > end:
            after = Block(end, b.addr + b.size - end, b.stream, b.small, b.seg, expandable=True)
            after.prev, after.next = b, b.next
            if b.next is not None:
                b.next.prev = after
            b.next = after
            pool.insert(after)
        b.addr, b.size, b.mapped = start, end - start, False
        self.reserved -= end - start
        self.num_device_free += 1
        self._try_merge(b, b.prev, pool)
        self._try_merge(b, b.next, pool)
        pool.unmapped[(b.stream, b.addr)] = b


def _expandable_size(b: Block) -> int:
    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: round `size` up to the next of `divisions` equal steps between the powers
    of two around it (1200 with 4 divisions: 1024, 1280, 1536, 1792 → 1280); powers of two stay."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step
