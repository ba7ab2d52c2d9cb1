"""The ``gpus`` facts: per-card memory, the training job's processes, foreign processes and stray contexts,
from the samples of one or several hosts (NVML snapshots, or any file readers/gpus/smi.py reads).

Samples stream through a `SampleAccumulator`: it keeps each card's last reading, peak and processes, and 8 bytes
per card and sample for the one fact that needs the whole series (whether the fullest card changed between
samples), so a recording of any length costs memory in proportion to its cards, not its text. Everything after
accumulation is linear in the cards and processes (dicts keyed by host and card, no scans of all pairs).

The ``gpus`` facts namespace (all memory in GiB, 2^30 bytes; "peak" is the maximum over the samples taken)::

    gpus.origin            "nvml" (live) | "file" (--from)
    gpus.hosts             [host, ...] in order of first appearance (file stem for files without a host)
    gpus.samples / .gaps   samples read / samples that failed (NVML error mid-watch, error rows in a CSV)
    gpus.process_info      True when at least one card reported its processes
    gpus.thresholds        {uneven_gib, uneven_frac, headroom_frac, foreign_min_gib, context_max_gib, busy_gib}
    gpus.expected_alloc_gib  largest single allocation the memory model expects, or None (filled by callers that
                           have an estimate; near-capacity then uses it as its threshold when it is larger)
    gpus.cards[]           every card: {host, index, label ("GPU 3" / "node1 GPU 3"), name, model (catalog name),
                           capacity_gib (usable, as torch reports), total_gib (NVML framebuffer), used_gib (last),
                           peak_gib, headroom_gib (capacity - peak), headroom_threshold_gib, headroom_why,
                           util_gpu, temperature_c, power_w, in_job, job_gib, foreign_gib, mig_enabled,
                           mig[], ecc_uncorrected, retired_pages, remapped_rows_pending,
                           processes[] {pid, used_gib, name, cmdline, user, group, job}, location}
    gpus.job               {group, launcher, pids[], cards[] (labels), n_cards, total_gib, how} or None
    gpus.uneven[]          0 or 1 item for the job's cards: {n_cards, busiest{label,index,peak_gib},
                           lightest{...}, median_gib, spread_gib, spread_frac (of capacity), excess_gib
                           (busiest - median), rank0 (busiest is global rank 0's card), idle[] (visible cards
                           nobody uses), causes[] {key, title, evidence, score, config_key}, causes_text,
                           top_cause, fix_title, fix_key, fix_value, location}
    gpus.foreign[]         processes on the job's cards that the job did not start: {label, pid, used_gib,
                           cmdline, user, why, location}
    gpus.stray_contexts[]  per card: job processes whose own card is another one and that also hold a CUDA
                           context here: {label, index, host, pids[], n, each_gib, total_gib, owners (labels),
                           location}
    gpus.model_split[]     processes holding more than a context on several cards (device_map splits):
                           {pid, cards (labels), gib_per_card[]}

Who belongs to "the job": processes are grouped by the nearest launcher ancestor (torchrun, deepspeed,
accelerate, llamafactory-cli, mpirun, srun) or else their session (hardware/nvml.py); the job is the group that
mentions the ``--config`` file, else the one whose command line looks like training, spanning the most cards and
memory. A pid NVML lists but this host cannot see (another container) is foreign once the job is known.
Without process information (CSV logs, hidden by the driver) the job's cards are the busy ones (≥ busy_gib).
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator

from finetune_doctor.analyzers.gpus.gpu_causes import rnd as _r
from finetune_doctor.analyzers.gpus.gpu_causes import uneven
from finetune_doctor.hardware.catalog import match_card
from finetune_doctor.hardware.snapshot import CardSnapshot, ProcessInfo, Snapshot
from finetune_doctor.readers.gpus.gpu_config import ConfigInfo
from finetune_doctor.types import GIB, Hardware

THRESHOLDS = {
    # a spread of at least 2 GiB *and* 10 % of a card between the job's fullest and emptiest card: below that,
    # allocator caching and per-rank batch padding move cards by that much without anything being wrong
    "uneven_gib": 2.0,
    "uneven_frac": 0.10,
    # near-capacity: less than 5 % of the card left at the peak, unless the memory model expects a larger
    # single allocation (gpus.expected_alloc_gib), e.g. the fp32 logits of a long sequence
    "headroom_frac": 0.05,
    # processes smaller than this (Xorg, a monitoring agent) are not worth a finding
    "foreign_min_gib": 0.25,
    # a CUDA context with cuBLAS workspace is 0.3-0.6 GiB (cases/011: 398 MiB per stray rank); above 1 GiB a
    # process is using the card for tensors, not just a context
    "context_max_gib": 1.0,
    # without process information, a card with at least this much used counts as busy
    "busy_gib": 1.0,
}
_TRAINING = re.compile(r"llamafactory|launcher\.py|train|torchrun|deepspeed|accelerate|finetun|sft\b|"
                       r"torch\.distributed", re.I)
_NOTES_MAX = 200


class SampleAccumulator:
    """What the facts need from a series of samples, kept as the samples arrive (`add`).

    Per card (keyed by host and index): the last `CardSnapshot`, the peak used bytes and the file line it came
    from, each pid's largest reading. Per sample: each card's used memory in MiB, packed in an array.
    """

    def __init__(self) -> None:
        self.samples = self.gaps = 0
        self.hosts: dict[str, None] = {}
        self.cards: dict[tuple[str, int], dict[str, Any]] = {}
        self.notes: dict[str, None] = {}
        self.t_min: float | None = None
        self.t_max: float | None = None
        self.driver: str | None = None
        self.cuda_driver: str | None = None
        self._ids: dict[tuple[str, int], int] = {}
        self._keys: list[tuple[str, int]] = []
        self._used = array("q")
        self._starts = array("q", [0])

    def add(self, s: Snapshot) -> None:
        self.samples += 1
        if s.time is not None:
            self.t_min = s.time if self.t_min is None else min(self.t_min, s.time)
            self.t_max = s.time if self.t_max is None else max(self.t_max, s.time)
        if s.gap is not None:
            self.gaps += 1
            self._starts.append(len(self._used))
            return
        host = s.host or "localhost"
        self.hosts.setdefault(host, None)
        self.driver = self.driver or s.driver
        self.cuda_driver = self.cuda_driver or s.cuda_driver
        for n in s.notes:
            if len(self.notes) < _NOTES_MAX:
                self.notes.setdefault(n, None)
        for c in s.cards:
            self._card(host, c, s.source)
        self._starts.append(len(self._used))

    def _card(self, host: str, c: CardSnapshot, source: str | None) -> None:
        key = (host, c.index)
        a = self.cards.get(key)
        if a is None:
            a = self.cards[key] = {"procs": {}, "peak": None, "peak_line": None, "peak_source": None,
                                   "proc_info": False, "proc_note": None}
            self._ids[key] = len(self._keys)
            self._keys.append(key)
        a["last"] = c
        used = c.used_bytes
        if used is not None:
            if a["peak"] is None or used > a["peak"]:
                a["peak"], a["peak_line"], a["peak_source"] = used, c.line, source
            self._used.append(self._ids[key] << 32 | min(used >> 20, 0xFFFFFFFF))
        if c.processes is not None:
            a["proc_info"] = True
            procs: dict[int, ProcessInfo] = a["procs"]
            for p in c.processes:
                old = procs.get(p.pid)
                if old is None or (p.used_bytes or 0) > (old.used_bytes or 0):
                    procs[p.pid] = p
        elif c.process_note:
            a["proc_note"] = c.process_note

    def samples_used(self, keys: set[tuple[str, int]]) -> Iterator[list[tuple[tuple[str, int], int]]]:
        """Per sample, [(card key, used MiB)] of the cards in `keys` that reported memory in it."""
        ids = {self._ids[k] for k in keys if k in self._ids}
        for i in range(len(self._starts) - 1):
            row = []
            for packed in self._used[self._starts[i]:self._starts[i + 1]]:
                cid = packed >> 32
                if cid in ids:
                    row.append((self._keys[cid], packed & 0xFFFFFFFF))
            yield row

    @property
    def span_s(self) -> float | None:
        if self.t_min is None or self.t_max is None or self.samples < 2:
            return None
        return round(self.t_max - self.t_min, 3)


def accumulate(samples: Iterable[Snapshot]) -> SampleAccumulator:
    acc = SampleAccumulator()
    for s in samples:
        acc.add(s)
    return acc


def build_facts(samples: Iterable[Snapshot] | SampleAccumulator, cfg: ConfigInfo | None = None,
                spec: Hardware | None = None, origin: str = "nvml",
                expected_alloc_gib: float | None = None) -> dict[str, Any]:
    """The ``gpus`` facts namespace (module docstring) from the samples of one or several hosts.

    `samples` is any iterable of `Snapshot` (consumed once) or a filled `SampleAccumulator`. `spec` (a parsed
    ``--gpu``) supplies the capacity of cards whose name the catalog does not know; `expected_alloc_gib` raises
    the near-capacity threshold. The returned dict also holds ``notes`` (reading remarks for the report), which
    callers pop before handing the facts to rules.
    """
    acc = samples if isinstance(samples, SampleAccumulator) else accumulate(samples)
    t = THRESHOLDS
    notes = list(acc.notes)
    hosts = list(acc.hosts)
    if acc.gaps and origin == "file":
        notes.append(f"{acc.gaps} of {acc.samples} recorded samples are gaps (NVML errors while recording)")
    cards = _cards(acc, spec, multi=len(hosts) > 1)
    by_key = {(d["host"], d["index"]): d for d in cards}
    process_info = any(d["process_info"] for d in cards)
    if not process_info and cards:
        why = next((d["process_note"] for d in cards if d["process_note"]), "no process information")
        notes.append(f"process information unavailable ({why}): foreign processes and stray CUDA contexts "
                     "cannot be checked")
    procs = _processes(cards)
    job = _find_job(procs, cfg)
    for p in procs:
        p["job"] = None if job is None else \
            (p["host"], p["group"] if p["group"] is not None else -p["pid"]) in job["_keys"]
    per_pid: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in procs:
        per_pid.setdefault((p["host"], p["pid"]), []).append(p)
    # each process's own card: where it holds the most (a rank's tensors live on its own card)
    own = {k: (k[0], max(ps, key=lambda q: q["used_gib"] or 0)["card"]) for k, ps in per_pid.items()}
    if procs and job is None:
        notes.append("the processes' owners are unknown (no command lines: pids not visible from this host, "
                     "psutil missing, or a file without them): foreign processes cannot be told apart")
    if job is not None:
        job_cards = {own[(p["host"], p["pid"])] for p in procs if p["job"]}
    else:
        job_cards = {(d["host"], d["index"]) for d in cards if (d["peak_gib"] or 0) >= t["busy_gib"]}
    _per_card(cards, procs, job_cards, job is not None, expected_alloc_gib)
    stray_items, split = _stray_and_split(per_pid, own, by_key, hosts)
    foreign = _foreign(procs, job, job_cards, by_key)
    jc = [d for d in cards if d["in_job"]]
    u = uneven(jc, cards, cfg, stray_items, split, foreign, acc, hosts, job is not None, t["busy_gib"])
    job_out = None
    if job is not None:
        job_out = {k: v for k, v in job.items() if not k.startswith("_")}
        job_out["cards"] = [d["label"] for d in jc]
        job_out["n_cards"] = len(jc)
    for p in procs:
        p.pop("_cmd", None)
    return {
        "origin": origin, "hosts": hosts, "samples": acc.samples, "gaps": acc.gaps, "driver": acc.driver,
        "cuda_driver": acc.cuda_driver, "span_s": acc.span_s, "process_info": process_info, "thresholds": dict(t),
        "expected_alloc_gib": expected_alloc_gib, "cards": cards, "job": job_out,
        "uneven": [u] if u else [], "foreign": foreign, "stray_contexts": stray_items,
        "model_split": split, "config": cfg.path if cfg else None, "notes": list(dict.fromkeys(notes)),
    }


def card_capacity(c: CardSnapshot, spec: Hardware | None) -> tuple[Any, float | None]:
    """(catalog entry or None, usable GiB or None) of one card: the catalog's value for a known card, else the
    ``--gpu`` spec's, else the tool's total minus what the driver reports as reserved."""
    model = match_card(c.name, c.total_bytes) if c.name else None
    if model is not None:
        return model, model.capacity_gib
    if spec is not None and spec.capacity_gib:
        return None, spec.capacity_gib
    if c.total_bytes is not None:
        return None, (c.total_bytes - (c.reserved_bytes or 0)) / GIB
    return None, None


def _cards(acc: SampleAccumulator, spec: Hardware | None, multi: bool) -> list[dict[str, Any]]:
    order = {h: i for i, h in enumerate(acc.hosts)}
    cards: list[dict[str, Any]] = []
    for (host, idx), a in acc.cards.items():
        c = a["last"]
        model, cap = card_capacity(c, spec)
        peak = None if a["peak"] is None else a["peak"] / GIB
        headroom = None if cap is None or peak is None else cap - peak
        if c.mig_enabled and c.mig:
            # each MIG instance is its own CUDA device: the fullest instance is the one that runs out
            fullest = min((m for m in c.mig if m.total_bytes), key=lambda m: m.total_bytes - (m.used_bytes or 0),
                          default=None)
            if fullest is not None:
                cap = fullest.total_bytes / GIB
                headroom = (fullest.total_bytes - (fullest.used_bytes or 0)) / GIB
        label = f"{host} GPU {idx}" if multi else f"GPU {idx}"
        cards.append({
            "host": host, "index": idx, "label": label, "name": c.name,
            "model": model.name if model else (spec.gpu if spec else None),
            "capacity_gib": _r(cap), "total_gib": _r(_gib(c.total_bytes)), "used_gib": _r(_gib(c.used_bytes)),
            "peak_gib": _r(peak), "headroom_gib": _r(headroom),
            "util_gpu": c.util_gpu, "temperature_c": c.temperature_c, "power_w": c.power_w,
            "power_limit_w": c.power_limit_w, "mig_enabled": c.mig_enabled,
            "mig": [{"gi": m.gi, "ci": m.ci, "name": m.name, "used_gib": _r(_gib(m.used_bytes)),
                     "total_gib": _r(_gib(m.total_bytes))} for m in c.mig],
            "ecc_uncorrected": c.ecc_uncorrected, "retired_pages": c.retired_pages,
            "retired_pending": c.retired_pending, "remapped_rows_pending": c.remapped_rows_pending,
            "process_info": a["proc_info"], "process_note": a["proc_note"],
            "_procs": list(a["procs"].values()),
            "location": {"file": a["peak_source"], "line": a["peak_line"], "column": None, "key": label},
        })
    cards.sort(key=lambda d: (order[d["host"]], d["index"]))
    return cards


def _processes(cards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (host, card, pid), taking each card's process list out of its row."""
    procs: list[dict[str, Any]] = []
    for d in cards:
        for p in d.pop("_procs"):
            procs.append({"host": d["host"], "card": d["index"], "label": d["label"], "pid": p.pid,
                          "used_gib": _r(_gib(p.used_bytes)), "name": p.name, "cmdline": _short(p.cmdline),
                          "user": p.user, "group": p.group, "mig": p.mig,
                          "visible": p.cmdline is not None or p.group is not None, "_cmd": p.cmdline or p.name or ""})
    return procs


def _per_card(cards: list[dict[str, Any]], procs: list[dict[str, Any]], job_cards: set, job_known: bool,
              expected_alloc_gib: float | None) -> None:
    """Fill each card's job membership, job/foreign memory, processes and near-capacity threshold."""
    t = THRESHOLDS
    on_card: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in procs:
        on_card.setdefault((p["host"], p["card"]), []).append(p)
    for d in cards:
        key = (d["host"], d["index"])
        on = on_card.get(key, [])
        d["in_job"] = key in job_cards
        d["job_gib"] = _r(sum(p["used_gib"] or 0 for p in on if p["job"])) if job_known else None
        d["foreign_gib"] = _r(sum(p["used_gib"] or 0 for p in on if p["job"] is False)) if job_known else None
        d["processes"] = [{k: p[k] for k in ("pid", "used_gib", "name", "cmdline", "user", "group", "job", "mig")}
                          for p in on]
        cap = d["capacity_gib"]
        pct = t["headroom_frac"] * cap if cap else None
        if expected_alloc_gib and (pct is None or expected_alloc_gib > pct):
            d["headroom_threshold_gib"] = _r(expected_alloc_gib)
            d["headroom_why"] = "the largest single allocation the memory model expects"
        else:
            d["headroom_threshold_gib"] = _r(pct)
            d["headroom_why"] = f"{t['headroom_frac']:.0%} of the card"


def _stray_and_split(per_pid: dict, own: dict, by_key: dict, hosts: list[str]) -> tuple[list[dict], list[dict]]:
    """Processes on several cards: stray contexts (context-sized on a card that is not theirs) and model splits
    (more than a context on two or more cards)."""
    t = THRESHOLDS
    stray: dict[tuple[str, int], list[dict[str, Any]]] = {}
    split: list[dict[str, Any]] = []
    for (host, pid), (_, own_idx) in own.items():
        mine = per_pid[(host, pid)]
        if len(mine) < 2 or any(p["used_gib"] is None for p in mine):
            continue
        big = [p for p in mine if p["used_gib"] > t["context_max_gib"]]
        if len(big) >= 2:
            split.append({"pid": pid, "cards": [p["label"] for p in big], "gib_per_card": [p["used_gib"] for p in big]})
        for p in mine:
            if p["card"] != own_idx and p["used_gib"] <= t["context_max_gib"] and p["job"] is not False:
                stray.setdefault((host, p["card"]), []).append({**p, "owner": by_key[(host, own_idx)]["label"]})
    order = {h: i for i, h in enumerate(hosts)}
    items = []
    for (host, idx), ps in sorted(stray.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        d = by_key[(host, idx)]
        owners = _ranges([p["owner"] for p in ps])
        subject = (f"{len(ps)} processes whose own cards are elsewhere ({owners}) also hold" if len(ps) > 1
                   else f"1 process whose own card is elsewhere ({owners}) also holds")
        items.append({
            "subject": subject, "label": d["label"], "index": idx, "host": host, "pids": [p["pid"] for p in ps],
            "n": len(ps), "each_gib": _r(max(p["used_gib"] for p in ps)), "total_gib": _r(sum(p["used_gib"] for p in ps)),
            "owners": owners, "location": d["location"]})
    return items, split


def _foreign(procs: list[dict[str, Any]], job: dict[str, Any] | None, job_cards: set,
             by_key: dict) -> list[dict[str, Any]]:
    """Processes on the job's cards that the job did not start (none when the job is unknown)."""
    if job is None:
        return []
    out = []
    # under MIG, instances are isolated: a process in another instance takes nothing from the job's
    job_migs = {(p["host"], p["card"], p["mig"]) for p in procs if p["job"]}
    for p in procs:
        shares = p["mig"] is None or (p["host"], p["card"], p["mig"]) in job_migs
        if p["job"] is False and (p["host"], p["card"]) in job_cards and shares:
            why = ("not visible from this host: another container or user namespace"
                   if not p["visible"] else f"not started by the job's launcher ({job['launcher']})")
            cmd = p["cmdline"] or p["name"] or "command unknown"
            out.append({"label": p["label"], "pid": p["pid"], "used_gib": p["used_gib"], "cmdline": cmd,
                        "user": p["user"], "why": why, "who": cmd + (f", user {p['user']}" if p["user"] else ""),
                        "held_text": (f"holding {p['used_gib']:.2f} GiB" if p["used_gib"] is not None
                                      else "memory not reported by the driver"),
                        "location": by_key[(p["host"], p["card"])]["location"]})
    return out


def _find_job(procs: list[dict[str, Any]], cfg: ConfigInfo | None) -> dict[str, Any] | None:
    """The process group most likely to be the training job, or None when no process is visible."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in procs:
        if not p["visible"]:
            continue
        key = (p["host"], p["group"] if p["group"] is not None else -p["pid"])
        groups.setdefault(key, []).append(p)
    if not groups:
        return None
    # one job may span hosts (one launcher per node): groups whose command lines match across hosts join it
    stem = Path(cfg.path).name if cfg else None

    def score(members: list[dict[str, Any]]) -> tuple:
        cmds = " ".join(m["_cmd"] for m in members)
        return (bool(stem and stem in cmds), bool(_TRAINING.search(cmds)),
                len({(m["host"], m["card"]) for m in members}), sum(m["used_gib"] or 0 for m in members))

    best_key = max(groups, key=lambda k: score(groups[k]))
    best = groups[best_key]
    keys = {best_key}
    sig = _signature(best)
    for k, members in groups.items():
        if k[0] != best_key[0] and _signature(members) == sig:
            keys.add(k)
    members = [p for k in keys for p in groups[k]]
    launcher = best_key[1]
    how = ("matches --config" if score(best)[0] else "looks like training" if score(best)[1]
           else "largest group of processes")
    return {"group": launcher if launcher > 0 else None,
            "launcher": f"pid {launcher}" if launcher > 0 else f"pid {-launcher}",
            "pids": sorted({m["pid"] for m in members}), "total_gib": _r(sum(m["used_gib"] or 0 for m in members)),
            "how": how, "_keys": keys}


def _signature(members: list[dict[str, Any]]) -> str:
    cmd = max((m["_cmd"] for m in members), key=len, default="")
    return re.sub(r"\d+", "#", cmd)[:200]


def _gib(b: int | None) -> float | None:
    return None if b is None else b / GIB


def _short(cmd: str | None, n: int = 160) -> str | None:
    if cmd is None:
        return None
    return cmd if len(cmd) <= n else cmd[: n - 3] + "..."


def _ranges(labels: list[str]) -> str:
    """'GPU 1', 'GPU 2', 'GPU 3', 'GPU 5' → 'GPU 1-3, 5' (labels of one host)."""
    nums = []
    prefix = None
    for lab in labels:
        m = re.match(r"^(.*GPU )(\d+)$", lab)
        if not m:
            return ", ".join(labels)
        prefix = m.group(1)
        nums.append(int(m.group(2)))
    nums = sorted(set(nums))
    parts = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return f"{prefix}{', '.join(parts)}"
