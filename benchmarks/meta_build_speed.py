"""Time of the meta-device build (readers/model/meta.py) against the generic decoder on the same config.

    python benchmarks/meta_build_speed.py          # Qwen3-235B-A22B and Llama-3.1-8B from the bundled catalog

Prints, per model, the median of 3 runs of `maybe_exact(force=True)` (import of torch/transformers excluded: it
is timed once, separately) and of the generic decoder, and the ratio. The target is under 3 s for the 235B MoE.
"""

from __future__ import annotations

import statistics
import time

from finetune_doctor.readers.model.catalog import catalog_arch, find_in_catalog


def _median(fn, n=3):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main() -> None:
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401
    print(f"import torch+transformers: {time.perf_counter() - t0:.2f} s (once per process)")
    from finetune_doctor.readers.model.meta import maybe_exact

    for mid in ("Qwen/Qwen3-235B-A22B", "meta-llama/Llama-3.1-8B"):
        entry, _ = find_in_catalog(mid)
        tg, arch = _median(lambda: catalog_arch(entry))
        tm, ex = _median(lambda: maybe_exact(arch, force=True))
        print(f"{mid:28s} generic {tg * 1000:7.1f} ms  meta {tm:6.2f} s  ratio {tm / tg:8.0f}x  "
              f"total generic {arch.total_params():,} meta {ex.total_params():,}")


if __name__ == "__main__":
    main()
