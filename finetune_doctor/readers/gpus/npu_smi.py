"""Huawei's ``npu-smi info`` table (Ascend 910B/910C), pasted or saved.

Layout (as printed by npu-smi 23.x-25.x, e.g. https://github.com/vllm-project/vllm-ascend/issues/1130 for 910B3,
https://github.com/vllm-project/vllm-ascend/issues/4284 for 910B2, and the Atlas A3 (910C) layout with a "Chip
Phy-ID" column in https://github.com/vllm-project/vllm-ascend/issues/2534)::

    | npu-smi 25.2.0                   Version: 25.2.0                                               |
    | NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    | 0     910B3               | OK            | 97.5        41                0    / 0             |
    | 0                         | 0000:C1:00.0  | 0           0    / 0          3379 / 65536         |
    ...
    | NPU     Chip              | Process id    | Process name       | Process memory(MB)    | ...
    | 0       0                 | 632268        | python3.1          | 197                   | NA

Each (NPU, chip) pair is one torch_npu device: on 910B one chip per NPU (device = NPU id), on the A3's 910C two
chips per NPU, numbered by Phy-ID. HBM-Usage is the device memory (npu-smi's "MB" is MiB: 65536 on a 64 GB 910B);
Memory-Usage is the board's DDR and is not used. A new ``npu-smi ... Version:`` header starts the next sample.
"""

from __future__ import annotations

import re
from typing import Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, ProcessInfo, Snapshot
from finetune_doctor.readers.gpus.gpu_input import GpuSource


_HEADER = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_ROW1 = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|\s*(\S+)\s+(\d+|-|NA)\s+(\d+)\s*/\s*(\d+)\s*\|\s*$")
_ROW2 = re.compile(r"^\|\s*(\d+)(?:\s+(\d+))?\s*\|\s*([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*\|"
                   r"\s*(\d+|-|NA)\s+(\d+)\s*/\s*(\d+)\s+(\d+)\s*/\s*(\d+)\s*\|\s*$")
_PROC = re.compile(r"^\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s*\|\s*(.*?)\s*\|\s*(\d+)\s*\|")
_NO_PROC = re.compile(r"No running processes found in NPU (\d+)")
_MAX_MIB = 1 << 30


def read(stream: GpuSource) -> Iterator[Snapshot]:
    """One `Snapshot` per npu-smi table in the stream."""
    path, host = stream.path, stream.host
    state = _Table(path, host, 1)
    found = False
    for raw in stream.input.lines():
        ln = raw.rstrip("\r\n")
        no = stream.input.lineno
        m = _HEADER.search(ln)
        if m:
            if state.devices:
                found = True
                yield state.snapshot()
            state = _Table(path, host, no, driver=m.group(2))
            continue
        state.feed(ln, no)
    if state.devices:
        found = True
        yield state.snapshot()
    if not found:
        raise InputError("no NPU rows found in this npu-smi table", file=path, line=1)


class _Table:
    def __init__(self, path: str, host: str, line: int, driver: str | None = None):
        self.path, self.host, self.line, self.driver = path, host, line, driver
        self.devices: dict[tuple[int, int], dict] = {}
        self.pending: dict | None = None
        self.procs: dict[tuple[int, int], list[ProcessInfo]] = {}
        self.proc_table = False
        self.two_ids = False

    def feed(self, ln: str, no: int) -> None:
        if re.match(r"^\|\s*NPU\s+Chip\s*\|\s*Process id", ln):
            self.proc_table = True
            return
        if re.match(r"^\|\s*Chip\s+Phy-ID", ln):
            self.two_ids = True
            return
        if self.proc_table:
            m = _PROC.match(ln)
            if m:
                mem = self._mib(m.group(5), no)
                self.procs.setdefault((int(m.group(1)), int(m.group(2))), []).append(
                    ProcessInfo(pid=int(m.group(3)), used_bytes=mem * MIB, name=m.group(4) or None))
            return
        m = _ROW1.match(ln)
        if m:
            self.pending = {"npu": int(m.group(1)), "name": m.group(2), "health": m.group(3),
                            "power": None if m.group(4) in ("-", "NA") else _float(m.group(4)),
                            "temp": None if m.group(5) in ("-", "NA") else int(m.group(5)), "line": no}
            return
        m = _ROW2.match(ln)
        if m and self.pending is not None:
            chip = int(m.group(1))
            phy = int(m.group(2)) if m.group(2) is not None else None
            d = dict(self.pending, chip=chip, phy=phy, bus=m.group(3),
                     util=None if m.group(4) in ("-", "NA") else min(100, int(m.group(4))),
                     used=self._mib(m.group(7), no) * MIB, total=self._mib(m.group(8), no) * MIB)
            self.devices[(d["npu"], chip)] = d
            self.pending = None

    def _mib(self, text: str, no: int) -> int:
        v = int(text[:12]) if len(text) <= 12 else _MAX_MIB + 1
        if v > _MAX_MIB:
            raise InputError(f"npu-smi value {text[:20]} MB is out of range", file=self.path, line=no)
        return v

    def snapshot(self) -> Snapshot:
        chips_per_npu = max(sum(1 for k in self.devices if k[0] == npu) for npu, _ in self.devices)
        cards = []
        for (npu, chip), d in sorted(self.devices.items()):
            idx = d["phy"] if d["phy"] is not None else (npu if chips_per_npu == 1 else npu * chips_per_npu + chip)
            name = d["name"]
            if chips_per_npu > 1 and re.fullmatch(r"Ascend910", name, re.I):
                # the A3's chips print as plain "Ascend910"; two chips per NPU is the 910C package
                name = "Ascend 910C"
            cards.append(CardSnapshot(
                index=idx, name=name, bus_id=d["bus"], used_bytes=d["used"], total_bytes=d["total"],
                free_bytes=max(0, d["total"] - d["used"]), util_gpu=d["util"], temperature_c=d["temp"],
                power_w=d["power"], processes=tuple(self.procs.get((npu, chip), ())) if self.proc_table else None,
                process_note=None if self.proc_table else "the pasted npu-smi table has no process section",
                line=d["line"]))
        return Snapshot(time=None, host=self.host, driver=self.driver, cards=tuple(cards), source=self.path,
                        line=self.line)


def _float(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if 0 <= v < 1e6 else None
