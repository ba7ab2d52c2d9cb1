"""The GPU catalog and the --gpu spec parser, checked against OOM messages that state each card's capacity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.hardware.catalog import catalog, lookup, match_card, parse_gpu_spec

ROOT = Path(__file__).resolve().parent.parent
LINES = ROOT / "fixtures" / "gpus" / "oom_capacity_lines.txt"
# both PyTorch layouts: "(GPU 5; 31.75 GiB total capacity" and "GPU 0 has a total capac(i)ty of 23.65 GiB",
# and torch_npu's "(NPU 2; 60.97 GiB total capacity"
_TOTAL = re.compile(r"(?:([\d.]+)\s*GiB total capacity|total capac[i]?ty of ([\d.]+) GiB)")


@pytest.mark.parametrize("spec, name, count, capacity", [
    ("A100-80GB", "A100-80GB", 1, 79.15),
    ("8xH100-80GB", "H100-80GB", 8, 79.11),
    ("2x4090", "RTX-4090", 2, 23.64),
    ("4xA800", "A800-80GB", 4, 79.35),
    ("V100-32GB", "V100-32GB", 1, 31.75),
    ("H200", "H200-141GB", 1, 139.81),
    ("910B", "Ascend-910B-64GB", 1, 60.97),
    ("a100_sxm4_80gb", "A100-80GB", 1, 79.15),
    ("A100-SXM4-40GB", "A100-40GB", 1, 39.39),
    ("RTX 4090", "RTX-4090", 1, 23.64),
    ("L40S", "L40S", 1, 44.39),
    ("A10G", "A10G", 1, 22.19),
    ("8 x a800 40g", "A800-40GB", 8, 39.39),
    ("H100x8", "H100-80GB", 8, 79.11),
    ("A100 80", "A100-80GB", 1, 79.15),
    ("v100", "V100-32GB", 1, 31.75),
    ("L40-45G", "L40", 1, 44.32),
])
def test_parse_gpu_spec(spec: str, name: str, count: int, capacity: float) -> None:
    hw = parse_gpu_spec(spec)
    assert (hw.gpu, hw.num_gpus, hw.capacity_gib, hw.source) == (name, count, capacity, "flag")


def test_nnodes_multiplies_the_count() -> None:
    hw = parse_gpu_spec("8xH800", nnodes=4)
    assert (hw.num_gpus, hw.nnodes, hw.gpu) == (32, 4, "H800-80GB")


@pytest.mark.parametrize("nvml_name, name", [
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB"), ("Tesla V100-SXM2-16GB", "V100-16GB"), ("Tesla T4", "T4"),
    ("NVIDIA H100 80GB HBM3", "H100-80GB"), ("NVIDIA H100 PCIe", "H100-80GB"), ("NVIDIA H100 NVL", "H100-NVL-94GB"),
    ("NVIDIA H800", "H800-80GB"), ("NVIDIA H20", "H20-96GB"), ("NVIDIA H200", "H200-141GB"),
    ("NVIDIA B200", "B200-180GB"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA RTX A6000", "RTX-A6000"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"), ("NVIDIA A800-SXM4-80GB", "A800-80GB"),
])
def test_nvml_device_names(nvml_name: str, name: str) -> None:
    g = lookup(nvml_name)
    assert g is not None and g.name == name


def test_truncated_name_is_resolved_by_framebuffer_size() -> None:
    # nvidia-smi prints "NVIDIA A100-SXM..." (no size); the framebuffer tells 40GB from 80GB
    assert match_card("NVIDIA A100-SXM...", 40960 * 2**20).name == "A100-40GB"
    assert match_card("NVIDIA A100-SXM...", 81251 * 2**20).name == "A100-80GB"
    assert match_card("NVIDIA GeForce GTX 1080", 8 * 2**30) is None


def test_unknown_model_suggests_the_nearest() -> None:
    with pytest.raises(InputError) as err:
        parse_gpu_spec("H1000")
    assert "did you mean H100-80GB" in err.value.message
    with pytest.raises(InputError) as err:
        parse_gpu_spec("A100-60GB")
    assert "A100 comes in 40GB, 80GB, not 60GB" in err.value.message
    with pytest.raises(InputError):
        parse_gpu_spec("0xA100")
    with pytest.raises(InputError):
        parse_gpu_spec("  ")


def test_capacities_match_the_oom_messages_that_state_them() -> None:
    """Every quoted OOM line's 'total capacity' is the catalog value or one it lists as seen on other drivers."""
    checked = 0
    for raw in LINES.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        name, source, line = (part.strip() for part in raw.split("|", 2))
        m = _TOTAL.search(line)
        assert m, raw
        total = float(m.group(1) or m.group(2))
        g = next(e for e in catalog() if e.name == name)
        assert total == g.capacity_gib or total in g.also_seen, (name, total, source)
        checked += 1
    assert checked >= 12


def test_every_entry_is_sourced_and_consistent() -> None:
    data = json.loads((ROOT / "finetune_doctor" / "hardware" / "gpus.json").read_text(encoding="utf-8"))
    names = [e["name"] for e in data["gpus"]]
    assert len(names) == len(set(names))
    required = {"V100-16GB", "V100-32GB", "T4", "A10", "A10G", "L4", "L40", "L40S", "RTX-A6000", "RTX-3090",
                "RTX-4090", "RTX-5090", "A100-40GB", "A100-80GB", "A800-40GB", "A800-80GB", "H100-80GB",
                "H100-NVL-94GB", "H800-80GB", "H20-96GB", "H200-141GB", "B200-180GB", "Ascend-910B-64GB"}
    assert required <= set(names)
    for g in catalog():
        assert g.confidence in ("quoted", "quoted-unattributed", "estimated"), g.name
        assert g.source, g.name
        if g.confidence == "quoted":
            assert "http" in g.source or "cases/" in g.source or "reference/" in g.source, g.name
        # the driver (and ECC) keep 0-10 % of the framebuffer: usable GiB sit just under the marketing size
        assert 0.9 < g.capacity_gib / g.nominal_gb < 1.0, g.name
        if g.compute_capability is not None:
            assert g.bf16 == (g.compute_capability >= (8, 0)), g.name
    assert next(g for g in catalog() if g.name == "Ascend-910B-64GB").bf16 is True
    # one default per family, so a size-less spec is never ambiguous
    fams: dict[str, int] = {}
    for g in catalog():
        fams[g.family] = fams.get(g.family, 0) + int(g.default)
    assert all(n == 1 for n in fams.values()), fams
