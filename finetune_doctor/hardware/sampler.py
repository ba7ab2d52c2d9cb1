"""The ``--watch`` / ``--record`` sampling loop: a fixed-rate schedule, a CPU budget, gaps for NVML errors.

It samples a `GpuSource` (hardware/nvml.py, or the fake in tests), writes each sample to the recorder, and hands
each one to a callback; it knows nothing of facts or terminals (the pipeline accumulates, the cli draws).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from finetune_doctor.hardware.nvml import NVMLQueryError, NVMLUnavailable
from finetune_doctor.hardware.record import open_recorder
from finetune_doctor.hardware.snapshot import Snapshot

# record/watch overhead budget: the sampler may use at most this fraction of one CPU core
OVERHEAD_BUDGET = 0.05


def sample_loop(src: Any, period: float, count: int | None, record: str | None, host: str,
                on_sample: Callable[[Snapshot], None], sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Sample at a fixed rate until `count` samples or Ctrl-C; returns the recorder statistics (with "notes").

    Ticks are scheduled at t0 + k·period (not "sleep period after each sample"), so the rate does not drift by
    the sampling time; a sample that overruns its tick skips the missed ticks and counts them. The CPU time of
    taking and writing each sample is measured (``time.process_time``); when its mean exceeds OVERHEAD_BUDGET of
    the period after 5 samples, the period is widened to stay within the budget and a note says so. An NVML
    error mid-watch becomes a gap sample and the loop goes on. `on_sample` sees every sample, gaps included.
    Raises InputError when the `record` file cannot be opened.
    """
    rec = open_recorder(record, host, period) if record else None
    cpu: list[float] = []
    wall: list[float] = []
    notes: list[str] = []
    taken = gaps = missed = 0
    last_host: str | None = None
    t_next = clock()
    requested = period
    try:
        while count is None or taken < count:
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                snap = src.snapshot()
                last_host = snap.host or last_host
            except (NVMLQueryError, NVMLUnavailable) as err:
                snap = Snapshot(time=time.time(), host=last_host or getattr(src, "host", None) or host, gap=str(err))
            if rec is not None:
                rec.write(snap)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            taken += 1
            gaps += snap.gap is not None
            on_sample(snap)
            if count is not None and taken >= count:
                break
            if len(cpu) >= 5 and statistics.fmean(cpu) > OVERHEAD_BUDGET * period:
                period = statistics.fmean(cpu) / OVERHEAD_BUDGET
                notes.append(f"sampling took {statistics.fmean(cpu) * 1e3:.1f} ms of CPU per sample; interval "
                             f"widened from {requested:g} s to {period:.2f} s to stay under "
                             f"{OVERHEAD_BUDGET:.0%} of one core")
            t_next += period
            now = clock()
            if now > t_next:
                skipped = int((now - t_next) // period) + 1
                missed += skipped
                t_next += skipped * period
            sleep(max(0.0, t_next - now))
    except KeyboardInterrupt:
        notes.append(f"stopped by Ctrl-C after {taken} samples")
    finally:
        if rec is not None:
            rec.close()
    if gaps:
        notes.append(f"{gaps} of {taken} samples failed (NVML errors); they are marked as gaps"
                     + (f" in {record}" if record else ""))
    return {
        "file": record, "interval_s": round(requested, 3), "effective_interval_s": round(period, 3),
        "samples": taken, "gaps": gaps, "missed_ticks": missed,
        "cpu_ms_mean": round(statistics.fmean(cpu) * 1e3, 3) if cpu else None,
        "cpu_ms_max": round(max(cpu) * 1e3, 3) if cpu else None,
        "wall_ms_mean": round(statistics.fmean(wall) * 1e3, 3) if wall else None,
        "overhead_pct": round(100 * statistics.fmean(cpu) / period, 3) if cpu else None,
        "notes": notes,
    }
