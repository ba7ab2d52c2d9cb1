"""Every training config among LLaMA-Factory's examples resolves its model with no network.

Sources: the bundled catalog, the AWQ/GPTQ names through it (quantization then unknown: no config.json here), the
LLaMA Pro output directory through fixtures/models/llama3-8b-pro (what scripts/llama_pro.py writes), and Qwen3-VL-4B
through an HF-cache layout built from fixtures/models/Qwen3-VL-4B-Instruct (its real config.json) when the catalog
has no entry for it yet.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from finetune_doctor.readers.model import hub
from finetune_doctor.readers.model.modelcfg import find_in_catalog, load_arch
from shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "models"
OWN_EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"
_SHARED = shared_dir("reference", "llamafactory", "examples")
REF_EXAMPLES = _SHARED / "reference" / "llamafactory" / "examples" if _SHARED else None   # LF's newest examples


def _example_yamls() -> list[Path]:
    """fixtures/' copy of LF's examples, and the snapshot's files that copy does not hold byte for byte: a file in
    both is one case (the same text read by the same code), run once, from fixtures/."""
    own = {p.relative_to(OWN_EXAMPLES): p.read_bytes() for p in OWN_EXAMPLES.rglob("*.yaml")}
    ref = [] if REF_EXAMPLES is None else [p for p in REF_EXAMPLES.rglob("*.yaml")
                                           if own.get(p.relative_to(REF_EXAMPLES)) != p.read_bytes()]
    return sorted([OWN_EXAMPLES / rel for rel in own] + ref)


YAMLS = _example_yamls()
QWEN3_VL_4B = 4_437_815_808  # Qwen/Qwen3-VL-4B-Instruct, hub safetensors metadata (BF16 4.44B)


@pytest.fixture()
def offline_machine(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HF_HOME", "HUGGINGFACE_HUB_CACHE", "USE_MODELSCOPE_HUB", "USE_OPENMIND_HUB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(hub, "_hf_fetch", lambda *a, **k: pytest.fail("network used"))
    if find_in_catalog("Qwen/Qwen3-VL-4B-Instruct") is None:
        snap = tmp_path / "hf" / "models--Qwen--Qwen3-VL-4B-Instruct" / "snapshots" / ("a" * 40)
        snap.mkdir(parents=True)
        shutil.copy(FIX / "Qwen3-VL-4B-Instruct" / "config.json", snap / "config.json")
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    (tmp_path / "models").mkdir()
    shutil.copytree(FIX / "llama3-8b-pro", tmp_path / "models" / "llama3-8b-pro")
    monkeypatch.chdir(tmp_path)  # llamafactory-cli runs from the repository root: models/llama3-8b-pro is there
    return tmp_path


# Models LF's newest examples name that the bundled catalogue does not hold yet (the snapshot in shared/ gained
# them after the catalogue was last extended): each needs an entry from its real config.json with the provenance
# tests/test_catalog_provenance.py demands. Until then they are known gaps, not passes: strict xfail, so an entry
# that lands makes the test say so. A user gets model-unresolved (or not-checked-here) with the --model-config hint.
# MOSS-VL stays: its hub config.json was not found, and even with it the generic decoder would not size its
# cross-attention (test_moss_vl_says_what_is_not_judged pins the one line the doctor gives instead).
NOT_IN_CATALOG = {"OpenMOSS-Team/MOSS-VL-Instruct-0708"}


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p).split("examples/")[-1] + ("" if "fixtures" in str(p) else " (ref)"))
def test_example_model_resolves_offline(path, offline_machine, request):
    cfg = yaml.safe_load(path.read_text()) or {}
    name = cfg.get("model_name_or_path")
    if not name or cfg.get("stage") is None and "train" not in str(path):
        pytest.skip("no training model in this file")
    if name in NOT_IN_CATALOG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{name} is not in the bundled catalogue yet"))
    arch, _ = load_arch(str(name), base_dir=str(path.parent), allow_download=True)
    assert arch.total_params() > 0 and arch.source_kind in ("catalog", "hf-cache", "local")
    if name.endswith(("-AWQ", "-GPTQ")):
        # no config.json here: sized as such uploads are stored (4-bit, groups of 128), marked as from the name
        assert arch.quant is not None and arch.quant.from_name
        assert (arch.quant.method, arch.quant.bits, arch.quant.group_size) == (name.rsplit("-", 1)[1].lower(), 4, 128)


def test_qwen3_vl_4b_fixture_counts_as_published(offline_machine):
    arch, _ = load_arch(str(FIX / "Qwen3-VL-4B-Instruct"))
    assert abs(arch.total_params() / QWEN3_VL_4B - 1) < 0.001
    assert arch.extra_params > 0 and arch.model_type == "qwen3_vl"


def test_qwen2_1_5b_instruct_counts_as_its_shapes(offline_machine):
    """Qwen2-1.5B-Instruct has Qwen2.5-1.5B's shapes (1536 hidden, 8960 FFN, 12/2 heads, 28 layers, 151,936 tied
    vocabulary): the same 1,543,714,304 parameters as Qwen2.5-1.5B's published safetensors count."""
    arch, _ = load_arch("Qwen/Qwen2-1.5B-Instruct", allow_download=False)
    twin, _ = load_arch("Qwen/Qwen2.5-1.5B", allow_download=False)
    assert arch.total_params() == twin.total_params() == 1_543_714_304
    assert arch.dtype == "bfloat16" and arch.source_kind == "catalog"


def test_deepseek_v3_1_folder_is_sized_as_v3_with_an_assumption(offline_machine):
    """LF's KTransformers example names /path/to/DeepSeek-V3.1-source: V3.1 keeps V3's architecture, so the folder
    is sized as V3 (671B) and the report names the model assumption."""
    assumptions: list = []
    arch, _ = load_arch("/path/to/DeepSeek-V3.1-source", allow_download=False, assumptions=assumptions)
    v3, _ = load_arch("deepseek-ai/DeepSeek-V3", allow_download=False)
    assert arch.total_params() == v3.total_params() and abs(arch.total_params() / 671e9 - 1) < 0.01
    assert [(a.name, a.value, a.source) for a in assumptions] == [("model", "deepseek-ai/DeepSeek-V3.1",
                                                                   "folder name")]
    assert "architecture of deepseek-ai/DeepSeek-V3" in arch.notes


def test_moss_vl_says_what_is_not_judged(offline_machine):
    """MOSS-VL (LF's mossvl examples) is not sized: the model-unresolved error says in one line that even its
    config.json would leave the cross-attention unjudged, and a config.json of model_type moss_vl carries that
    line as the architecture's note instead of a silent text-only count."""
    from finetune_doctor.readers.model.errors import ModelUnresolved
    from finetune_doctor.readers.model.generic import not_sized

    with pytest.raises(ModelUnresolved) as err:
        load_arch("OpenMOSS-Team/MOSS-VL-Instruct-0708", allow_download=False)
    line = not_sized(name="OpenMOSS-Team/MOSS-VL-Instruct-0708")
    assert line and "cross-attention" in line and "not judged" in line
    assert str(err.value).endswith(f"Even then: {line}") and "\n" not in str(err.value)
    assert not_sized("moss_vl") == line and not_sized("qwen2") is None and not_sized(name="Qwen/Qwen2-7B") is None
