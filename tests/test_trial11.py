"""What a new user's eleventh trial found (issues #21: honest verdicts and the edges a user touches first), each
fixed as a kind. The configs are written from LLaMA-Factory's example layout, not copied from the threads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from casekit import run_json as _run

VL_LORA = """\
### model
model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct
image_max_pixels: 262144
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all

### dataset
dataset: mllm_demo
template: qwen2_vl
cutoff_len: 2048

### output
output_dir: saves/qwen2_5vl-7b/lora/sft

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


@pytest.fixture(autouse=True)
def _no_launch_env(monkeypatch):
    for var in ("FORCE_TORCHRUN", "NNODES", "WORLD_SIZE", "NPROC_PER_NODE", "CUDA_VISIBLE_DEVICES",
                "DISABLE_VERSION_CHECK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _write(tmp: Path, text: str, name: str = "config.yaml") -> str:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def _by_code(rep: dict) -> dict[str, dict]:
    return {f["code"]: f for f in rep["findings"]}


@pytest.mark.parametrize("tf", ["4.49.0", "4.46.1"])
def test_a_release_cap_below_the_models_first_transformers_prescribes_a_newer_llamafactory(tmp_path: Path, tf):
    """Case 03 (LlamaFactory#6823): LF 0.9.1 caps transformers at 4.46.1 and qwen2_5_vl needs 4.49.0. With 4.49.0
    FD050 said "install <=4.46.1"; with 4.46.1 FD052 said "upgrade to >=4.49.0": a circle. Either way the finding
    now says that no transformers satisfies both and names LF 0.9.2, the first release whose range admits 4.49.0."""
    code, rep = _run("check", _write(tmp_path, VL_LORA), "--gpu", "A100-80GB", "--llamafactory", "0.9.1",
                     "--transformers", tf, "--no-data")
    got = _by_code(rep)
    assert code == 1
    one = got["FD050" if tf == "4.49.0" else "FD052"]
    assert "no transformers version satisfies both" in one["message"]
    assert '"llamafactory>=0.9.2"' in one["message"]
    assert "transformers>=4.41.2,<=4.49.0" in one["message"]
    # never the in-range prescription beside it
    assert "Install a transformers version inside that range" not in one["message"]
    assert not ({"FD050", "FD052"} <= set(got))


def test_a_refusal_with_no_model_conflict_keeps_the_in_range_cure(tmp_path: Path):
    """Qwen2.5-VL on LF 0.9.2 (caps at 4.49.0) with transformers 4.50.0: 4.49.0 cures it, so the range is the
    advice, and no conflict is claimed."""
    code, rep = _run("check", _write(tmp_path, VL_LORA), "--gpu", "A100-80GB", "--llamafactory", "0.9.2",
                     "--transformers", "4.50.0", "--no-data")
    msg = _by_code(rep)["FD050"]["message"]
    assert 'pip install "transformers>=4.41.2,<=4.49.0' in msg
    assert "satisfies both" not in msg


def test_the_first_release_admitting_a_transformers_is_read_from_the_ranges(tmp_path: Path):
    """The upper bounds of catalog/lf_stack_ranges.json decide (lower bounds and exclusions do not); the main
    snapshot's development version comes only after every published release, and None when none admits it."""
    from finetune_doctor.facts import stackrange

    assert stackrange.first_release_admitting("transformers", "4.49.0", "0.9.1")[0] == "0.9.2"
    assert stackrange.first_release_admitting("transformers", "4.51.0", "0.9.2")[0] == "0.9.3"
    assert stackrange.first_release_admitting("transformers", "5.7.0", "0.9.4")[0] == "0.9.6.dev0"
    assert stackrange.first_release_admitting("transformers", "6.0.0", "0.9.4") is None
    assert stackrange.admits_from("transformers>=4.41.2,<=4.46.1", "4.49.0") is False
    assert stackrange.admits_from("transformers>=4.41.2,<4.49.0", "4.49.0") is False
    assert stackrange.admits_from("transformers>=4.41.2,<=4.49.0,!=4.46.0", "4.49.0") is True
    assert stackrange.admits_from("transformers>=4.41.2", "9.0.0") is True


@pytest.mark.parametrize("lf,refused_by", [("0.9.2.dev0", "0.9.1"), ("0.9.5.dev0", "0.9.5")])
def test_a_development_build_keeps_a_conflict_one_bound_shows_as_unverified(tmp_path: Path, lf, refused_by):
    """Case 02 (LlamaFactory#6884): `--llamafactory 0.9.2.dev0 --transformers 4.49.0` gave no finding, while
    0.9.1 refuses 4.49.0. Both bounds tested: the older one refusing (0.9.1's cap) and the newer (0.9.5's floor
    4.55.0 against 4.52.4, which 0.9.4 admits)."""
    tf = "4.49.0" if lf == "0.9.2.dev0" else "4.52.4"
    code, rep = _run("check", _write(tmp_path, VL_LORA), "--gpu", "A100-80GB", "--llamafactory", lf,
                     "--transformers", tf, "--no-data")
    got = _by_code(rep)
    assert got["FD059"]["severity"] == "warning"
    assert f"refused at start-up by LLaMA-Factory {refused_by}," in got["FD059"]["message"]
    assert f"LLaMA-Factory {lf} (--llamafactory) is a version between those releases" in got["FD059"]["message"]
    assert "FD050" not in got and "FD051" not in got


GPTQ_EXPORT = """\
### model
model_name_or_path: Qwen/Qwen2.5-32B-Instruct
template: qwen
trust_remote_code: true

### export
export_dir: output/qwen2.5-32b-gptq-int4
export_quantization_bit: 4
export_quantization_dataset: data/c4_demo.jsonl
export_size: 5
export_legacy_format: false
"""


def test_a_gptq_export_that_does_not_fit_never_prescribes_export_device_cpu(tmp_path: Path):
    """Case 11 (LlamaFactory#6746): FD643 offered `export_device: cpu` for a GPTQ export on 2x4090, and applying it
    gave the same finding (LF loads a GPTQ export with device_map="auto" whatever export_device says). The fix
    now names no edit and no `export_device: cpu`, and the finding stands with it applied."""
    cfg = _write(tmp_path, GPTQ_EXPORT)
    for extra in ((), ("export_device=cpu", "--host-ram", "128GB")):
        code, rep = _run("check", cfg, *extra, "--gpu", "2x4090")
        fd = _by_code(rep)["FD643"]
        assert code == 1 and fd["message"].count("GPTQ calibration needs the model on the GPUs") == 1
        assert not fd["fix"].get("edits")
        assert "export_device: cpu" not in fd["fix"]["title"]
        assert fd["fix"]["title"].startswith("run the GPTQ export on more or larger GPUs")


LONG_LORA = """\
### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all

### dataset
dataset: long_context_sft
template: qwen
cutoff_len: 32768

### output
output_dir: saves/qwen2.5-7b/lora/long

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 1.0
bf16: true
"""


def test_a_remedy_is_judged_as_the_edited_run_would_be(tmp_path: Path):
    """Case 12 (LlamaFactory#7869): the alternative "samples of 16384 tokens" was 55.0 GiB at-risk, while the remedy
    "cutoff_len 32768 -> 16384", the same 55.0 GiB, read "probability of OOM < 1 %" (the mixture over sample
    lengths alone). A remedy now reaches the 5 % target only when the edited run's own check would say fits (the
    probability at the assumed values too), and its effect gives that figure. Each remedy offered as reaching the
    target is re-checked with its edits as KEY=VALUE overrides: the verdict is fits."""
    cfg = _write(tmp_path, LONG_LORA)
    _, rep = _run("check", cfg, "--gpu", "A100-80GB", "--llamafactory", "0.9.3", "--no-data")
    assert rep["memory"]["verdict"] == "at-risk"
    alts = next(a for a in rep["assumptions"] if a["name"] == "sample-lengths")["effect"]["verdict"]
    assert alts["samples of 16384 tokens"] == "at-risk"
    fd = _by_code(rep)["FD640"]
    fixes = [fd["fix"], *fd["fix"].get("alternatives", [])]
    # halving cutoff_len alone lands where the at-risk alternative is: it is not offered as reaching the target
    assert not any(f["title"] == "cutoff_len 32768 → 16384" for f in fixes)
    checked = 0
    for f in fixes:
        eff = f["effect"]
        assert "p_oom_model_assumed_after" in eff
        if "launch with" in f["title"] or max(eff["p_oom_model_after"], eff["p_oom_model_assumed_after"]) > 0.05:
            continue   # an environment edit is not a KEY=VALUE; an over-target remedy says so in its cost
        over = [f"{e['key']}={str(e['value']).lower() if isinstance(e['value'], bool) else e['value']}"
                for e in f["edits"]]
        _, again = _run("check", cfg, *over, "--gpu", "A100-80GB", "--llamafactory", "0.9.3", "--no-data")
        assert again["memory"]["verdict"] == "fits", (f["title"], again["memory"]["verdict"])
        assert again["memory"]["per_gpu_gib"]["total"] == pytest.approx(eff["total_gib_after"], abs=0.05)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("name,allowed", [
    ("gpt2-medium", ()),                       # GPT-2's size word is Phi-3's too: no suggestion across families
    ("bert-base-uncased", ()),
    ("phi3-medium", ("microsoft/Phi-3",)),     # the same family keeps its suggestions
    ("Phi-3-mini-instruct", ("microsoft/Phi-3",)),
])
def test_did_you_mean_never_crosses_families_on_a_size_word(name, allowed):
    """Case 09 (LlamaFactory#5320): `gpt2-medium` got "did you mean microsoft/Phi-3-medium-4k-instruct?". A name
    without a parameter count keeps its family (byname.word_family) as sized names always did."""
    from finetune_doctor.readers.model import byname
    from finetune_doctor.readers.model.modelcfg import _unknown

    msg = str(_unknown(name, ["not on this machine"]))
    sugg = msg.split("did you mean ", 1)[1].split("?", 1)[0].split(", ") if "did you mean" in msg else []
    assert all(s.startswith(allowed) for s in sugg) and bool(sugg) == bool(allowed), msg
    if not allowed:
        assert "(or the folder that holds it, as --model-config DIR or as model_name_or_path)" in msg
    assert byname.word_family(name) == {"gpt2-medium": "gpt2", "bert-base-uncased": "bert", "phi3-medium": "phi3",
                                        "Phi-3-mini-instruct": "phi3"}[name]


def test_an_unsized_model_says_so_where_the_memory_block_goes(tmp_path: Path):
    """Case 04 (LlamaFactory#7865): a "will it fit" check of a model folder that is only on the training machine
    said "memory not estimated" in a note at the bottom. The memory block now opens with it and with what to give.
    It says there is no verdict, and so does the exit code: FD607, exit 1, with or without --strict (trial 16: a
    check that sized nothing exited 0 with "0 errors")."""
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    cfg = _write(tmp_path, VL_LORA.replace("Qwen/Qwen2.5-VL-7B-Instruct", "/mnt/data/ckpt/Kimi-VL-A3B-Instruct"))
    res = CliRunner().invoke(main, ["check", cfg, "--gpu", "8xH20", "--no-data", "--llamafactory", "0.9.3"])
    assert res.exit_code == 1 and "FD607" in res.output, res.output
    lines = res.output.splitlines()
    at = lines.index("Memory per GPU")
    # the first lines under the heading, joined: where they wrap depends on the terminal width the runner reports
    block = [ln.strip() for ln in lines[at + 1:next(i for i in range(at + 1, len(lines)) if not lines[i].strip())]]
    opening = " ".join(block)
    assert lines[at + 1].startswith("  no verdict — memory not estimated")
    assert opening.startswith("no verdict — memory not estimated: the architecture of "
                              "/mnt/data/ckpt/Kimi-VL-A3B-Instruct is not")
    assert at < next(i for i, ln in enumerate(lines) if ln.startswith(("Assumed", "Errors", "Warnings", "Info")))
    assert "--model-config FILE (or the folder that holds it)" in opening
    strict = CliRunner().invoke(main, ["check", cfg, "--gpu", "8xH20", "--no-data", "--llamafactory", "0.9.3",
                                       "--strict"])
    assert strict.exit_code == 1 and "FD607" in strict.output


@pytest.mark.parametrize("model,lf,older", [
    ("Qwen/Qwen3-VL-8B-Instruct", "0.9.4", False),   # qwen3_vl needs 4.57.0; 0.9.4 requires >= 4.51.0
    ("Qwen/Qwen3-VL-8B-Instruct", None, False),      # no release known: the model alone rules 4.48.3 out
    ("Qwen/Qwen2.5-VL-7B-Instruct", "0.9.3", False),  # qwen2_5_vl arrived in 4.49.0, after 4.48.3
    ("Qwen/Qwen2.5-7B-Instruct", "0.9.3", True),     # qwen2 (4.37.0) on 0.9.3 (>= 4.45.0): 4.48.3 is plausible
])
def test_what_if_transformers_versions_can_load_the_model_and_pass_the_release(tmp_path: Path, model, lf, older):
    """Case 05 (LlamaFactory PR #10139): Qwen3-VL on LF 0.9.4 was sized "if transformers 4.48.3", a version that
    neither registers qwen3_vl nor passes 0.9.4's start-up check. The older-stack alternative is offered only where
    the model's type loads with it and some judged release admits it (tfmodeltype.could_run)."""
    cfg = _write(tmp_path, VL_LORA.replace("Qwen/Qwen2.5-VL-7B-Instruct", model))
    args = ["check", cfg, "--gpu", "A100-80GB", "--no-data"] + (["--llamafactory", lf] if lf else [])
    _, rep = _run(*args)
    tf = next(a for a in rep["assumptions"] if a["name"] == "transformers-version")
    assert ("transformers 4.48.3" in tf["alternatives"]) is older, tf


@pytest.mark.parametrize("first,certain", [
    ("{'loss': 1.0437, 'grad_norm': 5.8731, 'learning_rate': 1e-06, 'epoch': 0.0}", False),
    ("{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 1e-06, 'epoch': 0.0}", True),
])
def test_loss_zero_after_a_trained_step_is_worded_as_possible_causes(tmp_path: Path, first, certain):
    """Case 08 (LlamaFactory#8137): loss and grad_norm 0 from the second log of a 2-node ZeRO-2 run, after a first
    log with a real loss and gradient. FD305 said "nothing is being trained: every label is masked ... or no
    parameter requires grad" as certain, which the first log rules out. From the first log on, the certain
    wording stays."""
    rows = [first] + [f"{{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': {k}e-06, 'epoch': 0.0{k}}}"
                      for k in range(2, 6)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(rows) + "\n", encoding="utf-8")
    _, rep = _run("postmortem", "--log", str(log))
    msg = _by_code(rep)["FD305"]["message"]
    assert ("nothing is being trained" in msg) is certain
    if not certain:
        assert "step 1 logged loss 1.044 with grad_norm 5.873: the run trained at first" in msg
        assert "Possible causes: the later batches have every label masked" in msg


def test_a_model_type_only_one_bounding_release_refuses_is_unverified(tmp_path: Path):
    """Item 2 for the model's type: Qwen2.5-VL (4.49.0) on 0.9.2.dev0 with no transformers given: 0.9.1 runs with
    at most 4.46.1, 0.9.2 with 4.49.0. It was silent; it is now FD053 with the unverified clause. Both bounds
    refusing (0.9.1.dev0: 0.9.0 and 0.9.1) stay the plain FD053 with the upgrade prescription."""
    cfg = _write(tmp_path, VL_LORA)
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.2.dev0")
    msg = _by_code(rep)["FD053"]["message"]
    assert "but LLaMA-Factory 0.9.1 (--llamafactory) runs with at most 4.46.1" in msg
    assert "Unverified: LLaMA-Factory 0.9.2 admits a transformers that registers it, and 0.9.2.dev0" in msg
    _, rep = _run("lint", cfg, "--llamafactory", "0.9.1.dev0")
    msg = _by_code(rep)["FD053"]["message"]
    assert "Unverified" not in msg and '"llamafactory>=0.9.2"' in msg
