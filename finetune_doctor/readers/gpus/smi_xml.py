"""``nvidia-smi -q -x`` XML (and ``nvidia-smi -q -x -l N``, which prints one document per interval).

Elements read, by the names of NVIDIA's nvsmi_device_v10-v12 DTDs (as in the documents pasted in
https://github.com/TheTumultuousUnicornOfDarkness/CPU-X/issues/115 and https://github.com/wookayin/gpustat/issues/18):
``timestamp``, ``driver_version``, ``cuda_version``, and per ``gpu``: ``product_name``, ``uuid``,
``pci/pci_bus_id``, ``fb_memory_usage/{total,reserved,used,free}`` ("81920 MiB"), ``utilization/{gpu_util,
memory_util}`` ("12 %"), ``temperature/gpu_temp`` ("34 C"), ``power_readings`` (before R530) or
``gpu_power_readings`` (R530+) ``/{power_draw, power_limit|current_power_limit}`` ("300.12 W"),
``mig_mode/current_mig``, ``ecc_errors/volatile/{dram_uncorrectable|double_bit/total}``, and ``processes/
process_info/{gpu_instance_id, compute_instance_id, pid, type, process_name, used_memory}``. "N/A" reads as None.
Cards are numbered in document order, as nvidia-smi numbers them.

The stdlib parser (expat 2.4+ refuses entity-expansion bombs; no external entity or DTD is fetched) is fed a line
at a time and each ``gpu`` element is dropped once read, so a long ``-l`` log streams.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Iterator

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.snapshot import MIB, CardSnapshot, ProcessInfo, Snapshot
from finetune_doctor.readers.gpus.gpu_input import GpuSource


_UNIT = {"B": 1, "KIB": 1 << 10, "MIB": MIB, "GIB": 1 << 30}
_MAX = 1 << 53


def read(stream: GpuSource) -> Iterator[Snapshot]:
    """One `Snapshot` per ``nvidia_smi_log`` document in the stream."""
    doc: _Doc | None = None
    found = False
    for raw in stream.input.lines():
        no = stream.input.lineno
        if raw.lstrip().startswith("<?xml") and doc is not None and doc.started:
            snap = doc.finish()
            if snap is not None:
                found = True
                yield snap
            doc = None
        if doc is None:
            doc = _Doc(stream.path, stream.host, no)
        snap = doc.feed(raw, no)
        if snap is not None:
            found = True
            yield snap
            doc = None
    if doc is not None and doc.started:
        snap = doc.finish()
        if snap is not None:
            found = True
            yield snap
    if not found:
        raise InputError("no <gpu> element found in this nvidia-smi XML", file=stream.path, line=1)


class _Doc:
    def __init__(self, path: str, host: str, line: int):
        self.path, self.host, self.line = path, host, line
        self.parser = ET.XMLPullParser(events=("start", "end"))
        self.cards: list[CardSnapshot] = []
        self.meta: dict[str, str | None] = {}
        self.started = False
        self.gpu_line = line
        self.depth = 0

    def feed(self, raw: str, no: int) -> Snapshot | None:
        if raw.strip():
            self.started = True
        try:
            self.parser.feed(raw)
            events = list(self.parser.read_events())
        except ET.ParseError as exc:
            raise InputError(f"malformed XML: {exc}", file=self.path, line=no) from None
        for event, el in events:
            if event == "start":
                self.depth += 1
                if el.tag == "gpu":
                    self.gpu_line = no
                continue
            self.depth -= 1
            if el.tag in ("timestamp", "driver_version", "cuda_version") and self.depth == 1:
                self.meta[el.tag] = (el.text or "").strip() or None
            elif el.tag == "gpu":
                self.cards.append(self._card(el, len(self.cards), self.gpu_line))
                el.clear()
            elif el.tag == "nvidia_smi_log":
                return self._snapshot()
        return None

    def finish(self) -> Snapshot | None:
        try:
            self.parser.close()
        except ET.ParseError:
            pass   # a log cut off mid-document: keep the cards already read
        return self._snapshot() if self.cards else None

    def _snapshot(self) -> Snapshot:
        return Snapshot(time=_ctime(self.meta.get("timestamp")), host=self.host, driver=self.meta.get("driver_version"),
                        cuda_driver=self.meta.get("cuda_version"), cards=tuple(self.cards), source=self.path,
                        line=self.line)

    def _num(self, el: ET.Element, path: str, line: int, scale_default: int = 1) -> float | None:
        text = el.findtext(path)
        if text is None:
            return None
        text = text.strip()
        if not text or text.upper().startswith(("N/A", "[N/A", "NOT SUPPORTED", "[NOT SUPPORTED", "UNKNOWN")):
            return None
        m = re.match(r"^(\d{1,20}(?:\.\d{1,20})?)\s*([A-Za-z%]*)$", text)
        if not m:
            raise InputError(f"<{path}>: cannot read {text[:40]!r} as a number", file=self.path, line=line)
        v = float(m.group(1)) * _UNIT.get(m.group(2).upper(), scale_default)
        if v > _MAX:
            raise InputError(f"<{path}>: {text[:40]!r} is out of range", file=self.path, line=line)
        return v

    def _card(self, el: ET.Element, idx: int, line: int) -> CardSnapshot:
        n = self._num
        total = n(el, "fb_memory_usage/total", line, MIB)
        used = n(el, "fb_memory_usage/used", line, MIB)
        free = n(el, "fb_memory_usage/free", line, MIB)
        reserved = n(el, "fb_memory_usage/reserved", line, MIB)
        power_el = el.find("gpu_power_readings")
        if power_el is None:
            power_el = el.find("power_readings")
        draw = limit = None
        if power_el is not None:
            draw = n(power_el, "power_draw", line) or n(power_el, "instant_power_draw", line)
            limit = n(power_el, "current_power_limit", line) or n(power_el, "power_limit", line)
        util = n(el, "utilization/gpu_util", line)
        util_mem = n(el, "utilization/memory_util", line)
        temp = n(el, "temperature/gpu_temp", line)
        ecc = n(el, "ecc_errors/volatile/dram_uncorrectable", line)
        if ecc is None:
            ecc = n(el, "ecc_errors/volatile/double_bit/total", line)
        mig = (el.findtext("mig_mode/current_mig") or "").strip().lower()
        procs_el = el.find("processes")
        procs = None
        if procs_el is not None:
            procs = tuple(self._process(p, line) for p in procs_el.findall("process_info"))
        return CardSnapshot(
            index=idx, name=(el.findtext("product_name") or "").strip() or None,
            uuid=(el.findtext("uuid") or "").strip() or None,
            bus_id=(el.findtext("pci/pci_bus_id") or el.get("id") or "").strip() or None,
            used_bytes=_i(used), total_bytes=_i(total), free_bytes=_i(free), reserved_bytes=_i(reserved),
            util_gpu=_i(util), util_mem=_i(util_mem), temperature_c=_i(temp), power_w=draw, power_limit_w=limit,
            mig_enabled=True if mig == "enabled" else False if mig == "disabled" else None,
            ecc_uncorrected=_i(ecc), processes=procs,
            process_note=None if procs is not None else "the XML has no processes element", line=line)

    def _process(self, p: ET.Element, line: int) -> ProcessInfo:
        pid = self._num(p, "pid", line)
        if pid is None:
            raise InputError("<process_info> without a pid", file=self.path, line=line)
        gi = (p.findtext("gpu_instance_id") or "").strip()
        ci = (p.findtext("compute_instance_id") or "").strip()
        kind = (p.findtext("type") or "C").strip()
        return ProcessInfo(pid=int(pid), used_bytes=_i(self._num(p, "used_memory", line, MIB)),
                           name=(p.findtext("process_name") or "").strip() or None,
                           kind="graphics" if kind == "G" else "compute",
                           mig=f"{gi}/{ci}" if gi and gi.upper() != "N/A" else None)


def _i(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _ctime(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.strptime(re.sub(r"\s+", " ", s), "%a %b %d %H:%M:%S %Y").timestamp()
    except ValueError:
        return None
