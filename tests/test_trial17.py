"""New-user trial 17 (benchmarks/results/trial17.md): the llamafactory installed on this machine is recorded as an
assumption, never silently taken as the training machine's release; a modded card is named as ``<card>-<N>GB``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config import lfrelease
from finetune_doctor.readers.config.lfrelease import INSTALLED_HERE_NOTE

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "trial17"
K4 = FIX / "k4_qwen25vl_full_cut.yaml"


def _invoke(*args: str):
    r = CliRunner().invoke(main, [*args, "--offline"])
    assert r.exit_code in (0, 1), r.output
    return r


def _lf(report: dict) -> dict:
    return next(a for a in report["assumptions"] if a["name"] == "lf-version")


def test_installed_llamafactory_is_an_assumption_that_says_where_it_came_from(monkeypatch):
    """Trial 17, trip 1: with the README's test oracle llamafactory 0.9.5 in the venv, `check` judged k4's keys
    against 0.9.5 (FD001 error) and listed `lf-version: 0.9.5` with no word of its origin."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: "0.9.5")
    d = json.loads(_invoke("check", str(K4), "--gpu", "4xA6000", "--format", "json").stdout)
    lf = _lf(d)
    assert lf["value"] == f"0.9.5 ({INSTALLED_HERE_NOTE})"
    assert "taken as the training machine's" in lf["source"] and lf["resolve_with"].startswith("--llamafactory")
    text = _invoke("check", str(K4), "--gpu", "4xA6000").stdout
    assert "lf-version: 0.9.5 (read from the LLaMA-Factory installed here" in " ".join(text.split())
    assert "if training runs elsewhere, pass --llamafactory" in " ".join(text.split())


def test_a_stated_release_carries_no_installed_here_note(monkeypatch):
    monkeypatch.setattr(lfrelease, "installed_version", lambda: "0.9.5")
    d = json.loads(_invoke("check", str(K4), "--gpu", "4xA6000", "--llamafactory", "0.9.2",
                           "--format", "json").stdout)
    # a release the user states is read, not assumed: no lf-version assumption at all
    assert not [a for a in d["assumptions"] if a["name"] == "lf-version"]


def test_lint_says_it_too(monkeypatch):
    monkeypatch.setattr(lfrelease, "installed_version", lambda: "0.9.5")
    d = json.loads(_invoke("lint", str(K4), "--format", "json").stdout)
    assert _lf(d)["value"] == f"0.9.5 ({INSTALLED_HERE_NOTE})"
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    d = json.loads(_invoke("lint", str(K4), "--format", "json").stdout)
    assert "installed here" not in _lf(d)["value"]


ROOT = Path(__file__).resolve().parent.parent


def _quickstart_steps() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    cmds = [ln for ln in block.splitlines() if ln.startswith("python3 -m venv ")]
    assert len(cmds) == 2, cmds
    return cmds[0], cmds[1]


def test_quickstart_tests_do_not_share_the_users_venv():
    """Trial 17, trip 1b: step 2 installed the oracle llamafactory 0.9.5 into step 1's `.venv`, and every later
    `doctor check` took it as the training machine's release. Each step now has its own venv."""
    one, two = _quickstart_steps()
    venv1, venv2 = one.split()[3], two.split()[3]
    assert venv1 != venv2
    assert "llamafactory" not in one and f"{venv2}/bin/pip install --no-deps llamafactory==0.9.5" in two
    assert f"{venv2}/bin/pytest" in two and f"{venv1}/bin/doctor check" in one


def test_ci_installs_as_the_quickstart_says():
    """.ci/run runs step 1's check from a venv with only the doctor (`pip install .`) and the tests from another
    with the test extra and the oracle, as the README's two steps do."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    quick = ci.index(".venv-ci-quick/bin/pip install -q .")
    check = ci.index(".venv-ci-quick/bin/doctor check fixtures/quickstart/llama7b_full_zero2_v100.yaml")
    tests = ci.index('. .venv-ci/bin/activate')
    assert quick < check < tests
    after = ci[tests:]
    assert 'pip install -q -e ".[test]"' in after and "pip install -q --no-deps llamafactory==0.9.5" in after
    assert "llamafactory" not in ci[:tests].split("pip install -q .")[1].split("doctor check")[0]
    assert 'pytest -q -n auto --dist loadfile -m "not gpu"' in after
    _, two = _quickstart_steps()
    assert '-n auto --dist loadfile -m "not gpu"' in two


K3 = FIX / "k3_r1_distill_lora_2080ti.yaml"


def test_a_modified_board_keeps_its_chip():
    """Trial 17, trip 4: `--gpu 2x2080Ti-22GB` exited 2 and `--gpu 2x22GB` lost the card (bf16 unknown). A card
    named with more memory than it was sold with is that chip with that memory."""
    from finetune_doctor.hardware.catalog import parse_gpu_spec

    hw = parse_gpu_spec("2x2080Ti-22GB")
    assert (hw.gpu, hw.num_gpus, hw.bf16, hw.compute_capability) == ("RTX-2080Ti-22GB", 2, False, (7, 5))
    # the 2080 Ti's own usable share (10.84 GiB of 11 GB) applied to 22 GB
    assert hw.capacity_gib == 21.68 and "modified board" in hw.notes[0]
    big = parse_gpu_spec("RTX-4090-48GB")
    assert (big.bf16, big.compute_capability, big.capacity_gib) == (True, (8, 9), 47.28)
    assert parse_gpu_spec("8xV100-64GB").gpu == "V100-64GB"
    # a size the card was sold in is the catalogue's card; one at or below its largest is a slip, still an error
    assert parse_gpu_spec("V100-32GB").capacity_gib == 31.75
    from finetune_doctor.errors import InputError

    with pytest.raises(InputError, match="comes in 40GB, 80GB, not 60GB"):
        parse_gpu_spec("A100-60GB")


def _codes(*args: str) -> list[str]:
    d = json.loads(_invoke(*args, "--format", "json").stdout)
    return [f["code"] for f in d["findings"]]


def test_fa2_on_a_card_older_than_ampere_is_flagged(monkeypatch):
    """k3: `flash_attn: fa2` and `bf16: true` on two 2080 Ti 22 GB boards; both are the chip's facts."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    codes = _codes("check", str(K3), "--gpu", "2x2080Ti-22GB", "--llamafactory", "0.9.2.dev0")
    assert "FD106" in codes and "FD105" in codes
    assert "FD106" in _codes("lint", str(K3), "--gpu", "T4")
    assert "FD106" not in _codes("lint", str(K3), "--gpu", "A100-80GB")
    assert "FD106" not in _codes("lint", str(K3), "--gpu", "2x22GB")   # a bare size names no chip
    assert "FD106" not in _codes("lint", str(K3))


K1 = FIX / "k1_glm45v_lora_zero3.yaml"


def _findings(*args: str) -> dict[str, dict]:
    d = json.loads(_invoke(*args, "--format", "json").stdout)
    return {f["code"]: f for f in d["findings"]}


def test_a_dev_build_is_not_judged_as_its_neighbours(monkeypatch):
    """Trial 17, trip 5 (LF PR #8876 registered `glm45v` on 0.9.4.dev0 and trained GLM-4.5V under ZeRO-3): the
    template, which 0.9.4 ships as `glm4_5v` and 0.9.3 lacks, is no error under the dev build, and the ZeRO-3 leaf
    that 0.9.4 added is the commit's to say, not a certain hang. The releases themselves keep their facts."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    dev = _findings("lint", str(K1), "--gpu", "8xA100-80GB", "--llamafactory", "0.9.4.dev0")
    assert "FD017" not in dev
    assert dev["FD041"]["severity"] == "warning" and "`glm4_5v` arrived" in dev["FD041"]["message"]
    assert "so its commit decides" in dev["FD041"]["message"]
    hang = dev["FD054"]["message"]
    assert "0.9.4.dev0, a build between the releases 0.9.3-0.9.4" in hang and "can hang" in hang
    assert "training hangs" not in hang
    old = _findings("lint", str(K1), "--gpu", "8xA100-80GB", "--llamafactory", "0.9.3")
    assert old["FD017"]["severity"] == "error" and "training hangs at the first step" in old["FD054"]["message"]
    new = _findings("lint", str(K1), "--gpu", "8xA100-80GB", "--llamafactory", "0.9.4")
    assert "Did you mean `glm4_5v`?" in new["FD017"]["message"] and "FD054" not in new
    # a misspelling whose near name is no newer than the previous release stays an error under the dev build
    typo = FIX.parent.parent / "fixtures" / "trial17" / "k1_glm45v_lora_zero3.yaml"
    text = typo.read_text(encoding="utf-8").replace("template: glm45v", "template: qwen2_vll")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "typo.yaml"
        cfg.write_text(text, encoding="utf-8")
        assert _findings("lint", str(cfg), "--llamafactory", "0.9.4.dev0")["FD017"]["severity"] == "error"


def test_a_config_that_lost_its_training_section_is_not_sized_as_whole(monkeypatch, tmp_path):
    """Trial 17, trip 2 (LF#7341, a paste cut in its `### method` section; the run trained on 4 x A6000 with bf16,
    micro batch 1 and ZeRO-3): it was sized at micro batch 8, fp32 and no DeepSpeed and called "oom > 99 %"."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    d = json.loads(_invoke("check", str(K4), "--gpu", "4xA6000", "--format", "json").stdout)
    cc = next(a for a in d["assumptions"] if a["name"] == "config-complete")
    assert cc["moves_verdict"] and "micro batch 8, fp32, no DeepSpeed" in cc["value"]
    assert "sets no key of a training section" in cc["source"]
    # LF's example section under ZeRO-3 is what the user ran: ~38.7 GiB in the trial's completed config
    assert cc["effect"]["total_gib"]["the same under DeepSpeed ZeRO-3"] == pytest.approx(39.0, abs=1.0)
    assert cc["effect"]["verdict"]["LF's example training section (micro batch 1, bf16)"] == "oom"
    assert d["memory"]["verdict"] == "at-risk"
    assert d["memory"]["deciding_assumption"]["name"] == "config-complete"
    # the lost section opens the verdict but hedges no rule: LF refuses the file as given ("Please specify dataset
    # for training.", the parity corpus's cases 005/026/037), so the required key it lacks stays an error
    f010 = next(f for f in d["findings"] if f["code"] == "FD010")
    assert f010["severity"] == "error" and "it may be cut off" not in f010["message"]
    # the same file with its training section back is whole: no config-complete, the verdict is the estimate's
    whole = tmp_path / "whole.yaml"
    whole.write_text(K4.read_text(encoding="utf-8") + "\n### train\nper_device_train_batch_size: 1\n"
                     "gradient_accumulation_steps: 8\nlearning_rate: 1.0e-5\nnum_train_epochs: 3.0\nbf16: true\n"
                     "deepspeed: examples/deepspeed/ds_z3_config.json\n", encoding="utf-8")
    w = json.loads(_invoke("check", str(whole), "--gpu", "4xA6000", "--format", "json").stdout)
    assert "config-complete" not in [a["name"] for a in w["assumptions"]]
    assert w["memory"]["per_gpu_gib"]["total"] == pytest.approx(39.0, abs=1.0)


def test_an_oom_under_every_example_section_stays_oom(monkeypatch, tmp_path):
    """A lost section opens the verdict only where a section LF's examples write changes it: a 7B full fine-tune
    on one 80 GB card (fixtures/cases/005, LF#94) runs out at micro batch 1 in bf16 too."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    cfg = FIX.parent / "cases" / "005" / "config.yaml"
    d = json.loads(_invoke("check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--format", "json").stdout)
    cc = next(a for a in d["assumptions"] if a["name"] == "config-complete")
    assert not cc["moves_verdict"] and set(cc["effect"]["verdict"].values()) == {"oom"}
    assert d["memory"]["verdict"] == "oom"


@pytest.mark.parametrize("text, values, has", [
    ("stage: sft\ndo_train: true\nfinetuning_type: full\n", {"do_train": True}, True),
    # one key of the section, in the file or as a key=value override, makes the file whole
    ("stage: sft\ndo_train: true\nbf16: true\n", {"do_train": True, "bf16": True}, False),
    ("stage: sft\ndo_train: true\n", {"do_train": True, "learning_rate": 1e-4}, False),
    # not a training run: LF's default do_train is false; a preprocessing-only run (tokenized_path) trains nothing
    ("stage: sft\ndo_predict: true\n", {"do_predict": True}, False),
    ("stage: sft\ndo_train: true\ntokenized_path: saves/ds\n", {"do_train": True, "tokenized_path": "saves/ds"},
     False),
])
def test_the_no_training_section_sign(text, values, has):
    from finetune_doctor.facts.cutpaste import signs

    assert ("no-training-section" in [s["sign"] for s in signs(text, values, "train")]) is has
    assert not signs(text, values, "export")


@pytest.mark.parametrize("cfg, args", [
    (K3, ("--gpu", "2x22GB", "--llamafactory", "0.9.2.dev0")),
    (K3, ("--gpu", "2x2080Ti-22GB")),
    (K4, ("--gpu", "4xA6000")),
    (K1, ("--gpu", "8xA100-80GB", "--llamafactory", "0.9.4.dev0")),
    (FIX.parent / "quickstart" / "llama7b_full_zero2_v100.yaml", ("--gpu", "8xV100-32GB")),
])
def test_every_alternative_that_differs_from_the_verdict_is_marked_or_explained(monkeypatch, cfg, args):
    """Trial 17, trip 3 (k3 on 2 x 22 GB: "eval-batch: 8 — if 1: 9.0 GiB fits" and "transformers 4.48.3: 43.0 GiB
    oom" beside an at-risk headline, only sample-lengths marked): each Assumed line whose alternative gives another
    verdict than the report's either carries `!` or says why it does not decide."""
    from finetune_doctor.reporters.sections.assumed import _UNMARKED, assumption_lines
    from finetune_doctor.types import Assumption

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    d = json.loads(_invoke("check", str(cfg), *args, "--no-data", "--format", "json").stdout)
    verdict = d["memory"]["verdict"]
    items = [Assumption(name=a["name"], value=a["value"], source=a["source"], alternatives=tuple(a["alternatives"]),
                        effect_gib=a["effect"]["total_gib"], effect_verdict=a["effect"]["verdict"],
                        resolve_with=a["resolve_with"], moves_verdict=a["moves_verdict"]) for a in d["assumptions"]]
    lines = dict(zip([a.name for a in sorted(items, key=lambda a: not a.moves_verdict)],
                     assumption_lines(items, verdict)))
    checked = 0
    for a in items:
        for alt, v in a.effect_verdict.items():
            if v == verdict:
                continue
            checked += 1
            text, moves = lines[a.name]
            # the reason is said once per line, at the first alternative it applies to
            assert moves or any(why in text for why in _UNMARKED.values()), (a.name, alt, text)
    assert checked
