"""Fakes of NVML for tests, benchmarks and ``--from``-less demos on machines without a GPU.

Two levels, as gpustat tests against a stubbed NVML (reference/style/anchors.md §5):

* `FakeAdapter` replays recorded snapshots (JSON fixtures under ``fixtures/gpus/``) through the same `GpuSource`
  interface as the real adapter. A fixture is one snapshot object, or ``{"samples": [...]}`` where an item may be
  ``{"raise": "GpuIsLost"}`` (that sample fails as NVML would mid-watch), or ``{"unavailable": "LibraryNotFound"}``
  at top level for a machine without a driver.
* `FakeNvmlModule` is a stand-in for the ``pynvml`` module itself, answering NVML calls from a snapshot, so the
  real `NvmlAdapter` code (error mapping, memory v2 fallback, MIG, process lists) runs without a driver.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from finetune_doctor.hardware.nvml import NVMLQueryError, NVMLUnavailable
from finetune_doctor.hardware.snapshot import Snapshot

_UNAVAILABLE = {
    "LibraryNotFound": "no NVIDIA driver found (libnvidia-ml.so is missing): install the driver, or use --gpu SPEC / "
                       "--from FILE",
    "DriverNotLoaded": "the NVIDIA driver is not loaded (is this a GPU machine? try nvidia-smi); use --gpu SPEC / "
                       "--from FILE",
}


def load_fixture(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


class FakeAdapter:
    """Replays snapshots in order; after the last one it keeps returning the last (a steady machine).

    `samples` items are `Snapshot`s, snapshot dicts, or ``{"raise": NAME}`` failures. Snapshots without a time
    get the wall clock at the moment they are taken. Raises NVMLUnavailable from the constructor for a
    fixture that says ``{"unavailable": ...}``.
    """

    def __init__(self, samples: list[Any] | dict[str, Any] | str | Path):
        if isinstance(samples, (str, Path)):
            samples = load_fixture(samples)
        if isinstance(samples, dict):
            if "unavailable" in samples:
                why = samples["unavailable"]
                raise NVMLUnavailable(_UNAVAILABLE.get(why, f"NVML failed to start: {why}"))
            samples = samples["samples"] if "samples" in samples else [samples]
        self._items = list(samples)
        self._k = 0
        self.closed = False

    def snapshot(self) -> Snapshot:
        item = self._items[min(self._k, len(self._items) - 1)]
        self._k += 1
        if isinstance(item, dict) and "raise" in item:
            raise NVMLQueryError(f"NVML error: {item['raise']}")
        snap = item if isinstance(item, Snapshot) else Snapshot.from_dict(item)
        if snap.time is None:
            snap = Snapshot(time=time.time(), host=snap.host, driver=snap.driver, cuda_driver=snap.cuda_driver,
                            cards=snap.cards, notes=snap.notes)
        return snap

    def close(self) -> None:
        self.closed = True


# -- a stand-in for the pynvml module ---------------------------------------------------------------------------
class _NVMLError(Exception):
    def __init__(self, value: int = 999, text: str = "Unknown Error"):
        super().__init__(text)
        self.value = value
        self.text = text

    def __str__(self) -> str:
        return self.text


def _err_class(name: str, value: int, text: str) -> type:
    return type(f"NVMLError_{name}", (_NVMLError,), {"__init__": lambda self: _NVMLError.__init__(self, value, text)})


class FakeNvmlModule:
    """Answers the NVML calls `NvmlAdapter` makes from one `Snapshot`, like the real bindings would.

    `unsupported` names functions that raise NotSupported on this "driver"; `missing` names functions the
    "driver" is too old for (FunctionNotFound); `init_error` makes nvmlInit fail (e.g. "LibraryNotFound");
    `lost` is a card index whose memory query raises GpuIsLost. Counts every call in `calls`.
    """

    nvmlMemory_v2 = 0x02000028
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, snap: Snapshot, unsupported: set[str] | None = None, missing: set[str] | None = None,
                 init_error: str | None = None, lost: int | None = None):
        self.NVMLError = _NVMLError
        for name, value, text in (("NotSupported", 3, "Not Supported"), ("NoPermission", 4, "Insufficient Permissions"),
                                  ("NotFound", 6, "Not Found"), ("DriverNotLoaded", 9, "Driver Not Loaded"),
                                  ("LibraryNotFound", 12, "NVML Shared Library Not Found"),
                                  ("FunctionNotFound", 13, "Function Not Found"), ("GpuIsLost", 15, "GPU is lost"),
                                  ("Unknown", 999, "Unknown Error")):
            setattr(self, f"NVMLError_{name}", _err_class(name, value, text))
        self.snap = snap
        self.unsupported = set(unsupported or ())
        self.missing = set(missing or ())
        self.init_error = init_error
        self.lost = lost
        self.calls = 0

    def _gate(self, fn: str) -> None:
        self.calls += 1
        if fn in self.missing:
            raise self.NVMLError_FunctionNotFound()
        if fn in self.unsupported:
            raise self.NVMLError_NotSupported()

    # lifecycle
    def nvmlInit(self) -> None:
        self.calls += 1
        if self.init_error:
            raise getattr(self, f"NVMLError_{self.init_error}")()

    def nvmlShutdown(self) -> None:
        self.calls += 1

    # system
    def nvmlSystemGetDriverVersion(self) -> str:
        self._gate("nvmlSystemGetDriverVersion")
        if self.snap.driver is None:
            raise self.NVMLError_NotSupported()
        return self.snap.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._gate("nvmlSystemGetCudaDriverVersion_v2")
        if not self.snap.cuda_driver:
            raise self.NVMLError_NotSupported()
        major, minor = self.snap.cuda_driver.split(".")
        return int(major) * 1000 + int(minor) * 10

    def nvmlDeviceGetCount(self) -> int:
        self._gate("nvmlDeviceGetCount")
        return len(self.snap.cards)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple[str, int]:
        self._gate("nvmlDeviceGetHandleByIndex")
        return ("gpu", i)

    # static
    def nvmlDeviceGetName(self, h: Any) -> str:
        self._gate("nvmlDeviceGetName")
        if h[0] == "mig":
            return self.snap.cards[h[1]].mig[h[2]].name
        return self.snap.cards[h[1]].name

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        self._gate("nvmlDeviceGetUUID")
        if h[0] == "mig":
            return self.snap.cards[h[1]].mig[h[2]].uuid
        return self.snap.cards[h[1]].uuid

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        self._gate("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self.snap.cards[h[1]].bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        self._gate("nvmlDeviceGetCudaComputeCapability")
        cc = self.snap.cards[h[1]].compute_capability
        if cc is None:
            raise self.NVMLError_NotSupported()
        return cc

    # dynamic
    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        self._gate("nvmlDeviceGetMemoryInfo" if version is None else "nvmlDeviceGetMemoryInfo_v2")
        if h[0] == "mig":
            m = self.snap.cards[h[1]].mig[h[2]]
            return SimpleNamespace(used=m.used_bytes, total=m.total_bytes, free=m.total_bytes - m.used_bytes)
        c = self.snap.cards[h[1]]
        if self.lost == h[1]:
            raise self.NVMLError_GpuIsLost()
        if version is not None:
            if c.reserved_bytes is None:
                raise self.NVMLError_FunctionNotFound()
            return SimpleNamespace(used=c.used_bytes, total=c.total_bytes, free=c.free_bytes,
                                   reserved=c.reserved_bytes)
        # memory info v1 counts the driver's reservation as used
        return SimpleNamespace(used=c.used_bytes + (c.reserved_bytes or 0), total=c.total_bytes, free=c.free_bytes)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        self._gate("nvmlDeviceGetUtilizationRates")
        c = self.snap.cards[h[1]]
        if c.util_gpu is None:
            raise self.NVMLError_NotSupported()
        return SimpleNamespace(gpu=c.util_gpu, memory=c.util_mem)

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        self._gate("nvmlDeviceGetTemperature")
        return self._value(self.snap.cards[h[1]].temperature_c)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._gate("nvmlDeviceGetPowerUsage")
        p = self.snap.cards[h[1]].power_w
        return self._value(None if p is None else int(round(p * 1000)))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        self._gate("nvmlDeviceGetEnforcedPowerLimit")
        p = self.snap.cards[h[1]].power_limit_w
        return self._value(None if p is None else int(round(p * 1000)))

    def nvmlDeviceGetTotalEccErrors(self, h: Any, error_type: int, counter: int) -> int:
        self._gate("nvmlDeviceGetTotalEccErrors")
        c = self.snap.cards[h[1]]
        return self._value(c.ecc_uncorrected if error_type == 1 else c.ecc_corrected)

    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        self._gate("nvmlDeviceGetRetiredPages")
        n = self.snap.cards[h[1]].retired_pages
        if n is None:
            raise self.NVMLError_NotSupported()
        # all retired pages are reported under the double-bit cause
        return list(range(n)) if cause == 1 else []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any) -> int:
        self._gate("nvmlDeviceGetRetiredPagesPendingStatus")
        v = self.snap.cards[h[1]].retired_pending
        return self._value(None if v is None else int(v))

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        self._gate("nvmlDeviceGetRemappedRows")
        v = self.snap.cards[h[1]].remapped_rows_pending
        if v is None:
            raise self.NVMLError_NotSupported()
        return (0, 0, int(v), 0)

    # MIG
    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        self._gate("nvmlDeviceGetMigMode")
        c = self.snap.cards[h[1]]
        if c.mig_enabled is None:
            raise self.NVMLError_NotSupported()
        return (int(c.mig_enabled), int(c.mig_enabled))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        self._gate("nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, k: int) -> tuple[str, int, int]:
        self._gate("nvmlDeviceGetMigDeviceHandleByIndex")
        if k >= len(self.snap.cards[h[1]].mig):
            raise self.NVMLError_NotFound()
        return ("mig", h[1], k)

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        self._gate("nvmlDeviceGetGpuInstanceId")
        return self.snap.cards[h[1]].mig[h[2]].gi

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        self._gate("nvmlDeviceGetComputeInstanceId")
        return self.snap.cards[h[1]].mig[h[2]].ci

    # processes
    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._gate("nvmlDeviceGetComputeRunningProcesses")
        return self._procs(h, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        self._gate("nvmlDeviceGetGraphicsRunningProcesses")
        return self._procs(h, "graphics")

    def _procs(self, h: Any, kind: str) -> list[Any]:
        c = self.snap.cards[h[1]]
        if c.processes is None:
            raise self.NVMLError_NoPermission()
        out = []
        for p in c.processes:
            if p.kind != kind:
                continue
            gi, ci = (int(x) for x in p.mig.split("/")) if p.mig else (0xFFFFFFFF, 0xFFFFFFFF)
            out.append(SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=gi, computeInstanceId=ci))
        return out

    def _value(self, v: Any) -> Any:
        if v is None:
            raise self.NVMLError_NotSupported()
        return v


class FakePsutil:
    """A psutil stand-in answering from the processes of a snapshot (name, cmdline, user, parent, group)."""

    class NoSuchProcess(Exception):
        pass

    def __init__(self, snap: Snapshot):
        self.table: dict[int, Any] = {}
        for c in snap.cards:
            for p in c.processes or ():
                if p.cmdline is not None:
                    self.table[p.pid] = p
        self.lookups = 0

    def getsid(self, pid: int) -> int | None:
        p = self.table.get(pid)
        return p.group if p is not None else None

    def Process(self, pid: int) -> Any:  # noqa: N802 - mirrors psutil's API
        if pid not in self.table:
            raise self.NoSuchProcess(pid)
        return _FakeProc(self, self.table[pid])


class _FakeProc:
    def __init__(self, ps: FakePsutil, p: Any):
        self._ps, self._p, self.pid = ps, p, p.pid

    def create_time(self) -> float:
        return 1.0

    def oneshot(self) -> Any:
        import contextlib

        self._ps.lookups += 1
        return contextlib.nullcontext()

    def name(self) -> str:
        return self._p.name or self._p.cmdline.split()[0]

    def cmdline(self) -> list[str]:
        return self._p.cmdline.split()

    def username(self) -> str | None:
        return self._p.user

    def ppid(self) -> int | None:
        return self._p.ppid

    def parents(self) -> list[Any]:
        # the recorded group is the launcher pid: present it as a parent whose command line is a launcher
        if self._p.group is None or self._p.group == self._p.pid:
            return []
        return [SimpleNamespace(pid=self._p.group, cmdline=lambda: ["torchrun", "--nproc_per_node", "8"])]
