"""``hw``: the GPUs a run will use — from ``--gpu``, else from NVML on this machine, else unknown (None).

Fields mirror `types.Hardware`; ``capacity_gib`` is usable device memory per GPU as
``torch.cuda.get_device_properties().total_memory`` reports it (GiB).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.facts.schema import F, Namespace
from finetune_doctor.types import GIB, Hardware

NAMESPACE = Namespace("hw", __doc__.split("\n\n")[0], {
    "gpu": F("str", "card name as the catalog or NVML names it"),
    "num_gpus": F("int", "GPUs over all nodes"),
    "capacity_gib": F("float", "usable memory per GPU, GiB"),
    "bf16": F("bool", "the card computes in bf16 (Ampere and newer)"),
    "fp8": F("bool", "the card computes in fp8 (Hopper, Ada and newer; MI300 and newer)"),
    "source": F("str", "flag | nvml | env | env-card (an --env card without its number) | record | log | none"),
    "compute_capability": F("tuple", "(major, minor)"),
    "in_use_gib": F("list", "memory already used on each card by other processes, GiB"),
    "nnodes": F("int", "nodes"),
    "host_ram_gib": F("float", "host RAM per node, GiB"),
})


def local_ram_gib() -> float | None:
    """Physical RAM of this machine in GiB (POSIX sysconf), or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None


def resolve(gpu_spec: str | None, nnodes: int | None, *, allow_nvml: bool = True) -> Hardware | None:
    """`--gpu` spec, else the cards NVML sees (unless FINETUNE_DOCTOR_NO_NVML=1), else None (unknown).

    Raises InputError for a spec the catalog cannot read (hardware/catalog.py). A broken NVML driver is not an
    error: a diagnosis that needs no GPU must not stop on it.
    """
    if gpu_spec:
        from finetune_doctor.hardware.catalog import parse_gpu_spec

        return parse_gpu_spec(gpu_spec, nnodes)
    if not allow_nvml or os.environ.get("FINETUNE_DOCTOR_NO_NVML") == "1":
        return None
    from finetune_doctor.hardware.nvml import detect

    try:
        hw = detect()
    except Exception:  # noqa: BLE001 - any driver failure means "no GPU seen here"
        return None
    if hw is not None and hw.host_ram_gib is None:
        hw = replace(hw, host_ram_gib=local_ram_gib())   # NVML sees this machine: its RAM is the node's
    if hw is not None and nnodes and nnodes > 1:
        hw = replace(hw, nnodes=nnodes, num_gpus=(hw.num_gpus or 1) * nnodes)
    return hw


def from_env_report(env: Any, nnodes: int | None, visible: tuple[str, int] | None = None) -> Hardware | None:
    """The GPUs an environment report names (``llamafactory-cli env``: GPU type, number and the memory torch reports
    per card), source "env"; the catalog supplies bf16 and the compute capability. None without a GPU line.

    `visible` is (variable, count) of the launch line's ``CUDA_VISIBLE_DEVICES=0,1`` (or its Ascend/ROCm twin):
    the GPUs each node's processes see, read from the user's launch, so it gives the count an env report without
    "GPU number" lacks (trial 10 case 06: ``CUDA_VISIBLE_DEVICES=0,1`` with an env naming only "Tesla M10" was
    taken as one GPU, and FD617 then stated that the 2 ranks exceeded it). The env report's own number wins."""
    if not env.gpu_type:
        return None
    from finetune_doctor.hardware.catalog import match_card

    card = match_card(env.gpu_type, int(env.gpu_memory_gib * GIB) if env.gpu_memory_gib else None)
    from_launch = env.gpu_number is None and visible is not None and visible[1] > 0
    per_node = env.gpu_number or (visible[1] if from_launch and visible else 1)
    n = nnodes or 1
    # `llamafactory-cli env` prints "GPU number" only in newer releases: without it (and without a launch line that
    # lists the visible devices) the card is read and the count is not (source ENV_CARD_ONLY: the world size and
    # launcher stay assumptions, trial 3)
    counted = env.gpu_number is not None or from_launch
    how = (f"{per_node} x {env.gpu_type}" if env.gpu_number is not None
           else f"{env.gpu_type} x {per_node} (the number from {visible[0]} on the launch line)" if from_launch and visible
           else f"{env.gpu_type} (no GPU number in it: one assumed)")
    return Hardware(gpu=card.name if card else env.gpu_type, num_gpus=per_node * n,
                    capacity_gib=env.gpu_memory_gib or (card.capacity_gib if card else None),
                    bf16=card.bf16 if card else None, source="env" if counted else ENV_CARD_ONLY,
                    compute_capability=card.compute_capability if card else None, nnodes=n,
                    notes=(f"GPUs from {env.path}: {how}"
                           + (f", {env.gpu_memory_gib:.2f} GiB each as torch reports it" if env.gpu_memory_gib else ""),))


def launch_visible(path: str | None) -> tuple[str, int] | None:
    """(variable, count) of the devices the --launch file's (or command-line config's) environment leaves visible
    (readers/config/accelerate.py `LaunchCommand.visible_devices`); None without a file, a readable launch, or
    such a variable. A file that cannot be read is reported where the launch is read, not here."""
    if not path:
        return None
    from finetune_doctor.readers.config.accelerate import read_launch_file

    try:
        launch = read_launch_file(path)
    except InputError:
        return None
    n = launch.visible_devices()
    if n is None:
        return None
    name = next(v for v in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
                if v in launch.env)
    return name, n


def _bare_size_named(hw: Hardware, env: Any) -> Hardware:
    """A bare ``--gpu 2x8GB`` beside an --env report that names a catalogue card sold with that size: the card is
    the env's (its usable memory, bf16 and compute capability), the count the flag's. Trial 10 case 06: with
    ``--gpu 2x8GB`` and an env naming "Tesla M10", bf16 on a Maxwell card and a Triton remedy were not judged.
    Any other pair is left as the flag gives it."""
    from finetune_doctor.hardware.catalog import match_card

    if hw.source != "flag" or not str(hw.gpu or "").endswith(" card") or hw.compute_capability is not None:
        return hw
    card = match_card(env.gpu_type)
    size = re.match(r"^(\d+(?:\.\d+)?)", str(hw.gpu))
    if card is None or size is None or round(float(size.group(1))) != card.nominal_gb:
        return hw
    return replace(hw, gpu=card.name, capacity_gib=card.capacity_gib, bf16=card.bf16,
                   compute_capability=card.compute_capability, fp8=card.fp8,
                   notes=(f"--gpu {hw.gpu.removesuffix(' card')}: the {card.name} that {env.path} names, sold with "
                          f"that size ({card.capacity_gib:.2f} GiB usable)",))


ENV_CARD_ONLY = "env-card"
"""`Hardware.source` of GPUs an --env file names without their number: the card is read, the count (1) is not."""


def from_inputs(opts: Any, env_report: Any = None, *, allow_nvml: bool) -> Hardware | None:
    """The one home of the GPUs the user's inputs give, for `check`/`estimate` (facts/config.py `_hardware`) and
    `postmortem` alike: ``--gpu``, else NVML when `allow_nvml`, else the ``--env`` report (`from_env_report`). Trial 3:
    postmortem ignored the --env GPU and prescribed bf16 for a 2080 Ti that check had read. Raises InputError as
    `resolve`."""
    hw = resolve(getattr(opts, "gpu", None), getattr(opts, "nnodes", None), allow_nvml=allow_nvml)
    if hw is not None and env_report is not None and getattr(env_report, "gpu_type", None):
        hw = _bare_size_named(hw, env_report)
    if hw is None and env_report is not None:
        hw = from_env_report(env_report, getattr(opts, "nnodes", None), launch_visible(getattr(opts, "launch", None)))
    return hw


def assemble(hw: Hardware | None) -> dict[str, Any] | None:
    """The ``hw`` facts (None when no GPU is known, so that rules requiring ``hw`` are skipped)."""
    if hw is None:
        return None
    return {**hw.as_dict(), "compute_capability": hw.compute_capability, "in_use_gib": list(hw.in_use_gib),
            "nnodes": hw.nnodes, "host_ram_gib": hw.host_ram_gib, "fp8": getattr(hw, "fp8", None)}


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gib|gb|tib|tb|g|t)?\s*$", re.I)


def parse_host_ram(text: str) -> float:
    """GiB of a ``--host-ram`` size: ``744GB`` (decimal, as `free -g` and vendors print it: 693 GiB), ``693GiB``,
    ``1.5TB``; a bare number is GiB. Raises InputError naming the flag for anything else or a non-positive size."""
    m = _SIZE.match(str(text))
    # 2^20 GiB (a PiB) bounds any node: a larger figure is a typo, and the arithmetic stays finite
    if not m or float(m.group(1)) <= 0 or float(m.group(1)) > 1 << 20:
        raise InputError(f"--host-ram {text!r}: expected a size such as 744GB or 693GiB", file="<command line>")
    n, unit = float(m.group(1)), (m.group(2) or "gib").lower()
    scale = {"gib": 1.0, "g": 1.0, "gb": 1e9 / GIB, "tib": 1024.0, "t": 1024.0, "tb": 1e12 / GIB}[unit]
    return round(n * scale, 2)

