"""``doctor data`` end to end on real-shaped LLaMA-Factory configs (fixtures/data/configs), and `collect` for check.

Reference numbers come from LLaMA-Factory's own preprocessing (fixtures/data/expected_lengths.json, frozen by
scripts/freeze_lf_lengths.py): kept sample counts, full lengths at cutoff 4096 (nothing truncated) and label
counts at cutoff 96. Percentiles are recomputed here from those LF lengths with the nearest-rank definition.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.analyzers.data.datascan import collect
from finetune_doctor.pipeline import data as P
from finetune_doctor.settings import Options
from test_data_fixtures import FIXTURES, build_tokenizer

CONFIGS = FIXTURES / "configs"
ROOT = FIXTURES.parent.parent
LF = {r["id"]: r for r in json.loads((FIXTURES / "expected_lengths.json").read_text())["runs"]}


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("tok")
    return {v: str(build_tokenizer(base / v, v)) for v in ("llama", "qwen")}


def opts(**kw) -> Options:
    return Options(command="data", **kw)


def codes(report) -> list[str]:
    return sorted(f.code for f in report.findings)


def nearest_rank(values: list[int], p: float) -> int:
    v = sorted(values)
    return v[max(1, math.ceil(p / 100 * len(v))) - 1]


def test_sft_statistics_match_llamafactory(tok):
    rep = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(), cwd=str(ROOT))
    d = rep.sections["data"]
    assert not d["approximate"] and d["processor"] == "supervised" and d["cutoff_len"] == 96
    names = ["alpaca_demo", "sharegpt_tools", "chat_roles"]
    full = {n: [s[0] for s in LF[f"sft-qwen-{n}-4096"]["samples"]] for n in names}
    for entry in d["datasets"]:
        n = entry["name"]
        assert entry["samples"] == len(LF[f"sft-qwen-{n}-96"]["samples"])
        assert entry["truncated"] == sum(x > 96 for x in full[n])
        assert entry["total"]["max"] == max(full[n])
    allv = [x for n in names for x in full[n]]
    ov = d["overall"]
    assert [ov["total"][k] for k in ("p50", "p90", "p99", "max")] == [nearest_rank(allv, p) for p in (50, 90, 99, 100)]
    # after truncation every kept sample has LF's length at cutoff 96
    assert ov["after_cutoff"]["max"] == max(s[0] for n in names for s in LF[f"sft-qwen-{n}-96"]["samples"])
    # worst micro-batch: 2 rows padded to the longest kept sample (96, already a multiple of 8)
    assert d["worst_micro_batch"]["tokens"] == 2 * 96 == d["worst_micro_batch_tokens"]
    (f,) = rep.findings
    assert f.code == "FD401" and f.location.key == "cutoff_len" and f.location.line == 16
    assert f"{ov['truncated']} of {ov['samples']} samples" in f.message
    assert f.fix.edits[0].value == d["cutoff_for_p99"] == math.ceil(nearest_rank(allv, 99) / 128) * 128


def test_eos_loss_matches_llamafactory_labels(tok, tmp_path):
    """Single-turn qwen rows: the response ends "<|im_end|>" "\\n"; LF's label counts at 4096 (whole target t)
    and at 96 (kept target) say how much was cut; more than the one-token tail means the EOS is gone."""
    cfg = {"model_name_or_path": tok["qwen"], "dataset": "alpaca_lines", "dataset_dir": str(FIXTURES),
           "template": "qwen", "cutoff_len": 96}
    d = collect(cfg, str(tmp_path / "x.yaml"), strict=True)
    whole = [s[1] for s in LF["sft-qwen-alpaca_lines-4096"]["samples"]]
    kept = [s[1] for s in LF["sft-qwen-alpaca_lines-96"]["samples"]]
    assert d["template"]["eos_tail_tokens"] == 1
    assert d["datasets"][0]["eos_lost"] == sum(w - k > 1 for w, k in zip(whole, kept)) > 0


def test_dpo_pairs_and_worst_batch(tok):
    rep = P.run(str(CONFIGS / "llama3_lora_dpo.yaml"), [f"model_name_or_path={tok['llama']}"], opts(), cwd=str(ROOT))
    d = rep.sections["data"]
    assert d["processor"] == "pairwise"
    longest = max(max(s[0], s[1]) for n in ("dpo_pairs", "alpaca_dpo") for s in LF[f"rm-llama3-{n}-64"]["samples"])
    w = d["worst_micro_batch"]
    assert (w["rows"], w["seq_len"]) == (2, (longest + 7) // 8 * 8)  # chosen + rejected rows of one pair
    assert "FD401" in codes(rep)


def test_pretraining_blocks_match_llamafactory(tok):
    rep = P.run(str(CONFIGS / "qwen_pretrain.yaml"),
                [f"model_name_or_path={tok['qwen']}", "preprocessing_batch_size=7", "dataset=pretrain_docs"],
                opts(), cwd=str(ROOT))
    d = rep.sections["data"]
    assert d["processor"] == "pretrain_packed" and d["effective_cutoff"] == 64  # LF does not subtract 1 for pt
    assert d["packing_stats"]["blocks"] == len(LF["pt-qwen-pretrain_docs-64-pack"]["samples"])
    assert d["worst_micro_batch"]["tokens"] == 4 * 64


def test_packing_wasteful_cutoff(tok):
    rep = P.run(str(CONFIGS / "qwen_packing_wasteful.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(),
                cwd=str(ROOT))
    d = rep.sections["data"]
    assert d["effective_cutoff"] == 4095 and d["packing_stats"]["row_len"] == 4096
    assert codes(rep) == ["FD403"]
    # without packing the same cutoff costs nothing at run time: the rule stays silent
    rep = P.run(str(CONFIGS / "qwen_packing_wasteful.yaml"), [f"model_name_or_path={tok['qwen']}", "packing=false"],
                opts(), cwd=str(ROOT))
    assert codes(rep) == []


def test_broken_data_is_reported_not_raised(tok):
    rep = P.run(str(CONFIGS / "broken_data.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(), cwd=str(ROOT))
    d = rep.sections["data"]
    assert d["partial"]
    st = {e["name"]: e["status"] for e in d["datasets"]}
    assert st == {"malformed_lines": "partial", "wrong_roles": "ok", "alpaca_badmap": "empty", "empty_set": "empty",
                  "missing_file": "unavailable", "alpaca_en": "unavailable", "alpaca_demo": "ok"}
    by = {}
    for f in rep.findings:
        by.setdefault(f.code, []).append(f)
    # FD408 (alpaca_badmap: rows, none valid), FD412 (missing_file: LF raises 'File ... not found'), FD415
    # (empty_set holds [], on which datasets fails), FD409 (alpaca_en: a hub dataset not cached)
    assert set(by) == {"FD404", "FD405", "FD406", "FD408", "FD409", "FD412", "FD415"}
    assert [f.message for f in by["FD412"]] == [f"Dataset missing_file: file {FIXTURES / 'does_not_exist.json'} not "
                                                "found (LLaMA-Factory: 'File " + str(FIXTURES / 'does_not_exist.json')
                                                + " not found.')."]
    assert by["FD415"][0].location.file.endswith("empty.json") and "corresponds to no data" in by["FD415"][0].message
    # malformed rows: file:line of the first one, the scan went on (3 good rows kept)
    mal = sorted((f.location.line, f.message) for f in by["FD404"])
    assert mal[0][0] == 2 and "malformed JSON" in mal[0][1] and by["FD404"][0].location.file.endswith("malformed.jsonl")
    assert next(e for e in d["datasets"] if e["name"] == "malformed_lines")["samples"] == 3
    # the mapping that points nowhere: at its dataset_info.json entry
    assert all(f.location.file.endswith("dataset_info.json") for f in by["FD405"])
    assert any("'question'" in f.message for f in by["FD405"])
    # wrong role order: counted, located, LF's own wording of the reason
    assert any("wrong_roles.json" in f.location.file and "role 'gpt'" in f.message for f in by["FD406"])
    assert any("not available offline" in f.message for f in by["FD409"])


def test_no_tokenizer_means_approximate(tmp_path):
    rep = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), ["model_name_or_path=/nonexistent/model"], opts(),
                cwd=str(ROOT))
    d = rep.sections["data"]
    assert d["approximate"] and d["tokenizer"]["kind"] == "approximate" and "not found" in d["tokenizer"]["reason"]
    assert any("approximate" in n for n in rep.notes)
    assert any("approximate counts" in f.message for f in rep.findings if f.code == "FD401")


def test_bad_configs_raise_input_errors(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("stage: sft\ntemplate: qwen\n")
    with pytest.raises(InputError, match="names no dataset"):
        P.run(str(cfg), [], opts())
    cfg.write_text(f"dataset: nope\ndataset_dir: {FIXTURES}\n")
    with pytest.raises(InputError, match="not defined") as e:
        P.run(str(cfg), [], opts())
    assert e.value.file.endswith("dataset_info.json")
    # for doctor check: no local dataset_info.json means the data is not local → no data facts
    assert collect({"dataset": "alpaca_en", "dataset_dir": str(tmp_path / "data")}, str(cfg)) is None
    assert collect({"stage": "sft"}, str(cfg)) is None
    bad = tmp_path / "d"
    bad.mkdir()
    (bad / "dataset_info.json").write_text("{ broken")
    facts = collect({"dataset": "x", "dataset_dir": str(bad)}, str(cfg))
    assert facts["error"] and facts["problems"][0]["fatal"]


def test_unknown_template(tok):
    rep = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), [f"model_name_or_path={tok['qwen']}", "template=qwen2.5"],
                opts(), cwd=str(ROOT))
    assert "FD411" in codes(rep)
    assert rep.sections["data"]["template"]["name"] == "empty"


def test_section_renders_table_and_histogram(tok):
    from rich.console import Console

    from finetune_doctor.reporters.sections.data import render

    rep = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(), cwd=str(ROOT))
    con = Console(record=True, width=120)
    con.print(render(rep.sections["data"]))
    text = con.export_text()
    for s in ("alpaca_demo", "sharegpt_tools", "chat_roles", "p99", "Worst micro-batch: 2 × 96 = 192", "█",
              "alpaca_demo.json:"):
        assert s in text, s
    hist = rep.sections["data"]["overall"]["histogram"]
    assert sum(hist["counts"]) == rep.sections["data"]["overall"]["samples"]


def test_cli_json(tok):
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    import os

    old = os.getcwd()
    os.chdir(ROOT)
    try:
        res = CliRunner().invoke(main, ["data", str(CONFIGS / "qwen_lora_sft.yaml"),
                                        f"model_name_or_path={tok['qwen']}", "--format", "json", "--fail-on",
                                        "warning"])
    finally:
        os.chdir(old)
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["command"] == "data" and out["findings"][0]["code"] == "FD401"
    assert out["data"]["overall"]["samples"] == 20


def test_progress_bars_do_not_change_the_result(tok, capsys):
    from finetune_doctor.reporters.sections.data import ScanProgress

    bars = ScanProgress()
    bars.start()
    try:
        a = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(), cwd=str(ROOT),
                  progress=bars.update)
    finally:
        bars.stop()
    b = P.run(str(CONFIGS / "qwen_lora_sft.yaml"), [f"model_name_or_path={tok['qwen']}"], opts(), cwd=str(ROOT),
              progress=None)
    strip = lambda d: {k: v for k, v in d.items() if k != "elapsed_s"}  # noqa: E731
    assert strip(a.sections["data"]) == strip(b.sections["data"])
    assert capsys.readouterr().out == ""  # bars go to stderr only


def test_bad_cutoff_and_broken_tokenizer(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"dataset: alpaca_lines\ndataset_dir: {FIXTURES}\ncutoff_len: lots\n")
    with pytest.raises(InputError, match="cutoff_len must be an integer from 1"):
        P.run(str(cfg), [], opts())
    # check: the scan does not run, and says why (the value), not that the data is missing; the config rules judge it
    d = collect({"dataset": "alpaca_lines", "dataset_dir": str(FIXTURES), "cutoff_len": "lots"}, str(cfg))
    assert d["error"] == "data not scanned: cutoff_len must be an integer from 1 to 2^63 - 1, not 'lots'"
    assert d["problems"] == [] and d["datasets"] == []
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    d = collect({"dataset": "alpaca_lines", "dataset_dir": str(FIXTURES), "model_name_or_path": str(broken),
                   "template": "qwen"}, str(cfg), strict=True)
    assert d["approximate"] and "could not be loaded" in d["tokenizer"]["reason"]
