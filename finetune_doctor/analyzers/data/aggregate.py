"""Statistics over sample records: exact percentiles from length counters, a histogram, the longest samples,
LLaMA-Factory's packing per preprocessing batch, and the worst micro-batch.

Memory stays bounded whatever the row count: lengths are kept as value → count counters, examples and longest
samples as a few entries each.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from typing import Any

from finetune_doctor.analyzers.data.dataargs import DataSettings
from finetune_doctor.analyzers.data.encoder import DROPPED, EMPTY_TARGET, EOS_LOST, ERROR, HAS_MEDIA, MEDIA_CUT, OK, \
    TRUNCATED, TURNS_DROPPED, UNREADABLE

_SEQ = itertools.count()  # tie-break for heap items (never compares the dicts)
MAX_EXAMPLES = 5          # locations kept per problem kind / per flag
TOP_K = 5                 # longest samples kept per dataset


def percentile(counter: Counter, p: float) -> int | None:
    """Nearest-rank percentile of a value → count mapping: the smallest v with at least p% of values ≤ v."""
    n = sum(counter.values())
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    acc = 0
    for v in sorted(counter):
        acc += counter[v]
        if acc >= rank:
            return v
    return max(counter)


def _summary(counter: Counter) -> dict[str, Any]:
    n = sum(counter.values())
    if n == 0:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    return {"p50": percentile(counter, 50), "p90": percentile(counter, 90), "p99": percentile(counter, 99),
            "max": max(counter), "mean": round(sum(v * c for v, c in counter.items()) / n, 1)}


def _nice_width(span: int, bins: int) -> int:
    """The smallest 1/2/2.5/5 × 10^k bin width that covers `span` in at most `bins` bins."""
    raw = max(1.0, span / bins)
    mag = 10 ** int(math.floor(math.log10(raw)))
    for m in (1, 2, 2.5, 5, 10):
        w = m * mag
        if w >= raw and float(w).is_integer():
            return int(w)
    return int(10 * mag)


def histogram(counter: Counter, cutoff: int, bins: int = 16) -> dict[str, Any]:
    """Equal-width bins (a round width) from 0 past max(longest sample, cutoff_len); `cutoff_bin` is the bin
    holding cutoff_len (samples above it are truncated)."""
    if not counter:
        return {"edges": [], "counts": [], "cutoff_bin": None}
    top = max(max(counter), cutoff) + 1
    width = _nice_width(top, bins)
    n = max(1, math.ceil(top / width))
    edges = [i * width for i in range(n + 1)]
    counts = [0] * n
    for v, c in counter.items():
        counts[min(n - 1, v // width)] += c
    return {"edges": edges, "counts": counts, "cutoff_bin": min(n - 1, cutoff // width)}


def greedy_knapsack(lengths: list[int], capacity: int) -> list[list[int]]:
    """LF's packing (``processor_utils.py`` ``greedy_knapsack``): sort ascending; fill each pack by repeatedly
    taking the largest length that still fits."""
    import bisect

    nums = sorted(lengths)
    packs = []
    while nums:
        pack, room = [], capacity
        while True:
            i = bisect.bisect(nums, room)
            if i == 0:
                break
            room -= nums[i - 1]
            pack.append(nums.pop(i - 1))
        if not pack:  # longer than capacity: LF drops such examples before packing
            nums.pop()
            continue
        packs.append(pack)
    return packs


class DatasetAggregate:
    """Streaming statistics of one dataset (or of all of them)."""

    def __init__(self, name: str):
        self.name = name
        self.counts = {"source": Counter(), "target": Counter(), "total": Counter(), "trained": Counter()}
        self.n_rows = 0
        self.n_ok = 0
        self.status = Counter()
        self.flags = Counter()
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.longest: list[tuple] = []
        self.pair_longest = 0
        self.tokens_trained = 0
        self.media = 0

    def add(self, rec: tuple, file: str, file_first: int = 0) -> None:
        """Count the sample record `rec` (`SampleRecord.as_tuple`) read from `file`, whose first row has the
        dataset index `file_first` (examples name the row within the file)."""
        index, line, status, sf, tf, tof, s, t, to, labels, flags, pair = rec
        self.n_rows += 1
        self.status[status] += 1
        if status != OK:
            return
        self.n_ok += 1
        c = self.counts
        c["source"][sf] += 1
        c["target"][tf] += 1
        c["total"][tof] += 1
        c["trained"][to] += 1
        self.tokens_trained += to
        if pair is not None:
            self.pair_longest = max(self.pair_longest, pair[0], pair[1])
        if flags:
            for bit, key in ((TRUNCATED, "truncated"), (EOS_LOST, "eos_lost"), (EMPTY_TARGET, "empty_target"),
                             (TURNS_DROPPED, "turns_dropped"), (HAS_MEDIA, "media"), (MEDIA_CUT, "media_cut")):
                if flags & bit:
                    self.flags[key] += 1
                    ex = self.examples.setdefault(key, [])
                    if len(ex) < MAX_EXAMPLES:
                        ex.append({"file": file, "line": line, "index": index, "row": index - file_first,
                                   "total": tof, "kept": to})
        item = (tof, -index, next(_SEQ), {"file": file, "line": line, "index": index, "row": index - file_first,
                                          "source": sf, "target": tf, "total": tof, "kept": to})
        if len(self.longest) < TOP_K:
            heapq.heappush(self.longest, item)
        elif item[:3] > self.longest[0][:3]:
            heapq.heapreplace(self.longest, item)

    def merge(self, other: "DatasetAggregate") -> None:
        for k in self.counts:
            self.counts[k].update(other.counts[k])
        self.n_rows += other.n_rows
        self.n_ok += other.n_ok
        self.status.update(other.status)
        self.flags.update(other.flags)
        self.tokens_trained += other.tokens_trained
        self.pair_longest = max(self.pair_longest, other.pair_longest)
        for k, v in other.examples.items():
            mine = self.examples.setdefault(k, [])
            mine.extend(v[: max(0, MAX_EXAMPLES - len(mine))])
        for it in other.longest:
            if len(self.longest) < TOP_K:
                heapq.heappush(self.longest, it)
            elif it[:3] > self.longest[0][:3]:
                heapq.heapreplace(self.longest, it)

    def facts(self, cutoff: int) -> dict[str, Any]:
        n = self.n_ok
        return {
            "rows": self.n_rows,
            "samples": n,
            "dropped": self.status[DROPPED],
            "errors": self.status[ERROR],
            "unreadable": self.status[UNREADABLE],
            "truncated": self.flags["truncated"],
            "truncated_frac": round(self.flags["truncated"] / n, 4) if n else 0.0,
            "eos_lost": self.flags["eos_lost"],
            "empty_targets": self.flags["empty_target"],
            "turns_dropped": self.flags["turns_dropped"],
            "with_media": self.flags["media"],
            "media_cut": self.flags["media_cut"],
            "tokens_trained": self.tokens_trained,
            "source": _summary(self.counts["source"]),
            "target": _summary(self.counts["target"]),
            "total": _summary(self.counts["total"]),
            "after_cutoff": _summary(self.counts["trained"]),
            "histogram": histogram(self.counts["total"], cutoff),
            "longest": [it[3] for it in sorted(self.longest, key=lambda x: (-x[0], -x[1], x[2]))],
            "examples": {k: v for k, v in self.examples.items()},
        }


class Packer:
    """LF's packing/blocking per map batch of ``preprocessing_batch_size`` rows of the merged dataset."""

    def __init__(self, settings: DataSettings):
        self.s = settings
        self.batch: list[int] = []
        self.rows_in_batch = 0
        self.packs = 0
        self.tokens = 0
        self.max_pack = 0
        self.blocks = 0
        self.dropped_tokens = 0

    def add(self, status: int, kept_total: int) -> None:
        self.rows_in_batch += 1
        if status == OK:
            self.batch.append(kept_total)
        if self.rows_in_batch >= self.s.preprocessing_batch_size:
            self.flush()

    def flush(self) -> None:
        if self.s.processor == "pretrain_packed":
            tot = sum(self.batch)
            self.blocks += tot // self.s.cutoff_len
            self.dropped_tokens += tot % self.s.cutoff_len
            self.tokens += tot - tot % self.s.cutoff_len
        elif self.batch:
            for pack in greedy_knapsack(self.batch, self.s.effective_cutoff):
                self.packs += 1
                self.tokens += sum(pack)
                self.max_pack = max(self.max_pack, sum(pack))
        self.batch, self.rows_in_batch = [], 0

    def facts(self) -> dict[str, Any]:
        if self.s.processor == "pretrain_packed":
            return {"blocks": self.blocks, "block_len": self.s.cutoff_len, "dropped_tokens": self.dropped_tokens}
        row_len = self.s.effective_cutoff + 1  # LF pads each pack to cutoff_len + 1 = the configured cutoff_len
        cap = self.packs * row_len
        return {"rows": self.packs, "row_len": row_len,
                "pad_frac": round(1 - self.tokens / cap, 4) if cap else None, "tokens": self.tokens}


def pad8(n: int) -> int:
    """LF's collators pad batches to a multiple of 8 (``train/sft/workflow.py:65``, dpo/rm/kto workflows)."""
    return (n + 7) // 8 * 8


def worst_micro_batch(agg: DatasetAggregate, settings: DataSettings) -> dict[str, Any] | None:
    """The largest padded micro-batch the data can form (tokens = rows × padded length).

    Without packing a batch is padded to its longest sample (rounded up to a multiple of 8), so the worst case
    puts the longest sample with `micro_batch − 1` others: `micro_batch × pad8(longest)`. Pairwise batches hold
    chosen and rejected rows: twice as many rows. Packed rows are always cutoff_len long. `real_tokens` sums the
    `micro_batch` longest samples (unpadded).
    """
    c = agg.counts["trained"]
    if not c:
        return None
    mb = max(1, settings.micro_batch)
    longest = max(c)
    p = settings.processor
    rows = 2 * mb if p == "pairwise" else mb
    seq = pad8(agg.pair_longest if p == "pairwise" else longest)
    packed_len = settings.cutoff_len
    top = []
    for v in sorted(c, reverse=True):
        top.extend([v] * min(c[v], mb - len(top)))
        if len(top) >= mb:
            break
    mode = "packed" if settings.packing else ("pairwise" if p == "pairwise" else "padded")
    tokens = rows * (packed_len if settings.packing else seq)
    return {
        "mode": mode,
        "micro_batch": mb,
        "rows": rows,
        "seq_len": packed_len if settings.packing else seq,
        "tokens": tokens,
        "unpacked_seq_len": seq,
        "unpacked_tokens": rows * seq,
        "packed_tokens": rows * packed_len,
        "cutoff_tokens": rows * settings.cutoff_len,
        "real_tokens": sum(top) * (2 if p == "pairwise" else 1),
    }


def round_up(n: int | None, step: int = 128) -> int | None:
    """`n` tokens rounded up to a multiple of `step` (a cutoff_len that holds a sample of that length)."""
    if not n:
        return None
    return int(math.ceil(n / step) * step)
