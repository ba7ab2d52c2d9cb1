"""The one adapter over NVML (nvidia-ml-py, NVIDIA's official bindings, imported as ``pynvml``).

Everything the doctor learns from a live driver goes through `NvmlAdapter.snapshot()`, which reads every card in
one pass into the frozen `Snapshot` of ``hardware/snapshot.py``. The shape follows what nvitop and gpustat learned
the hard way (reference/style/anchors.md §5):

* ``pynvml`` is imported lazily, inside `NvmlAdapter`, so ``doctor lint`` and every import of the package work on
  machines without a driver;
* "library not found" / "driver not loaded" / a driver-library version mismatch become `NVMLUnavailable` with a
  one-line hint, never a traceback;
* a metric the card or driver does not support (``NVMLError_NotSupported``; ``FunctionNotFound`` when the driver
  is too old for the query; ``NoPermission``) reads as None and leaves a note, and the rest of the snapshot goes on;
* an error that means the card itself is gone (``GPU is lost``, ``Unknown Error``) while reading memory raises
  `NVMLQueryError`: the watcher records a gap and keeps sampling.

Static facts (name, UUID, compute capability) and each process's command line (psutil) are cached per card and per
(pid, start time): they cannot change while the process lives, and re-reading them every sample is what makes a
naive recorder expensive (benchmarks/bench_recorder.py).

`detect()` turns a snapshot into the `Hardware` that ``doctor check`` uses when no ``--gpu`` is given.
"""

from __future__ import annotations

import os
import re
import socket
import time
from typing import Any, Callable, Protocol

from finetune_doctor.hardware.snapshot import CardSnapshot, MigInstance, ProcessInfo, Snapshot
from finetune_doctor.types import GIB, Hardware

# Command lines that start a multi-process job: every rank is a descendant of one of these.
LAUNCHER = re.compile(
    r"(?:^|[\s/])(?:torchrun|deepspeed|llamafactory-cli|lmf|mpirun|mpiexec|srun)(?:\s|$)"
    r"|torch\.distributed\.(?:run|launch)|deepspeed\.launcher\.(?:launch|runner)"
    r"|accelerate(?:-launch|\s+launch)|accelerate/commands/launch")

# NVML reports this for "not available" in 32-bit instance ids (NVML_VALUE_NOT_AVAILABLE_uint).
_NA_U32 = 0xFFFFFFFF


class NVMLUnavailable(Exception):
    """No usable NVML: no NVIDIA driver or library, or a driver/library mismatch. The message says what to do."""


class NVMLQueryError(Exception):
    """A query failed for a reason that is not "unsupported" (GPU lost, unknown error): the sample is a gap."""


class GpuSource(Protocol):
    """What the pipeline samples: the real adapter, or the fake that replays recorded snapshots."""

    def snapshot(self) -> Snapshot: ...

    def close(self) -> None: ...


class ProcessResolver:
    """Command line, user, parent and job group of a pid, via psutil, cached per (pid, start time).

    Returns all-None fields when psutil is not installed or the pid is not visible on this host (containers
    without ``--pid=host`` see NVML's host pids but cannot look them up).
    """

    def __init__(self, psutil_mod: Any = None):
        if psutil_mod is None:
            try:
                import psutil as psutil_mod  # type: ignore[no-redef]
            except ImportError:  # psutil is optional: processes then carry pids and memory only
                psutil_mod = False
        self._ps = psutil_mod
        self._cache: dict[int, tuple[float, dict[str, Any]]] = {}
        self.lookups = 0

    def info(self, pid: int) -> dict[str, Any]:
        empty = {"name": None, "cmdline": None, "user": None, "ppid": None, "group": None}
        if not self._ps:
            return empty
        ps = self._ps
        try:
            proc = ps.Process(pid)
            started = proc.create_time()
        except Exception:  # NoSuchProcess, AccessDenied, ZombieProcess: the pid is not ours to read
            self._cache.pop(pid, None)
            return empty
        hit = self._cache.get(pid)
        if hit and hit[0] == started:
            return hit[1]
        self.lookups += 1
        out = dict(empty)
        try:
            with proc.oneshot():
                out["name"] = proc.name()
                out["cmdline"] = " ".join(proc.cmdline()) or out["name"]
                out["user"] = _try(proc.username)
                out["ppid"] = _try(proc.ppid)
            out["group"] = self._group(proc)
        except Exception:  # the process ended between the NVML read and this lookup
            return empty
        self._cache[pid] = (started, out)
        return out

    def _group(self, proc: Any) -> int | None:
        """Pid of the nearest launcher ancestor (torchrun, deepspeed, ...), else the session id."""
        try:
            chain = [proc, *proc.parents()]
        except Exception:
            chain = [proc]
        for p in chain:
            try:
                if LAUNCHER.search(" ".join(p.cmdline())):
                    return p.pid
            except Exception:
                continue
        # psutil has no getsid; a stand-in module may provide one (hardware/fake.py)
        getsid = getattr(self._ps, "getsid", None) or getattr(os, "getsid", None)
        try:
            return getsid(proc.pid) if getsid else None
        except OSError:
            return None


def _errs(nv: Any, *names: str) -> tuple[type, ...]:
    """The ``NVMLError_<name>`` classes the module defines (older bindings lack some; an empty tuple catches none)."""
    return tuple(getattr(nv, f"NVMLError_{n}") for n in names if hasattr(nv, f"NVMLError_{n}"))


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


class NvmlAdapter:
    """Live snapshots from NVML. `nvml` is the ``pynvml`` module (injected by tests); psutil resolves pids.

    Raises `NVMLUnavailable` from the constructor when NVML cannot start. Call `close()` (or use it as a
    context manager) to shut NVML down.
    """

    def __init__(self, nvml: Any = None, psutil_mod: Any = None, host: str | None = None):
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[no-redef]
            except ImportError as err:
                raise NVMLUnavailable("nvidia-ml-py is not installed: pip install nvidia-ml-py") from err
            if not hasattr(nvml, "nvmlDeviceGetMemoryInfo"):
                # the unofficial 'pynvml' package of old shadows the official module name (gpustat checks this too)
                raise NVMLUnavailable("the 'pynvml' module found is not NVIDIA's nvidia-ml-py: "
                                      "pip uninstall pynvml && pip install nvidia-ml-py")
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise NVMLUnavailable(_unavailable_message(nvml, err)) from None
        except OSError as err:  # a broken libnvidia-ml.so raises OSError from ctypes
            raise NVMLUnavailable(f"cannot load the NVIDIA management library: {err}") from None
        self.host = host or socket.gethostname()
        self.procs = ProcessResolver(psutil_mod)
        self._static: dict[int, dict[str, Any]] = {}
        self._open = True

    def __enter__(self) -> "NvmlAdapter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down a driver that went away is not worth an error
                pass

    # -- one pass over every card -------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Read every card once. Raises NVMLQueryError when the driver fails in a way a retry may survive."""
        nv = self.nvml
        notes: list[str] = []
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as err:
            raise NVMLQueryError(f"NVML could not count the GPUs: {err}") from None
        driver = self._text(self._q(notes, "driver version", nv.nvmlSystemGetDriverVersion))
        cuda = self._q(notes, "CUDA driver version", nv.nvmlSystemGetCudaDriverVersion_v2)
        cuda_s = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        cards = tuple(self._card(i, notes) for i in range(count))
        if driver and re.match(r"^535\.(4[3-9]|[5-7]\d|8[0-6])\b", driver):
            # gpustat's NvidiaCompatibilityWarning: these drivers return garbage process lists through v3 calls
            notes.append(f"driver {driver} is known to report wrong per-process GPU memory (fixed in 535.104)")
        return Snapshot(time=time.time(), host=self.host, driver=driver, cuda_driver=cuda_s, cards=cards,
                        notes=tuple(dict.fromkeys(notes)))

    def _card(self, i: int, notes: list[str]) -> CardSnapshot:
        nv = self.nvml
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as err:
            raise NVMLQueryError(f"GPU {i}: {err}") from None
        st = self._static.get(i)
        if st is None:
            cc = self._q(notes, "compute capability", nv.nvmlDeviceGetCudaComputeCapability, h)
            st = {"name": self._text(self._q(notes, "name", nv.nvmlDeviceGetName, h)),
                  "uuid": self._text(self._q(notes, "uuid", nv.nvmlDeviceGetUUID, h)),
                  "bus_id": self._text(getattr(self._q(notes, "PCI info", nv.nvmlDeviceGetPciInfo, h), "busId",
                                               None)),
                  "cc": tuple(cc) if cc else None}
            self._static[i] = st
        used, total, free, reserved = self._memory(h, i)
        util = self._q(notes, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        temp = self._q(notes, "temperature", nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        power = self._q(notes, "power draw", nv.nvmlDeviceGetPowerUsage, h)
        limit = self._q(notes, "power limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
        mig_on, migs = self._mig(h, notes)
        procs, pnote = self._processes(h, i, notes)
        ecc_u = self._q(notes, "ECC counts", nv.nvmlDeviceGetTotalEccErrors, h,
                        getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), getattr(nv, "NVML_VOLATILE_ECC", 0))
        ecc_c = self._q(notes, "ECC counts", nv.nvmlDeviceGetTotalEccErrors, h,
                        getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0), getattr(nv, "NVML_VOLATILE_ECC", 0))
        retired, pending = self._retired(h, notes)
        remap = self._q(notes, "row remapping", nv.nvmlDeviceGetRemappedRows, h)
        return CardSnapshot(
            index=i, name=st["name"], uuid=st["uuid"], bus_id=st["bus_id"], used_bytes=used, total_bytes=total,
            free_bytes=free, reserved_bytes=reserved,
            util_gpu=getattr(util, "gpu", None), util_mem=getattr(util, "memory", None),
            temperature_c=temp, power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0, compute_capability=st["cc"],
            mig_enabled=mig_on, mig=migs, ecc_uncorrected=ecc_u, ecc_corrected=ecc_c, retired_pages=retired,
            retired_pending=pending, remapped_rows_pending=bool(remap[2]) if remap else None,
            processes=procs, process_note=pnote)

    def _memory(self, h: Any, i: int) -> tuple[int | None, int | None, int | None, int | None]:
        """(used, total, free, reserved) bytes; memory info v2 where the driver has it (R510+), else v1."""
        nv = self.nvml
        v2 = getattr(nv, "nvmlMemory_v2", None)
        try:
            if v2 is not None:
                try:
                    m = nv.nvmlDeviceGetMemoryInfo(h, version=v2)
                    return int(m.used), int(m.total), int(m.free), int(m.reserved)
                except _errs(nv, "FunctionNotFound", "NotSupported", "ArgumentVersionMismatch", "InvalidArgument"):
                    pass
            m = nv.nvmlDeviceGetMemoryInfo(h)
            return int(m.used), int(m.total), int(m.free), None
        except nv.NVMLError as err:
            raise NVMLQueryError(f"GPU {i}: memory query failed: {err}") from None

    def _mig(self, h: Any, notes: list[str]) -> tuple[bool | None, tuple[MigInstance, ...]]:
        nv = self.nvml
        mode = self._q(notes, None, nv.nvmlDeviceGetMigMode, h)
        if not mode:
            return None, ()
        on = bool(mode[0])
        if not on:
            return False, ()
        out = []
        for k in range(self._q(notes, None, nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mh = self._q(notes, None, nv.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
            if mh is None:
                continue  # NotFound: this slot holds no instance
            mem = self._q(notes, "MIG memory", nv.nvmlDeviceGetMemoryInfo, mh)
            out.append(MigInstance(
                gi=self._q(notes, None, nv.nvmlDeviceGetGpuInstanceId, mh),
                ci=self._q(notes, None, nv.nvmlDeviceGetComputeInstanceId, mh),
                name=self._text(self._q(notes, None, nv.nvmlDeviceGetName, mh)),
                uuid=self._text(self._q(notes, None, nv.nvmlDeviceGetUUID, mh)),
                used_bytes=int(mem.used) if mem else None, total_bytes=int(mem.total) if mem else None))
        return True, tuple(out)

    def _processes(self, h: Any, i: int, notes: list[str]) -> tuple[tuple[ProcessInfo, ...] | None, str | None]:
        nv = self.nvml
        found: dict[int, ProcessInfo] = {}
        hidden = None
        for kind, fn_name in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                              ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            try:
                plist = getattr(nv, fn_name)(h)
            except _errs(nv, "NotSupported", "NoPermission", "FunctionNotFound") as err:
                hidden = hidden or f"the driver does not report {kind} processes on GPU {i} ({err})"
                continue
            except nv.NVMLError as err:
                hidden = hidden or f"process query failed on GPU {i}: {err}"
                continue
            for p in plist:
                if p.pid in found:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                gi, ci = getattr(p, "gpuInstanceId", _NA_U32), getattr(p, "computeInstanceId", _NA_U32)
                mig = f"{gi}/{ci}" if gi not in (None, _NA_U32) else None
                info = self.procs.info(int(p.pid))
                found[int(p.pid)] = ProcessInfo(pid=int(p.pid), used_bytes=None if used is None else int(used),
                                                kind=kind, mig=mig, **info)
        if hidden and not found:
            return None, hidden
        return tuple(sorted(found.values(), key=lambda p: -(p.used_bytes or 0))), hidden

    def _retired(self, h: Any, notes: list[str]) -> tuple[int | None, bool | None]:
        nv = self.nvml
        total = None
        for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                      "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
            pages = self._q(notes, None, nv.nvmlDeviceGetRetiredPages, h, getattr(nv, cause, 0))
            if pages is not None:
                total = (total or 0) + len(pages)
        pending = self._q(notes, None, nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        return total, None if pending is None else bool(pending)

    def _q(self, notes: list[str], what: str | None, fn: Callable[..., Any], *args: Any) -> Any:
        """One metric: its value, or None when unsupported (noting why when `what` names it)."""
        nv = self.nvml
        try:
            return fn(*args)
        except _errs(nv, "FunctionNotFound"):
            if what:
                notes.append(f"{what}: the driver is too old for this query")
        except nv.NVMLError as err:
            if what:
                notes.append(f"{what}: {err}")
        return None

    @staticmethod
    def _text(v: Any) -> str | None:
        if v is None:
            return None
        return v.decode() if isinstance(v, bytes) else str(v)


def _unavailable_message(nv: Any, err: Exception) -> str:
    if isinstance(err, getattr(nv, "NVMLError_LibraryNotFound", ())):
        return ("no NVIDIA driver found (libnvidia-ml.so is missing): install the driver, or use --gpu SPEC / "
                "--from FILE")
    if isinstance(err, getattr(nv, "NVMLError_DriverNotLoaded", ())):
        return "the NVIDIA driver is not loaded (is this a GPU machine? try nvidia-smi); use --gpu SPEC / --from FILE"
    if isinstance(err, getattr(nv, "NVMLError_LibRmVersionMismatch", ())):
        return "NVML and the kernel driver disagree on the version (driver upgraded without a reboot?)"
    if isinstance(err, getattr(nv, "NVMLError_NoPermission", ())):
        return "no permission to open the NVIDIA devices (check /dev/nvidia* permissions)"
    return f"NVML failed to start: {err}"


def open_adapter() -> NvmlAdapter:
    """The real adapter; raises NVMLUnavailable with a hint when there is no driver."""
    return NvmlAdapter()


def visible_cards(snap: Snapshot, env: dict[str, str] | None = None) -> tuple[CardSnapshot, ...]:
    """The cards a CUDA program started now would see: NVML lists every card, CUDA only ``CUDA_VISIBLE_DEVICES``.

    Entries are indices or UUID prefixes (CUDA accepts both); an invalid entry hides it and every later one,
    as CUDA does. An empty value hides all cards.
    """
    env = os.environ if env is None else env
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return snap.cards
    out = []
    for item in (s.strip() for s in spec.split(",")):
        card = None
        if item.isdigit():
            card = next((c for c in snap.cards if c.index == int(item)), None)
        elif item:
            card = next((c for c in snap.cards if c.uuid and c.uuid.startswith(item)), None)
        if card is None:
            break
        out.append(card)
    return tuple(out)


def hardware_from_snapshot(snap: Snapshot, env: dict[str, str] | None = None) -> Hardware | None:
    """The `Hardware` a run launched now would get (source "nvml"), or None when no card is visible.

    Capacity is the catalog's usable GiB when the card is known (what torch reports), else NVML's total minus the
    driver-reserved memory (memory info v2), else the total. With mixed cards the smallest one decides (a run
    fails on its smallest card). `in_use_gib` is the memory already used on each visible card. A card in MIG mode
    contributes its MIG instances: each is a separate CUDA device with its own memory.
    """
    from finetune_doctor.hardware.catalog import lookup

    cards = visible_cards(snap, env)
    if not cards:
        return None
    units: list[tuple[str | None, float | None, bool | None, tuple[int, int] | None, float]] = []
    for c in cards:
        model = lookup(c.name) if c.name else None
        cc = c.compute_capability or (model.compute_capability if model else None)
        bf16 = (cc[0] >= 8) if cc else (model.bf16 if model else None)
        used = (c.used_bytes or 0) / GIB
        if c.mig_enabled and c.mig:
            for m in c.mig:
                units.append((m.name or f"{c.name} MIG", None if m.total_bytes is None else m.total_bytes / GIB,
                              bf16, cc, (m.used_bytes or 0) / GIB))
            continue
        if model is not None:
            cap = model.capacity_gib
            name = model.name
        elif c.total_bytes is not None:
            cap = (c.total_bytes - (c.reserved_bytes or 0)) / GIB
            # a tool that prints no product name (rocm-smi without --showproductname) still gives the size
            name = c.name or f"{cap:.2f} GiB card"
        else:
            cap, name = None, c.name
        units.append((name, cap, bf16, cc, used))
    smallest = min(units, key=lambda u: u[1] if u[1] is not None else float("inf"))
    names = sorted({u[0] for u in units if u[0]})
    gpu = smallest[0] if len(names) <= 1 else f"{smallest[0]} (mixed: {', '.join(names)})"
    return Hardware(gpu=gpu, num_gpus=len(units), capacity_gib=None if smallest[1] is None else round(smallest[1], 2),
                    bf16=all(u[2] for u in units) if all(u[2] is not None for u in units) else None,
                    source="nvml", compute_capability=smallest[3], nnodes=1,
                    in_use_gib=tuple(round(u[4], 2) for u in units))


def detect(adapter: GpuSource | None = None, env: dict[str, str] | None = None) -> Hardware | None:
    """The GPUs of this machine through NVML, for ``doctor check`` without ``--gpu``; None when there is no
    driver or no visible card. Never raises for a missing driver."""
    own = adapter is None
    try:
        src = adapter or open_adapter()
    except NVMLUnavailable:
        return None
    try:
        snap = src.snapshot()
    except (NVMLQueryError, NVMLUnavailable):
        return None
    finally:
        if own:
            src.close()
    return hardware_from_snapshot(snap, env)
