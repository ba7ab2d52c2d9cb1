"""The GPU catalog: usable memory, compute capability and bf16 support of the cards people fine-tune on.

The data lives in ``gpus.json`` next to this file; every entry names where its capacity comes from (an OOM
message quoting "total capacity", a case log, or an estimate from a card with the same memory configuration) and
how sure that is (``confidence``). Capacities are what ``torch.cuda.get_device_properties(i).total_memory`` reports,
in GiB (2^30 bytes): the number that PyTorch prints as "total capacity" in a CUDA OOM message, and the budget the
memory model compares its peak against.

`parse_gpu_spec` reads the ``--gpu`` spec of DESIGN.md (``A100-80GB``, ``8xH100-80GB``, ``2x4090``, ``4xA800``,
``V100-32GB``, ``H200``, ``910B``) and the device names NVML reports (``NVIDIA A100-SXM4-80GB``,
``NVIDIA GeForce RTX 4090``), tolerant of case, spaces, ``-``/``_`` separators and form-factor words (SXM4, PCIe,
HBM3). A family without a size picks the entry marked ``default`` (the larger, common training variant: A100 → 80GB,
V100 → 32GB).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from finetune_doctor.errors import InputError
from finetune_doctor.types import Hardware

_CATALOG = Path(__file__).with_name("gpus.json")

# Words that name a vendor, a product line or a board form factor: they never change which entry a name means.
_NOISE = {"NVIDIA", "GEFORCE", "TESLA", "QUADRO", "HUAWEI", "SXM", "SXM2", "SXM4", "SXM5", "PCIE", "HBM2", "HBM2E",
          "HBM3", "HBM3E", "GPU", "CARD"}
_COUNT_PREFIX = re.compile(r"^\s*(\d+)\s*[x×*]\s*(.+)$", re.IGNORECASE)
_COUNT_SUFFIX = re.compile(r"^(.+?)\s*[x×*]\s*(\d+)\s*$", re.IGNORECASE)
_MEM_TOKEN = re.compile(r"^(\d+)(?:G|GB|GIB)$")


@dataclass(frozen=True)
class GpuModel:
    """One catalog entry. `capacity_gib` is torch's ``total_memory`` in GiB; `compute_capability` is None off CUDA."""

    name: str
    family: str
    nominal_gb: int
    capacity_gib: float
    compute_capability: tuple[int, int] | None
    bf16: bool
    arch: str
    confidence: str
    source: str
    also_seen: tuple[float, ...] = ()
    aliases: tuple[str, ...] = ()
    default: bool = False
    vendor: str = "nvidia"


@lru_cache(maxsize=1)
def catalog() -> tuple[GpuModel, ...]:
    """All catalog entries, in file order."""
    data = json.loads(_CATALOG.read_text(encoding="utf-8"))
    out = []
    for e in data["gpus"]:
        cc = e.get("compute_capability")
        out.append(GpuModel(
            name=e["name"], family=e["family"], nominal_gb=int(e["nominal_gb"]), capacity_gib=float(e["capacity_gib"]),
            compute_capability=tuple(cc) if cc else None, bf16=bool(e["bf16"]), arch=e["arch"],
            confidence=e["confidence"], source=e["source"], also_seen=tuple(e.get("also_seen") or ()),
            aliases=tuple(e.get("aliases") or ()), default=bool(e.get("default", False)),
            vendor=e.get("vendor", "nvidia")))
    return tuple(out)


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^A-Z0-9]+", text.upper()) if t and t not in _NOISE]


def _split_mem(tokens: list[str]) -> tuple[str, int | None]:
    """Join the model tokens and pull out a memory size token (``80GB``, ``80G``); returns (model, GB or None)."""
    mem = None
    rest = []
    for t in tokens:
        m = _MEM_TOKEN.match(t)
        if m and mem is None:
            mem = int(m.group(1))
        else:
            rest.append(t)
    return "".join(rest), mem


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, list[GpuModel]], dict[str, GpuModel]]:
    """(family key → its entries, exact alias key → entry). Keys are the compact upper-case model strings."""
    families: dict[str, list[GpuModel]] = {}
    exact: dict[str, GpuModel] = {}
    for g in catalog():
        families.setdefault(g.family.upper(), []).append(g)
        for text in (g.name, *g.aliases):
            model, mem = _split_mem(_tokens(text))
            if mem is not None:
                exact[f"{model}@{mem}"] = g
            else:
                # an alias without a size names the family member it is listed under (V100S → 32GB)
                exact.setdefault(f"{model}@", g)
    return families, exact


def lookup(name: str) -> GpuModel | None:
    """The catalog entry a card name means, or None. Accepts specs (``A100-80GB``) and NVML names."""
    families, exact = _index()
    tokens = _tokens(name)
    model, mem = _split_mem(tokens)
    if not model:
        return None
    if mem is None and len(tokens) > 1 and tokens[-1].isdigit():
        # "A100 80" / "H100_80": a trailing bare number after a known family is the size
        head = "".join(tokens[:-1])
        if head in families or f"{head}@" in exact:
            model, mem = head, int(tokens[-1])
    if mem is not None and f"{model}@{mem}" in exact:
        return exact[f"{model}@{mem}"]
    entries = families.get(model)
    if entries is None and f"{model}@" in exact:
        entries = families.get(exact[f"{model}@"].family.upper())
        if mem is None:
            return exact[f"{model}@"]
    if entries is None:
        return None
    if mem is None:
        return next((g for g in entries if g.default), entries[-1])
    for g in entries:
        if g.nominal_gb == mem:
            return g
    # tolerate "L40-45G" style sizes: the nominal size within 10 %
    close = [g for g in entries if abs(g.nominal_gb - mem) <= 0.1 * g.nominal_gb]
    return close[0] if len(close) == 1 else None


def parse_gpu_spec(spec: str, nnodes: int | None = None) -> Hardware:
    """Read a ``--gpu`` spec into a `Hardware` (source "flag").

    `spec` is ``[COUNTx]MODEL[-SIZE]`` (``8xH100-80GB``, ``2x4090``, ``A100``; ``H100x8`` also works); `nnodes`
    multiplies the count (DESIGN.md: ``--gpu`` gives the GPUs of one node). `num_gpus` = count × nnodes;
    `capacity_gib` is the catalog's usable GiB per card. Raises InputError with a did-you-mean for an unknown model
    or a size that model does not come in.
    """
    raw = spec.strip()
    if not raw:
        raise InputError("empty --gpu spec (expected e.g. A100-80GB or 8xH100-80GB)", file="--gpu")
    count = 1
    m = _COUNT_PREFIX.match(raw)
    if m:
        count, raw = int(m.group(1)), m.group(2)
    else:
        m = _COUNT_SUFFIX.match(raw)
        # "H100x8": only when what precedes the x is a known card
        if m and lookup(m.group(1)) is not None:
            raw, count = m.group(1), int(m.group(2))
    if count < 1:
        raise InputError(f"{spec!r}: the GPU count must be at least 1", file="--gpu")
    if nnodes is not None and nnodes < 1:
        raise InputError(f"--nnodes {nnodes}: must be at least 1", file="--nnodes")
    g = lookup(raw)
    if g is None:
        raise InputError(_unknown_message(spec, raw), file="--gpu")
    nodes = nnodes or 1
    return Hardware(gpu=g.name, num_gpus=count * nodes, capacity_gib=g.capacity_gib, bf16=g.bf16, source="flag",
                    compute_capability=g.compute_capability, nnodes=nodes)


def _unknown_message(spec: str, raw: str) -> str:
    families, _ = _index()
    model, mem = _split_mem(_tokens(raw))
    if model in families and mem is not None:
        sizes = ", ".join(f"{g.nominal_gb}GB" for g in families[model])
        return f"{spec!r}: {families[model][0].family} comes in {sizes}, not {mem}GB"
    names = [g.name for g in catalog()]
    keys = {re.sub(r"[^A-Z0-9]", "", n.upper()): n for n in names}
    for g in catalog():
        for a in g.aliases:
            keys.setdefault(re.sub(r"[^A-Z0-9]", "", a.upper()), g.name)
    probe = re.sub(r"[^A-Z0-9]", "", raw.upper())
    near = difflib.get_close_matches(probe, list(keys), n=3, cutoff=0.6)
    hint = ""
    if near:
        hint = " (did you mean " + " or ".join(dict.fromkeys(keys[k] for k in near)) + "?)"
    return f"{spec!r}: unknown GPU model{hint}; known: {', '.join(names)}"


def match_card(name: str | None, total_bytes: int | None = None) -> GpuModel | None:
    """The catalog entry of a card NVML or nvidia-smi names, using its framebuffer size to pick the variant.

    nvidia-smi truncates long names (``NVIDIA A100-SXM...``), which leaves the size out; NVML's total memory
    (the full framebuffer, e.g. 81920 MiB for an A100-80GB, 40960 MiB for the 40GB) then decides. Returns None
    for a card the catalog does not know.
    """
    if not name:
        return None
    g = lookup(name)
    if g is None or total_bytes is None:
        return g
    siblings = [e for e in catalog() if e.family == g.family]
    if len(siblings) < 2:
        return g
    gb = total_bytes / 1e9
    return min(siblings, key=lambda e: abs(e.nominal_gb - gb))
