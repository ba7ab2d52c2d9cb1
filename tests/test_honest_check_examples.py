"""Issue 21, "Done when": a check with no network, no data, no model folder and no version given returns a verdict
on every config whose model is in the catalogue, with the assumptions that move it listed first.

Every YAML under LLaMA-Factory's examples/ (the 30 vendored in fixtures/, and the snapshot's 95 where
shared/reference is present) is checked as a user would run it away from the training machine: HF_HUB_OFFLINE=1,
an empty working directory, --gpu A100 and nothing else. The ones without a verdict are exactly the named ones,
each for a reason the report states (benchmarks/results/honest_check_speed.md lists them with the wall times):
- accelerate configs and a special-token description file: not run configs (exit 2, one line saying what to do);
- MOSS-VL (OpenMOSS-Team/MOSS-VL-Instruct-0708): not in the catalogue (tests/test_lf_examples_models.py);
(models/llama3-8b-pro, the folder LLaMA Pro's expansion writes, gets one: it is sized as Llama-3-8B plus the blocks
LLaMA Pro adds, an assumption the report names: tests/test_llama_pro_expansion.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.model.byname import checkpoint_parent
from shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "llamafactory" / "examples"
_PLACE = shared_dir("reference", "llamafactory", "examples")
SHARED = None if _PLACE is None else _PLACE / "reference" / "llamafactory" / "examples"

NOT_RUN_CONFIGS = ("accelerate/", "extras/multi_tokens/tokens_cfg.yaml")
NO_ENTRY = {"mossvl": "OpenMOSS-Team/MOSS-VL-Instruct-0708"}


def _verdict(rep: dict) -> str | None:
    mem = rep.get("memory") or {}
    if mem.get("verdict"):
        return mem["verdict"]
    for kind in ("export", "chat", "predict"):
        sec = rep.get(kind) or {}
        if sec.get("verdict"):
            return sec["verdict"]
        if sec.get("fits") is not None:
            return "fits" if sec["fits"] else "oom"
    return None


def _check_all(folder: Path, tmp_path: Path, monkeypatch) -> dict[str, tuple[int, dict]]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    out = {}
    for cfg in sorted(folder.rglob("*.yaml")):
        r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100", "--format", "json"])
        out[cfg.relative_to(folder).as_posix()] = (r.exit_code, json.loads(r.stdout) if r.exit_code in (0, 1) else {})
    return out


def _judge(results: dict[str, tuple[int, dict]]) -> None:
    for rel, (code, rep) in results.items():
        if any(rel.startswith(p) or "/" + p in "/" + rel for p in NOT_RUN_CONFIGS):
            assert code == 2, rel
            continue
        no_entry = next((m for k, m in NO_ENTRY.items() if k in rel), None)
        if no_entry:
            assert _verdict(rep) is None, rel
            assert any("not known here" in n and no_entry in n for n in rep["notes"]), rel
            continue
        assert code in (0, 1) and _verdict(rep) in ("fits", "at-risk", "oom"), (rel, code, rep.get("notes"))
        flags = [a["moves_verdict"] for a in rep["assumptions"]]
        assert flags == sorted(flags, reverse=True), rel          # the verdict-moving ones first
        if _verdict(rep) == "at-risk":
            assert any(flags), rel                                # an at-risk names what it hangs on


def test_every_vendored_lf_example_gets_a_verdict_or_a_stated_reason(tmp_path, monkeypatch):
    results = _check_all(FIXTURES, tmp_path, monkeypatch)
    assert len(results) == 30
    _judge(results)
    # the merge on the CPU: no host RAM given is a verdict now, not none (facts/kinds.py _host_ram_verdict)
    code, rep = results["merge_lora/qwen3_lora_sft.yaml"]
    assert rep["export"]["verdict"] == "at-risk" and rep["assumptions"][0]["name"] == "host-ram"


@pytest.mark.slow
@pytest.mark.skipif(SHARED is None, reason="no ../shared/reference/llamafactory/examples (the LF snapshot)")
def test_every_lf_snapshot_example_gets_a_verdict_or_a_stated_reason(tmp_path, monkeypatch):
    results = _check_all(SHARED, tmp_path, monkeypatch)
    assert len(results) >= 95
    _judge(results)
    # a full fine-tune's output folder, loaded back by the inference and merge examples, is sized as its parent
    for rel in ("inference/qwen3_full_sft.yaml", "merge_lora/qwen3_full_sft.yaml"):
        rep = results[rel][1]
        assert _verdict(rep) is not None, rel
        assert {"name": "model", "value": "Qwen/Qwen3-4B"}.items() <= next(
            a for a in rep["assumptions"] if a["name"] == "model").items()


def test_lf_output_layout_is_a_folder_a_run_writes():
    """LF's examples write full and freeze runs to saves/<model>/<finetuning_type>/<stage>: a whole model whose
    architecture is its parent's. A lora run's folder holds an adapter, which is no model."""
    assert checkpoint_parent("saves/qwen3-4b/full/sft") == ("saves/qwen3-4b", "full/sft")
    assert checkpoint_parent("/data/saves/Qwen2.5-7B/freeze/dpo/checkpoint-500") == ("/data/saves/Qwen2.5-7B",
                                                                                      "freeze/dpo/checkpoint-500")
    assert checkpoint_parent("saves/qwen3-4b/lora/sft") is None
    assert checkpoint_parent("full/sft") is None
