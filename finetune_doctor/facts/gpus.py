"""``gpus``: what ``doctor gpus`` sees on the cards — live through NVML, or from recordings and pasted smi output
(pipeline/gpus.py builds the facts): per-card memory, foreign processes, stray CUDA contexts, uneven load.
"""

from __future__ import annotations

from finetune_doctor.facts.schema import F, Namespace, OPEN

_LOC = OPEN("where the item points: file, line, column, key")

NAMESPACE = Namespace("gpus", __doc__.split("\n\n")[0], {
    "cards": F("list", "one item per card", items={
        **{k: F("any", k) for k in (
            "capacity_gib", "ecc_uncorrected", "foreign_gib", "headroom_gib", "headroom_threshold_gib",
            "headroom_why", "host", "in_job", "index", "job_gib", "label", "mig", "mig_enabled", "model", "name",
            "peak_gib", "power_limit_w", "power_w", "process_info", "process_note", "processes",
            "remapped_rows_pending", "retired_pages", "retired_pending", "temperature_c", "total_gib", "used_gib",
            "util_gpu")},
        "location": _LOC}),
    "uneven": F("list", "groups of cards whose memory differs more than the threshold", items={
        **{k: F("any", k) for k in (
            "busiest", "causes", "causes_text", "excess_gib", "fix_key", "fix_title", "fix_value", "idle",
            "idle_text", "lightest", "median_gib", "moved", "n_cards", "rank0", "spread_frac", "spread_gib",
            "top_cause")},
        "location": _LOC}),
    "stray_contexts": F("list", "CUDA contexts of one process on other cards", items={
        **{k: F("any", k) for k in ("each_gib", "host", "index", "label", "n", "owners", "pids", "subject",
                                    "total_gib")},
        "location": _LOC}),
    "idle_contexts": F("list", "a context's worth of memory on a card at 0 % while others train "
                              "(analyzers/gpus/gpu_cards.py idle_contexts)", items={
        **{k: F("any", k) for k in ("label", "host", "index", "gib", "pids", "busy", "busy_util")},
        "location": _LOC}),
    "foreign": F("list", "processes outside the job holding memory", items={
        **{k: F("any", k) for k in ("cmdline", "held_text", "label", "pid", "used_gib", "user", "who", "why")},
        "location": _LOC}),
    "thresholds": OPEN("the thresholds the rules use"),
    **{k: F("any", k) for k in ("config", "cuda_driver", "driver", "expected_alloc_gib", "gaps", "hosts", "job",
                                "model_split", "notes", "origin", "process_info", "samples", "span_s")},
})
