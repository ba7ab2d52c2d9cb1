"""The GPU catalog: usable memory, compute capability, bf16/fp8 support of the cards people fine-tune on.

The data lives in ``gpus.json`` next to this file (its ``about`` says what each field means); every entry names
its source and how sure it is (``confidence``). Capacities are what ``torch.cuda.get_device_properties(i)
.total_memory`` reports, in GiB (2^30 bytes): the number PyTorch prints as "total capacity" in a CUDA/HIP OOM
message, and the budget the memory model compares its peak against.

Three rules turn what is known into a capacity; each is computed here from the catalog's own measured entries,
so it moves when the data does, and tests/test_gpu_catalog.py checks every entry against it:

* **from a vendor tool's total** (`derive_capacity`): nvidia-smi's total (driver R510+) includes the memory the
  driver keeps; torch's total is that minus a reserve. The reserve is the median share over the measured entries
  of the same memory kind: about 0.7 % on HBM cards (A100, H100, H200, B200), about 1.45 % on GDDR cards (T4, L4,
  L40, RTX 3090/4090/5090). On ROCm, HIP reports rocm-smi's VRAM total as torch's total (measured on the MI300X:
  206141652992 B = 191.98 GiB, https://github.com/ROCm/legacy-rocm-build/issues/4750), so the total is used as is.
* **from a bare size** (`bare_capacity`, ``--gpu 24GB``): "GB" is read the way GPU memory is sold, a size in
  GiB of framebuffer (a "24 GB" RTX 4090 has 24564 MiB), and the usable part is `BARE_FRACTION` of it: the lowest
  share of its nominal size that any measured catalog card without an ECC carve-out keeps usable (the RTX 5090:
  31.37 GiB of 32 GB, 0.980), so a bare size never promises more than a real card of that size gives. 24GB →
  23.52 GiB, 80GB → 78.42 GiB. A data-center GDDR card with ECC on keeps 1/16 less (an L4 sold as 24 GB has
  22.17 GiB): name the card for those. A size given in GiB (``80GiB``) is taken as the usable capacity itself.
  bf16 is known for a bare size only when every catalog card sold with that size agrees.
* **did-you-mean** (`suggest`) compares vendor and size, never letters alone: an AMD or Ascend name is matched
  against that vendor's cards only, a known family with a size it does not come in suggests its nearest size.

`parse_gpu_spec` reads the ``--gpu`` spec of DESIGN.md (``A100-80GB``, ``8xH100-80GB``, ``2x4090``, ``H200``,
``910B``, ``MI300X``, and bare sizes ``24GB``, ``8x96GB``, ``2x24G``, ``80GiB``) and `lookup` the device names
the vendor tools report (``NVIDIA A100-SXM4-80GB``, ``AMD Instinct MI300X``, ``910B3``), tolerant of case,
spaces, ``-``/``_`` separators and form-factor words. A family without a size picks the entry marked ``default``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from finetune_doctor.errors import InputError
from finetune_doctor.types import Hardware

_CATALOG = Path(__file__).with_name("gpus.json")
GIB = 1 << 30
MIB = 1 << 20

# Words that name a vendor or product line: they never change which entry a name means.
# QUADRO is not among them: the Quadro RTX 6000 (Turing, 24 GB) is another card than the RTX 6000 Ada (trial 10).
_NOISE = {"NVIDIA", "GEFORCE", "TESLA", "HUAWEI", "AMD", "INSTINCT", "OAM", "GPU", "CARD"}
# Board form factors: dropped only when the name with them matches no alias (an "H100 PCIe" is its own card, an
# "A100-PCIE-40GB" is the A100-40GB).
_FORM = {"SXM", "SXM2", "SXM4", "SXM5", "SXM6", "PCIE", "HBM2", "HBM2E", "HBM3", "HBM3E"}
_COUNT_PREFIX = re.compile(r"^\s*(\d+)\s*[x×*]\s*(.+)$", re.IGNORECASE)
_COUNT_SUFFIX = re.compile(r"^(.+?)\s*[x×*]\s*(\d+)\s*$", re.IGNORECASE)
_MEM_TOKEN = re.compile(r"^(\d+)(?:G|GB|GIB)$")
_BARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GB|G|GIB)\s*$", re.IGNORECASE)
_VENDOR_HINTS = (("amd", re.compile(r"^(?:MI\d|AMD|INSTINCT|RADEON)")),
                 ("huawei", re.compile(r"^(?:ASCEND|ATLAS|9[1-9]0|NPU)")),
                 ("nvidia", re.compile(r"^(?:NVIDIA|RTX|GTX|GEFORCE|TESLA|QUADRO|TITAN|G[BH]\d|[ABHLMPTV]\d)")))
# A model name's series: an optional Quadro line and RTX/GTX/TITAN line word, the letters before the number (the
# generation letter of NVIDIA's data-center names: K, M, P, V, T, A, L, H, B; AMD's MI), the number, the letters
# after it (ADA, BLACKWELL name a generation; TI, D, SUPER do not)
_SERIES = re.compile(r"^(QUADRO)?(?:RTX|GTX|TITAN)?(PRO)?([A-Z]*?)(\d+)([A-Z]*)$")
_GEN_SUFFIX = ("ADA", "BLACKWELL")


@dataclass(frozen=True)
class GpuModel:
    """One catalog entry. `capacity_gib` is torch's ``total_memory`` in GiB; `compute_capability` is None off CUDA.

    `smi_total_mib` is the vendor tool's framebuffer total (nvidia-smi/rocm-smi/npu-smi) where one was found;
    `memory` is "HBM" or "GDDR"; `ecc_carveout` marks GDDR cards that ship with ECC on (1/16 of the memory).
    """

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
    fp8: bool = False
    smi_total_mib: int | None = None
    memory: str = "HBM"
    ecc_carveout: bool = False
    unified: bool = False


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
            vendor=e.get("vendor", "nvidia"), fp8=bool(e.get("fp8", False)), smi_total_mib=e.get("smi_total_mib"),
            memory=e.get("memory", "HBM"), ecc_carveout=bool(e.get("ecc_carveout", False)),
            unified=bool(e.get("unified", False))))
    return tuple(out)


def _measured(g: GpuModel) -> bool:
    return g.confidence in ("quoted", "quoted-unattributed")


@lru_cache(maxsize=1)
def reserve_shares() -> dict[str, float]:
    """Median share of nvidia-smi's total that torch does not see, per memory kind ("HBM", "GDDR"), over the
    measured NVIDIA entries that carry an nvidia-smi total."""
    shares: dict[str, list[float]] = {"HBM": [], "GDDR": []}
    for g in catalog():
        if _measured(g) and g.smi_total_mib and g.vendor == "nvidia":
            shares[g.memory].append(1 - g.capacity_gib / (g.smi_total_mib / 1024))
    import statistics   # here, not at import: a lint imports this module and never asks (issue #22)

    return {k: statistics.median(v) for k, v in shares.items()}


def derive_capacity(smi_total_mib: int, memory: str = "HBM", vendor: str = "nvidia") -> float:
    """Torch's total (GiB, two decimals, rounded down) from a vendor tool's total in MiB (module docstring rule)."""
    gib = smi_total_mib / 1024
    if vendor == "nvidia":
        gib *= 1 - reserve_shares()[memory]
    return math.floor(gib * 100 + 1e-9) / 100


@lru_cache(maxsize=1)
def bare_fraction() -> tuple[float, str]:
    """(usable share of a bare nominal size, the catalog card that sets it): the lowest capacity/nominal ratio over
    measured NVIDIA entries without an ECC carve-out or unified memory."""
    pool = [g for g in catalog() if _measured(g) and g.vendor == "nvidia" and not g.ecc_carveout and not g.unified]
    low = min(pool, key=lambda g: g.capacity_gib / g.nominal_gb)
    return low.capacity_gib / low.nominal_gb, low.name


def bare_capacity(size: float, unit: str) -> tuple[float, bool | None, str]:
    """A bare ``--gpu`` size: (usable GiB, bf16 or None, the note that says how it was read).

    `unit` is "GB" (also "G": a size as cards are sold) or "GiB" (usable capacity as given). Raises InputError for a
    size that is not positive or beyond any card (over 4096 GB).
    """
    if not 0 < size <= 4096:
        raise InputError(f"--gpu {size:g}{unit}: a GPU memory size must be between 0 and 4096 GB", file="--gpu")
    nominal = round(size)
    same = [g for g in catalog() if g.nominal_gb == nominal]
    if unit == "GiB":
        cap = round(size, 2)
        how = f"{size:g} GiB taken as the usable capacity, as given"
    else:
        frac, by = bare_fraction()
        cap = math.floor(size * frac * 100 + 1e-9) / 100
        g = next(e for e in catalog() if e.name == by)
        how = (f"read as a card sold with {size:g} GB: {cap:.2f} GiB usable ({size:g} x {frac:.3f}, the smallest "
               f"usable share of any catalog card's size, the {by}'s {g.capacity_gib:.2f} GiB of {g.nominal_gb} GB); "
               "a data-center GDDR card with ECC on has 1/16 less")
    flags = {g.bf16 for g in same}
    if len(flags) == 1:
        bf16: bool | None = flags.pop()
        why = (f"bf16 {'assumed' if bf16 else 'taken as missing'}: every catalog card sold with {nominal} GB "
               f"({', '.join(g.name for g in same[:4])}{', ...' if len(same) > 4 else ''}) "
               f"{'has' if bf16 else 'lacks'} it")
    else:
        bf16 = None
        yes = next((g.name for g in same if g.bf16), None)
        no = next((g.name for g in same if not g.bf16), None)
        why = ("bf16 unknown: " + (f"cards sold with {nominal} GB include the {no} (no bf16) and the {yes} (bf16)"
                                   if yes and no else f"the catalog has no card sold with {nominal} GB"))
    return cap, bf16, f"--gpu {size:g}{unit}: {how}; {why}; name the card (e.g. --gpu RTX-4090) to be exact"


def _tokens(text: str, keep_form: bool = False) -> list[str]:
    drop = _NOISE if keep_form else _NOISE | _FORM
    return [t for t in re.split(r"[^A-Z0-9]+", text.upper()) if t and t not in drop]


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
def _index() -> tuple[dict[str, list[GpuModel]], dict[str, GpuModel], dict[str, GpuModel]]:
    """(family key → its entries, loose alias key → entry, strict alias key → entry).

    Keys are the compact upper-case model strings plus ``@size``; strict keys keep form-factor words.
    """
    families: dict[str, list[GpuModel]] = {}
    loose: dict[str, GpuModel] = {}
    strict: dict[str, GpuModel] = {}
    for g in catalog():
        families.setdefault(g.family.upper(), []).append(g)
        for text in (g.name, *g.aliases):
            for keep, table in ((False, loose), (True, strict)):
                model, mem = _split_mem(_tokens(text, keep_form=keep))
                # an alias without a size names the family member it is listed under (V100S → 32GB)
                table.setdefault(f"{model}@{mem if mem is not None else ''}", g)
    return families, loose, strict


def lookup(name: str) -> GpuModel | None:
    """The catalog entry a card name means, or None. Accepts specs (``A100-80GB``) and vendor tool names."""
    families, loose, strict = _index()
    model, mem = _split_mem(_tokens(name, keep_form=True))
    hit = strict.get(f"{model}@{mem if mem is not None else ''}")
    if hit is not None:
        return hit
    tokens = _tokens(name)
    model, mem = _split_mem(tokens)
    if not model:
        return None
    if mem is None and len(tokens) > 1 and tokens[-1].isdigit():
        # "A100 80" / "H100_80": a trailing bare number after a known family is the size
        head = "".join(tokens[:-1])
        if head in families or f"{head}@" in loose:
            model, mem = head, int(tokens[-1])
    if mem is not None and f"{model}@{mem}" in loose:
        return loose[f"{model}@{mem}"]
    entries = families.get(model)
    if entries is None and f"{model}@" in loose:
        if mem is None:
            return loose[f"{model}@"]
        entries = families.get(loose[f"{model}@"].family.upper())
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


def variants(spec: str) -> list[GpuModel]:
    """The other memory sizes of the card a ``--gpu`` spec names when the spec gives no size (``A100`` →
    [A100-40GB]: the catalogue's default entry is the one `parse_gpu_spec` took), else []. A count prefix
    (``8xA100``) is ignored. Never raises."""
    raw = spec.strip()
    m = _COUNT_PREFIX.match(raw)
    if m:
        raw = m.group(2).strip()
    else:
        m = _COUNT_SUFFIX.match(raw)
        if m and lookup(m.group(1)) is not None:
            raw = m.group(1)
    if _BARE.match(raw):
        return []
    _model, mem = _split_mem(_tokens(raw))
    chosen = lookup(raw)
    if mem is not None or chosen is None:
        return []
    families, _, _ = _index()
    return [g for g in families.get(chosen.family.upper(), []) if g.name != chosen.name]


def parse_gpu_spec(spec: str, nnodes: int | None = None) -> Hardware:
    """Read a ``--gpu`` spec into a `Hardware` (source "flag").

    `spec` is ``[COUNTx]MODEL[-SIZE]`` (``8xH100-80GB``, ``2x4090``, ``A100``; ``H100x8`` also works) or
    ``[COUNTx]SIZE`` with SIZE in GB/G (as sold) or GiB (usable): ``24GB``, ``8x96GB``, ``80GiB`` (module
    docstring). `nnodes` multiplies the count (DESIGN.md: ``--gpu`` gives the GPUs of one node): `num_gpus` =
    count × nnodes. `capacity_gib` is the usable GiB per card. Raises InputError (file "--gpu") with a did-you-mean
    and the bare-size form for an unknown model, a size that model does not come in, or a count below 1.
    """
    raw = spec.strip()
    if not raw:
        raise InputError("empty --gpu spec (expected e.g. A100-80GB, 8xH100-80GB or 8x24GB)", file="--gpu")
    count = 1
    m = _COUNT_PREFIX.match(raw)
    if m:
        count, raw = int(m.group(1)), m.group(2).strip()
    else:
        m = _COUNT_SUFFIX.match(raw)
        # "H100x8": only when what precedes the x is a known card
        if m and lookup(m.group(1)) is not None:
            raw, count = m.group(1), int(m.group(2))
    if count < 1 or count > 1_000_000:
        raise InputError(f"{spec!r}: the GPU count must be between 1 and 1000000", file="--gpu")
    if nnodes is not None and nnodes < 1:
        raise InputError(f"--nnodes {nnodes}: must be at least 1", file="--nnodes")
    nodes = nnodes or 1
    bare = _BARE.match(raw)
    if bare:
        unit = "GiB" if bare.group(2).upper() == "GIB" else "GB"
        size = float(bare.group(1))
        cap, bf16, note = bare_capacity(size, unit)
        return Hardware(gpu=f"{size:g}{unit} card", num_gpus=count * nodes, capacity_gib=cap, bf16=bf16,
                        source="flag", nnodes=nodes, notes=(note,))
    g = lookup(raw)
    if g is None:
        modified = modified_board(raw)
        if modified is None:
            raise InputError(_unknown_message(spec, raw, count), file="--gpu")
        g, name, cap, note = modified
        return Hardware(gpu=name, num_gpus=count * nodes, capacity_gib=cap, bf16=g.bf16, source="flag",
                        compute_capability=g.compute_capability, nnodes=nodes, fp8=g.fp8, notes=(note,))
    return Hardware(gpu=g.name, num_gpus=count * nodes, capacity_gib=g.capacity_gib, bf16=g.bf16, source="flag",
                    compute_capability=g.compute_capability, nnodes=nodes, fp8=g.fp8)


# the least a modified board's memory is, as a multiple of the largest size its card was sold with: re-fitted boards
# double the memory chips (2080 Ti 11 -> 22 GB, RTX 4090 24 -> 48 GB, RTX 3080 10 -> 20 GB); a size a little above
# the largest (A100-90GB) is a slip, answered with the sizes the card comes in
MODIFIED_BOARD_FACTOR = 1.5
# how a modified board's note names its chip's bf16 (catalogue `bf16`: True, False, None when not known)
_BF16_WORD = {True: "supported", False: "not supported", None: "not known"}


def modified_board(raw: str) -> tuple[GpuModel, str, float, str] | None:
    """A known card named with more memory than it was ever sold with (``2080Ti-22GB``, ``RTX-4090-48GB``: boards
    re-fitted with larger memory chips, sold second-hand): (the catalogue card, the name to show, usable GiB per
    card, the note that says how it was read), else None. The chip, so its compute capability, bf16 and fp8
    support, is the catalogue card's; the usable share of the nominal size is that card's own (capacity_gib /
    nominal_gb). A size under `MODIFIED_BOARD_FACTOR` times the card's largest (``A100-60GB``, ``A100-90GB``) is
    read as a slip, not a modification: None, so the caller's error lists the sizes it comes in. Trial 17 (LF#7147, 2 x 2080 Ti 22 GB): the only way to say
    22 GB was a bare ``22GB``, which lost the card's missing bf16. Never raises."""
    model, mem = _split_mem(_tokens(raw))
    card = lookup(model) if model and mem is not None else None
    if card is None or mem is None:
        return None
    largest = max(e.nominal_gb for e in catalog() if e.family == card.family)
    if mem < MODIFIED_BOARD_FACTOR * largest or mem > 4096:
        return None
    share = card.capacity_gib / card.nominal_gb
    cap = math.floor(mem * share * 100 + 1e-9) / 100
    name = re.sub(r"-\d+GB$", "", card.name) + f"-{mem}GB"
    cc = ".".join(map(str, card.compute_capability)) if card.compute_capability else "unknown"
    note = (f"--gpu {raw}: a {card.name} with {mem} GB, more than it was sold with ({largest} GB): read as a "
            f"modified board, {cap:.2f} GiB usable ({mem} x {share:.3f}, the {card.name}'s usable share); the chip's "
            f"compute capability ({cc}) and bf16 ({_BF16_WORD[card.bf16]}) are the {card.name}'s")
    return card, name, cap, note


def vendor_of(name: str) -> str | None:
    """The vendor a card name points to ("nvidia", "amd", "huawei") from its leading words, or None."""
    compact = "".join(re.split(r"[^A-Z0-9]+", name.upper()))
    for vendor, pat in _VENDOR_HINTS:
        if pat.match(compact):
            return vendor
    return None


def suggest(raw: str, n: int = 2) -> list[GpuModel]:
    """Catalog entries a misspelt or unknown card name most likely means: same vendor first, then the closest
    family name, then the closest size (when `raw` gives one). An AMD or Ascend name only meets its own vendor."""
    families, _, _ = _index()
    model, mem = _split_mem(_tokens(raw))
    if model in families:
        pool = list(families[model])
    else:
        vendor = vendor_of(raw)
        pool = [g for g in catalog() if vendor is None or g.vendor == vendor]
    if not pool:
        return []

    import difflib   # here, not at import: a lint imports this module and never asks (issue #22)

    def key(g: GpuModel) -> tuple[float, float]:
        names = [g.family.upper(), *(_split_mem(_tokens(a))[0] for a in (g.name, *g.aliases))]
        sim = max(difflib.SequenceMatcher(None, model, k).ratio() for k in names if k)
        size = abs(g.nominal_gb - mem) / max(g.nominal_gb, mem) if mem else 0.0
        return (-round(sim, 1), size)

    pool = _same_series(model, pool)
    if not pool:
        return []
    ranked = sorted(pool, key=key)
    best = key(ranked[0])[0]
    # a weak letter match is no suggestion, unless the family itself was named
    if model not in families and -best < 0.5:
        return []
    return [g for g in ranked if key(g)[0] == best][:n]


def _series(model: str) -> tuple[str, str, str, str] | None:
    """(line: Quadro or RTX PRO, generation letters, number, generation suffix) of a compact model name
    (`_SERIES`), or None for a name of another shape (Ascend's 910B, GB200)."""
    m = _SERIES.match(model)
    if m is None:
        return None
    quadro, pro, letters, digits, tail = m.groups()
    gen = next((g for g in _GEN_SUFFIX if tail.startswith(g)), "")
    return (quadro or "") + (pro or ""), letters, digits, gen


def _same_series(model: str, pool: list[GpuModel]) -> list[GpuModel]:
    """The cards of `pool` in the same product line and generation as `model`: the same Quadro line and
    generation letters (Tesla M10 is Maxwell: not the A10, Ampere, nor AMD's MI100), and for names that are only a
    number (GeForce, Quadro RTX) the same number of digits, first digit and generation suffix (a Quadro RTX 6000
    is Turing: not the RTX A6000 nor the RTX 6000 Ada). A number whose generation no catalog card shares (a card
    newer than the catalog) keeps the cards of its line with as many digits. Trial 10: "Quadro RTX 6000" was
    offered RTX-A6000, "Tesla-M10" A10, "M10" MI100."""
    want = _series(model)
    if want is None:
        return pool

    def series_of(g: GpuModel) -> list[tuple[str, str, str, str]]:
        keys = [g.family.upper(), *(_split_mem(_tokens(a))[0] for a in (g.name, *g.aliases))]
        return [s for s in map(_series, keys) if s is not None]

    def same(s: tuple[str, str, str, str], strict: bool) -> bool:
        if s[0] != want[0] or s[1] != want[1]:
            return False
        if want[1]:
            return True
        return len(s[2]) == len(want[2]) and s[3] == want[3] and (not strict or s[2][0] == want[2][0])

    strict = [g for g in pool if any(same(s, True) for s in series_of(g))]
    if strict or want[1]:
        return strict
    known_gen = any(s[2][:1] == want[2][:1] and len(s[2]) == len(want[2]) and not s[1]
                    for g in catalog() for s in series_of(g))
    return [] if known_gen else [g for g in pool if any(same(s, False) for s in series_of(g))]


def _unknown_message(spec: str, raw: str, count: int) -> str:
    families, _, _ = _index()
    model, mem = _split_mem(_tokens(raw))
    near = suggest(raw)
    hint = f" (did you mean {' or '.join(g.name for g in near)}?)" if near else ""
    prefix = f"{count}x" if count > 1 else ""
    way_out = f"or give its memory as sold, e.g. --gpu {prefix}{mem if mem else 24}GB"
    if model in families and mem is not None:
        sizes = ", ".join(f"{g.nominal_gb}GB" for g in families[model])
        return f"{spec!r}: {families[model][0].family} comes in {sizes}, not {mem}GB{hint}; {way_out}"
    return f"{spec!r}: unknown GPU{hint}; {way_out}"


def match_card(name: str | None, total_bytes: int | None = None) -> GpuModel | None:
    """The catalog entry of a card a vendor tool names, using its framebuffer size to pick the variant.

    nvidia-smi truncates long names (``NVIDIA A100-SXM...``), which leaves the size out; the tool's total memory
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
    gb = total_bytes / GIB
    return min(siblings, key=lambda e: abs(e.nominal_gb - gb))
