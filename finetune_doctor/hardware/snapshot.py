"""Value types of one reading of the GPUs: what NVML, a recorded file or an nvidia-smi paste says about each card.

Every type is a frozen dataclass with ``to_dict``/``from_dict`` (the JSON of recordings and test fixtures), so the
NVML adapter, the fake adapter and the readers of recorded files all produce the same thing. Memory is in bytes
here (NVML's unit); the facts built from it are in GiB. A field NVML cannot give on this card or driver is None,
never a sentinel.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

MIB = 1 << 20


@dataclass(frozen=True)
class ProcessInfo:
    """One process with a context on a card (NVML compute or graphics process list).

    `used_bytes` is None when NVML cannot say (MIG without per-instance accounting, Windows WDDM, some drivers).
    `cmdline`/`user`/`ppid`/`group` come from psutil on the host that sampled; they are None when the pid is not
    visible there (a container without ``--pid=host``) or psutil is missing. `group` is the pid of the nearest
    launcher ancestor (torchrun, deepspeed, accelerate, llamafactory-cli, mpirun, srun) or else the session id:
    processes with the same group belong to the same job.
    """

    pid: int
    used_bytes: int | None = None
    name: str | None = None
    cmdline: str | None = None
    user: str | None = None
    ppid: int | None = None
    group: int | None = None
    kind: str = "compute"           # compute | graphics
    mig: str | None = None          # "gi/ci" of the MIG instance it runs in

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProcessInfo":
        return _fromdict(cls, d)


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a card: its GPU/compute instance ids, profile name and memory."""

    gi: int | None
    ci: int | None
    name: str | None = None
    uuid: str | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MigInstance":
        return _fromdict(cls, d)


@dataclass(frozen=True)
class CardSnapshot:
    """One card at one instant.

    Memory in bytes: `used_bytes`/`total_bytes`/`free_bytes` as NVML's memory info (``total`` is the full
    framebuffer, e.g. 80 GiB on an A100-80GB); `reserved_bytes` is what the driver keeps for itself (NVML memory
    info v2, driver ≥ 510) and None where the driver cannot say. `processes` is None when process information is
    hidden or unsupported (``process_note`` says why) and an empty tuple when the card has none. `line` is the
    1-based line of a recorded file this card came from.
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None
    util_gpu: int | None = None          # percent
    util_mem: int | None = None          # percent
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    compute_capability: tuple[int, int] | None = None
    mig_enabled: bool | None = None
    mig: tuple[MigInstance, ...] = ()
    ecc_uncorrected: int | None = None   # volatile uncorrected ECC errors since the last driver load
    ecc_corrected: int | None = None
    retired_pages: int | None = None     # pages retired for ECC errors (pre-Ampere)
    retired_pending: bool | None = None
    remapped_rows_pending: bool | None = None   # Ampere and later: row remapping needs a reset
    processes: tuple[ProcessInfo, ...] | None = ()
    process_note: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = _asdict(self)
        d["mig"] = [m.to_dict() for m in self.mig]
        d["processes"] = None if self.processes is None else [p.to_dict() for p in self.processes]
        d["compute_capability"] = list(self.compute_capability) if self.compute_capability else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], line: int | None = None) -> "CardSnapshot":
        """A card from its JSON; `line` (the recording's line) replaces the stored one when given."""
        if not isinstance(d, dict):
            raise ValueError(f"a card must be a JSON object, not {type(d).__name__}")
        d = dict(d)
        d["mig"] = tuple(MigInstance.from_dict(m) for m in _seq(d.get("mig"), "mig"))
        procs = d.get("processes", ())
        d["processes"] = None if procs is None else tuple(ProcessInfo.from_dict(p) for p in _seq(procs, "processes"))
        cc = _seq(d.get("compute_capability"), "compute_capability")
        if cc and (len(cc) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 100
                                           for x in cc)):
            raise ValueError("compute_capability must be [major, minor]")
        d["compute_capability"] = tuple(cc) if cc else None
        if line is not None:
            d["line"] = line
        if "index" not in d:
            raise ValueError("a card needs its index")
        return _fromdict(cls, d)


@dataclass(frozen=True)
class Snapshot:
    """All cards of one host at one instant (`time` is Unix seconds), or a gap when sampling failed.

    A gap (`gap` set, `cards` empty) marks a sample the watcher or recorder could not take: an NVML error
    mid-watch, a GPU that fell off the bus. `notes` holds per-metric "not supported" remarks of the driver.
    `source` is the file it was read from, when it was read from one.
    """

    time: float | None
    host: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    cards: tuple[CardSnapshot, ...] = ()
    gap: str | None = None
    notes: tuple[str, ...] = ()
    source: str | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = _asdict(self)
        d["cards"] = [c.to_dict() for c in self.cards]
        d["notes"] = list(self.notes)
        for k in ("source", "line"):
            d.pop(k, None)
        if self.gap is None:
            d.pop("gap")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str | None = None, line: int | None = None) -> "Snapshot":
        if not isinstance(d, dict):
            raise ValueError(f"a sample must be a JSON object, not {type(d).__name__}")
        d = dict(d)
        d["cards"] = tuple(CardSnapshot.from_dict(c, line) for c in _seq(d.get("cards"), "cards"))
        notes = _seq(d.get("notes"), "notes")
        if not all(isinstance(n, str) for n in notes):
            raise ValueError("notes must be strings")
        d["notes"] = tuple(notes)
        if "time" not in d:
            d["time"] = None
        d["source"], d["line"] = source, line
        return _fromdict(cls, d)


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# The largest value a count or byte field may hold: 2^53 (about 8 PiB) keeps it exact as a JSON number and in
# float arithmetic, and is far above any card.
_MAX_INT = 1 << 53
_SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


@lru_cache(maxsize=None)
def _schema(cls: type) -> dict[str, tuple[tuple[type, ...] | None, bool, str]]:
    """Per field of `cls`: (accepted scalar types or None for a non-scalar, nullable, base type name), read once
    from the dataclass annotations (strings under ``from __future__ import annotations``)."""
    out = {}
    for f in fields(cls):
        kind = str(f.type)
        base = kind.replace(" | None", "").strip()
        out[f.name] = (_SCALARS.get(base), "None" in kind, base)
    return out


def _bad(cls: type, name: str, base: str, v: Any) -> ValueError:
    want = {"int": "an integer", "float": "a number"}.get(base, f"a {base}")
    return ValueError(f"{cls.__name__}.{name} must be {want}, not {type(v).__name__} {_short(v)}")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _fromdict(cls: type, d: dict[str, Any]) -> Any:
    """Build `cls` from `d`; raises ValueError on a key it does not know or a value of the wrong type or range.

    Only ``_``-prefixed keys (comments in hand-written fixtures) and ``schema`` are dropped silently, so a typo
    in a fixture or a record from an incompatible version fails loudly instead of reading as a missing metric.
    A byte count written as a string, a negative memory size or a NaN temperature is an error too, before any
    arithmetic sees it (bool is not a number here; numbers must lie in 0 .. 2^53).
    """
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object, not {type(d).__name__}")
    schema = _schema(cls)
    kwargs = {}
    for k, v in d.items():
        spec = schema.get(k)
        if spec is None:
            if k == "schema" or str(k).startswith("_"):
                continue
            unknown = sorted(str(x) for x in d if x not in schema and x != "schema" and not str(x).startswith("_"))
            raise ValueError(f"unknown field(s) {', '.join(unknown)} for {cls.__name__}")
        types_, nullable, base = spec
        if types_ is not None:
            if v is None:
                if not nullable:
                    raise ValueError(f"{cls.__name__}.{k} must not be null")
            elif type(v) not in types_:   # exact types: bool is not an int here, and no subclass tricks
                raise _bad(cls, k, base, v)
            elif base in ("int", "float") and not (0 <= v <= _MAX_INT):   # NaN fails both comparisons
                raise ValueError(f"{cls.__name__}.{k} = {_short(v)} is out of range (0 to 2^53)")
        kwargs[k] = v
    return cls(**kwargs)


def _seq(v: Any, what: str) -> list:
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"{what} must be a list, not {type(v).__name__}")
    return list(v)


__all__ = ["MIB", "CardSnapshot", "MigInstance", "ProcessInfo", "Snapshot"]
