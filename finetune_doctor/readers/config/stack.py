"""The training machine's software stack and environment: installed package versions, a pasted environment report.

Two sources, read without importing any of the packages:

* **package metadata** of the environment the doctor runs in (dist-info folders, readers/dists.py): torch, transformers,
  deepspeed, peft, accelerate, liger-kernel, flash-attn, trl, bitsandbytes, datasets, llamafactory. It describes
  the training machine only when the doctor runs where training runs; facts/config.py uses it when NVML sees GPUs
  here (or ``--stack here``).
* **an environment file** (``--env FILE``): what ``llamafactory-cli env`` prints (LLaMA-Factory
  ``src/llamafactory/extras/env.py`` ``print_env``: lines ``- PyTorch version: 2.6.0+cu124 (GPU)``,
  ``- GPU type: NVIDIA A100-SXM4-80GB``, ``- GPU number: 8``, ``- GPU memory: 79.15GB`` where the memory is
  ``torch.cuda.mem_get_info()[1] / 1024**3``), what ``transformers env`` prints (``- `transformers` version: 4.46.1``,
  ``- PyTorch version (GPU?): 2.5.1+cu124 (True)``), ``pip freeze`` (``name==version``) or ``pip list`` lines, and
  shell assignments (``export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, ``NNODES=2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from finetune_doctor.readers.textfile import read_text

PACKAGES = ("torch", "transformers", "deepspeed", "peft", "accelerate", "liger-kernel", "flash-attn", "trl",
            "bitsandbytes", "datasets", "llamafactory", "unsloth")

# labels of print_env (LLaMA-Factory extras/env.py) and of transformers' `env` command, lower-cased
_LABELS = {
    "`llamafactory` version": "llamafactory", "pytorch version": "torch", "pytorch version (gpu?)": "torch",
    "pytorch version (accelerator?)": "torch", "transformers version": "transformers",
    "`transformers` version": "transformers", "datasets version": "datasets", "accelerate version": "accelerate",
    "peft version": "peft", "trl version": "trl", "deepspeed version": "deepspeed",
    "bitsandbytes version": "bitsandbytes", "accelerate` version": "accelerate", "flash-attn version": "flash-attn",
    "liger-kernel version": "liger-kernel",
}
_ITEM = re.compile(r"^\s*[-*]\s*([^:]+?)\s*:\s*(.+?)\s*$")
_FREEZE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([0-9][^\s;]*)")
_PIPLIST = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s+([0-9][0-9A-Za-z.+\-]*)\s*$")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=(['\"]?)(.*?)\2\s*$")
_VERSION = re.compile(r"^[0-9]+(?:\.[0-9A-Za-z+\-]+)*")


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def installed_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Versions of `packages` installed in this environment, from their metadata (nothing is imported;
    readers/dists.py, the one home of installed versions)."""
    from finetune_doctor.readers.dists import installed_version

    return {name: v for name in packages if (v := installed_version(name))}


@dataclass(frozen=True)
class EnvReport:
    """What an environment file says: package versions, environment variables, and the GPUs print_env saw.

    `gpu_memory_gib` is the total torch reports per card (mem_get_info), `gpu_number` the visible cards.
    """

    path: str
    versions: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    gpu_type: str | None = None
    gpu_number: int | None = None
    gpu_memory_gib: float | None = None


# `python -m torch.utils.collect_env` (torch/utils/collect_env.py, ``env_info_fmt``): "PyTorch version: 2.1.0+cu121"
# without a bullet, and the libraries as "[pip3] torch==2.1.0" / "[conda] torch 2.1.0 py3.10_cuda12.1 pytorch"
_COLLECT_LABEL = re.compile(r"^\s*(PyTorch version)\s*:\s*(.+?)\s*$")
_COLLECT_PKG = re.compile(r"^\s*\[(?:pip3?|conda)\]\s+")


def _scan(text: str) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, int]]:
    """(versions, environment variables, print_env's GPU lines, the 1-based line of each version) of an
    environment report's text (module docstring), nothing validated: `read_env_file` validates;
    `pasted_versions` reads the same lines out of a paste."""
    versions: dict[str, str] = {}
    env: dict[str, str] = {}
    gpu: dict[str, str] = {}
    where: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = _ITEM.match(line) or _COLLECT_LABEL.match(line)
        if m:
            label, value = m.group(1).strip().lower(), m.group(2).strip()
            pkg = _LABELS.get(label)
            if pkg and (v := _VERSION.match(value)):
                versions[pkg], where[pkg] = v.group(0), n
            elif label in ("gpu type", "gpu number", "gpu memory"):
                gpu[label] = value
            continue
        m = _ASSIGN.match(line)
        if m:
            env[m.group(1)] = m.group(3)
            continue
        line = _COLLECT_PKG.sub("", line)
        m = _FREEZE.match(line) or _PIPLIST.match(line) or _CONDA.match(line)
        if m and _norm(m.group(1)) in PACKAGES:
            versions[_norm(m.group(1))], where[_norm(m.group(1))] = m.group(2), n
    return versions, env, gpu, where


# `conda list` rows: name, version, build string and channel ("torch  2.1.0  py3.10_cuda12.1_cudnn8.9.2_0  pytorch")
_CONDA = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s+([0-9][0-9A-Za-z.+\-]*)\s+\S+(?:\s+\S+)?\s*$")


def pasted_versions(text: str) -> dict[str, tuple[str, int]]:
    """{package: (version, 1-based line)} of the environment-report lines inside `text` (a paste that is not an
    --env file: a bug report's `llamafactory-cli env` block, `pip list`, collect_env), read by the same lines as
    ``--env`` (`_scan`); a version the bounded parser refuses is left out rather than refused (a paste is not an
    input the user named)."""
    from finetune_doctor.numbers import parse_version

    versions, _, _, where = _scan(text)
    return {k: (v, where[k]) for k, v in versions.items() if parse_version(v) is not None}


def looks_like_env_report(path: str) -> bool:
    """Whether the file at `path` is the output of ``llamafactory-cli env`` (its ``- `llamafactory` version: ...``
    line and at least one more of its ``- Label: value`` lines) rather than a config: a paste given where the
    training YAML goes (trial 5). Reads at most 64 KiB; False for anything it cannot read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 16)
    except OSError:
        return False
    labels = [m.group(1).strip().lower() for line in text.splitlines() if (m := _ITEM.match(line))]
    return "`llamafactory` version" in labels and sum(lb in _LABELS for lb in labels) >= 2


def read_env_file(path: str) -> EnvReport:
    """Parse an environment file (module docstring). Raises InputError naming the file when it cannot be read or
    holds nothing recognisable."""
    from finetune_doctor.errors import InputError
    from finetune_doctor.numbers import bounded_int, parse_version

    text = read_text(path, "environment report")
    versions, env, gpu, where = _scan(text)
    for pkg, v in versions.items():
        # every version the run is judged by goes through the one bounded parser: a 5,000-digit version stopped
        # the model reader with Python's int-conversion limit (issue 27)
        if parse_version(v) is None:
            shown = v if len(v) <= 40 else v[:40] + f"… ({len(v)} characters)"
            raise InputError(f"`{pkg}` version {shown!r} is not a version such as 2.5.1", file=path, line=where[pkg])
    number = gpu.get("gpu number")
    mem = re.match(r"([0-9.]+)\s*G", gpu.get("gpu memory", ""))
    report = EnvReport(path=path, versions=versions, env=env, gpu_type=gpu.get("gpu type"),
                       gpu_number=bounded_int(number) if number and number.isdigit() else None,
                       gpu_memory_gib=float(mem.group(1)) if mem else None)
    if not (versions or env or report.gpu_type):
        raise InputError("no package versions, environment variables or GPU lines found (expected the output of "
                         "`llamafactory-cli env`, `pip freeze` or KEY=VALUE lines)", file=path)
    return report
