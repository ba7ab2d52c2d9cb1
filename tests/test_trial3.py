"""What a new user's third trial found (issue #21, /tmp/briefs8/trial3_report.md), each fixed as a kind.

1. A development build (``0.9.2.dev0``, what ``llamafactory-cli env`` prints for a git install) is judged as a version
   between the release before it and the release it leads to: a key only one of them declares is a warning, never
   silence (the 0.9.2 keys LF stopped on in hiyouga/LlamaFactory#7677) nor an error; with no version at all, a key
   only some releases declare is the README's unverified-config-problem warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.config.keyschema import check_keys
from finetune_doctor.readers.config.lfrelease import choose, version_in_use
from finetune_doctor.readers.config.yamlcfg import load_config

from casekit import run_json as _run

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial3"
STOPPED_ON = {"freeze_language_model", "freeze_multi_modal_projector", "image_max_pixels", "video_max_pixels"}




@pytest.mark.parametrize(("given", "versions"), [
    ("0.9.2.dev0", ("0.9.1", "0.9.2")), ("0.9.1.dev0", ("0.9.0", "0.9.1")), ("0.9.3rc1", ("0.9.2", "0.9.3")),
    ("0.9.2", ("0.9.2",)), ("0.9.5.post1", ("0.9.5",)), ("0.9.6.dev0", ("0.9.6.dev0",)),
    ("0.9.6.dev3", ("0.9.6.dev0",)), ("0.8.4.dev0", ("0.8.3", "0.9.0"))])
def test_a_development_build_is_judged_between_releases(given, versions):
    rel = choose(given)
    assert rel.known and rel.versions == versions


def test_dev_build_keys_of_the_next_release_are_warnings_not_silence():
    doc = FX / "qwen2vl_dev_build" / "config.yaml"
    code, rep = _run("lint", str(doc), "--llamafactory", "0.9.2.dev0")
    warned = {f["location"]["key"] for f in rep["findings"] if f["name"] == "unverified-config-problem"}
    assert STOPPED_ON <= warned
    assert not [f for f in rep["findings"] if f["severity"] == "error"] and code == 0
    msg = next(f["message"] for f in rep["findings"] if f["location"]["key"] == "image_max_pixels")
    assert "LLaMA-Factory 0.9.1 (0.9.2.dev0 is a build between 0.9.1 and 0.9.2" in msg
    # the finished release has them all: nothing to say
    _, rep = _run("lint", str(doc), "--llamafactory", "0.9.2")
    assert not [f for f in rep["findings"] if f["location"].get("key") in STOPPED_ON]


def test_dev_build_read_from_the_env_file():
    d = FX / "qwen2vl_dev_build"
    _, rep = _run("lint", str(d / "config.yaml"), "--env", str(d / "env.txt"))
    warned = {f["location"]["key"] for f in rep["findings"] if f["name"] == "unverified-config-problem"}
    assert STOPPED_ON <= warned


def test_no_version_warns_on_keys_only_some_releases_declare():
    values = dict(load_config(str(FX / "qwen2vl_dev_build" / "config.yaml")).values)
    rel = version_in_use(None, None, use_installed=False)
    probs = {p.key: p for p in check_keys(values, env={}, release=rel, transformers_version="4.46.1")}
    assert STOPPED_ON <= set(probs)
    assert probs["image_max_pixels"].condition == "LLaMA-Factory 0.8.0-0.9.1"
    assert probs["image_max_pixels"].fate == "stops"
    # keys every release declares stay silent
    assert not {"stage", "cutoff_len", "template", "dataset"} & set(probs)


# 2. A remedy that offloads or changes the `deepspeed:` path is unsafe, and never swaps the user's own file for a
#    stock path that is not where they launch (LlamaFactory#8665: ./ds_z3_config.json -> examples/deepspeed/...).

OWN_DS = FX / "qwen25vl3b_own_ds"


def _fixes(rep: dict) -> list[dict]:
    out = []
    for f in rep["findings"]:
        if f.get("fix"):
            out.append(f["fix"])
            out += f["fix"].get("alternatives") or []
    return out


def test_offload_remedy_for_a_file_not_here_is_unsafe_and_edits_the_users_file(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text((OWN_DS / "config.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    # a 40 GB card: on 80 GB the cheaper remedies reach the 5 % target and no offload set is offered at all
    _, rep = _run("check", str(cfg), "--gpu", "A100-40GB", "--llamafactory", "0.9.4.dev0", "--offline")
    fixes = _fixes(rep)
    offload = [x for x in fixes if "offload" in x["title"]]
    assert offload and all(x["safety"] == "unsafe" for x in offload)
    for x in fixes:
        for e in x["edits"]:
            assert e["key"] != "deepspeed", x   # the user's own file is kept
            if e["key"].startswith("zero_optimization."):
                assert Path(e["file"]).name == "ds_z3_config.json"
    before = cfg.read_text(encoding="utf-8")
    res = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A800-80GB", "--llamafactory", "0.9.4.dev0",
                                    "--offline", "--fix"])
    assert res.exit_code in (0, 1), res.output
    # --fix applies safe edits only: the user's own DeepSpeed path stays, no stock file is written beside it (since
    # trial 10 the file's name, ds_z3_config.json, keeps the assumed stage at 3, and the cheapest set can be safe)
    after = cfg.read_text(encoding="utf-8")
    assert [ln for ln in after.splitlines() if ln.startswith("deepspeed:")] == [
        ln for ln in before.splitlines() if ln.startswith("deepspeed:")]
    assert not (tmp_path / "examples").exists()


def test_stock_file_swaps_to_its_sibling_and_is_unsafe(tmp_path):
    cfg = tmp_path / "config.yaml"
    text = (OWN_DS / "config.yaml").read_text(encoding="utf-8")
    cfg.write_text(text.replace("deepspeed: ./ds_z3_config.json", "deepspeed: ../LLaMA-Factory/examples/deepspeed/"
                                                                    "ds_z3_config.json"), encoding="utf-8")
    _, rep = _run("check", str(cfg), "--gpu", "A800-80GB", "--llamafactory", "0.9.4.dev0", "--offline")
    swaps = [(x["safety"], e["value"]) for x in _fixes(rep) for e in x["edits"] if e["key"] == "deepspeed"]
    assert swaps
    assert ("unsafe", "../LLaMA-Factory/examples/deepspeed/ds_z3_offload_config.json") in swaps
    assert all(s == "unsafe" for s, _ in swaps)


# 3. A start-up refusal that depends on versions is an error only where the versions are known to refuse.

@pytest.mark.parametrize(("torch", "tf", "refused"), [
    ("2.5.0a0+b465a5843b.nv24.09", "4.45.2", False),   # LlamaFactory#6687: trained on 2x 2080 Ti
    ("2.1.2+cu121", "4.40.0", True),                    # torch < 2.3: is_bf16_supported() says no below cc 8
    ("2.6.0", "4.34.1", True),                          # transformers < 4.35 tests the card itself
    ("2.3.0", "4.35.0", False),
    (None, "4.45.2", None), ("2.5.0", None, None), (None, None, None),
    (None, "4.30.2", True), ("2.0.1", None, True)])
def test_bf16_refusal_by_stack(torch, tf, refused):
    from finetune_doctor.facts.bf16stack import bf16_refusal

    assert bf16_refusal(torch, tf)["bf16_refused"] is refused


def test_bf16_on_a_2080ti_with_the_users_env_is_a_warning_not_an_error(tmp_path):
    env = tmp_path / "env.txt"
    env.write_text("- `llamafactory` version: 0.9.2.dev0\n- Platform: Linux-3.10.0-693.el7.x86_64-x86_64-with-glibc2.35\n"
                   "- Python version: 3.10.12\n- PyTorch version: 2.5.0a0+b465a5843b.nv24.09 (GPU)\n"
                   "- Transformers version: 4.45.2\n- GPU type: NVIDIA GeForce RTX 2080 Ti\n", encoding="utf-8")
    cfg = tmp_path / "qwen_pretrain.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: pt\ndo_train: true\nfinetuning_type: full\n"
                   "dataset: c4_demo\ncutoff_len: 1024\noutput_dir: saves/pt\nper_device_train_batch_size: 1\n"
                   "learning_rate: 1.0e-5\nbf16: true\n", encoding="utf-8")
    code, rep = _run("lint", str(cfg), "--env", str(env), "--gpu", "2x2080Ti")
    names = {f["name"]: f for f in rep["findings"]}
    assert "bf16-unsupported-gpu" not in names and names["bf16-emulated-gpu"]["severity"] == "warning"
    assert "transformers 4.45.2 let it start" in names["bf16-emulated-gpu"]["message"]
    _, rep = _run("lint", str(cfg), "--gpu", "2x2080Ti", "--transformers", "4.33.2")
    assert "bf16-unsupported-gpu" in {f["name"] for f in rep["findings"] if f["severity"] == "error"}


PARTIAL = FX / "qwen25_32b_qlora_partial"


def test_a_run_that_died_of_a_cuda_error_got_past_start_up(tmp_path):
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.settings import Options

    r = pm.run(str(tmp_path), [str(PARTIAL / "train.log")], str(PARTIAL / "config.yaml"),
               Options(command="postmortem", env_file=str(PARTIAL / "env.txt")))
    missing = next(f for f in r.findings if f.name == "missing-required-key")
    assert missing.severity == "warning" and missing.location.key == "output_dir"
    assert "The run died with a CUDA error, so the run got past start-up" in missing.message
    assert not [f for f in r.findings if f.severity == "error" and f.category == "config"]


def test_a_deepspeed_file_not_here_in_a_run_that_died_later_is_not_an_error(tmp_path):
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.settings import Options

    cfg = tmp_path / "config.yaml"
    cfg.write_text((PARTIAL / "config.yaml").read_text(encoding="utf-8").replace(
        "finetuning_type: lora\n", "finetuning_type: lora\ndeepspeed: ./ds_z3_config.json\n")
        + "output_dir: saves/qwen2.5-32b/qlora\n", encoding="utf-8")
    r = pm.run(str(tmp_path), [str(PARTIAL / "train.log")], str(cfg), Options(command="postmortem"))
    assert "deepspeed-file-missing" not in {f.name for f in r.findings}
    here = next(f for f in r.findings if f.name == "not-checked-here" and f.location.key == "deepspeed")
    assert "the run died with a CUDA error, so the training machine had it" in here.message


def test_past_start_up_reasons():
    from finetune_doctor.facts.ev import past_start_up

    assert past_start_up({"steps": {"last": 3}}) == "the logs show training steps"
    assert past_start_up({"oom": {"step": 0}}) == "the run ran out of GPU memory"
    assert past_start_up({"steps": {"last": None, "logged": 0}, "crash": {"exc": "ValueError"}}) is None


# 6. File kinds: a TrainingArguments dump is no LF config; a YAML naming only the model is chat by assumption;
#    an accelerate config is linted (rules/fsdp-wrap-class-unset.yaml has its rule cases).

def test_a_training_arguments_dump_is_named_not_judged():
    dump = FX / "hf_training_args_dump" / "training_args.json"
    res = CliRunner().invoke(main, ["check", str(dump), "--gpu", "H20", "--offline"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "a dump of transformers' TrainingArguments" in res.output
    assert "(it says: per_device_train_batch_size 4, gradient_accumulation_steps 2, learning_rate 1e-05" in res.output
    code, rep = _run("lint", str(dump))
    assert code == 0 and rep["findings"] == [] and rep["kinds"] == {str(dump): "hf-training-args"}


def test_a_yaml_naming_only_the_model_is_chat_by_assumption():
    _, rep = _run("lint", str(FX / "qwen3vl_fragment" / "config.yaml"), "--llamafactory", "0.9.4.dev0")
    kind = next(a for a in rep["assumptions"] if a["name"] == "config-kind")
    assert kind["value"].startswith("chat") and "part of a training YAML" in kind["alternatives"][0]
    _, rep = _run("lint", str(FX / "qwen3vl_fragment" / "train.yaml"), "--llamafactory", "0.9.4.dev0")
    assert not [a for a in rep["assumptions"] if a["name"] == "config-kind"]


def test_an_accelerate_config_is_linted_not_passed(tmp_path):
    acc = tmp_path / "fsdp_config.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n"
                   "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_sharding_strategy: FULL_SHARD\n"
                   "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 8\n", encoding="utf-8")
    _, rep = _run("lint", str(acc))
    assert [(f["name"], f["location"]["line"]) for f in rep["findings"]] == [("fsdp-wrap-class-unset", 4)]
    assert "skipped" not in rep


# 8. The 90 % interval says what it is made of when it mixes an assumption's alternatives.

def test_an_interval_over_assumptions_says_so(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text((OWN_DS / "config.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    _, rep = _run("check", str(cfg), "--gpu", "A800-80GB", "--llamafactory", "0.9.4.dev0", "--offline")
    from finetune_doctor.analyzers.memory.uncertainty import assumed_weight

    tight = next(f for f in rep["findings"] if f["name"] == "predicted-tight-fit")
    # the interval's own error (facts/mem.py `error_words`: the outcome-fitted spread of the shipped table)
    assert ("(the error for this kind of run, its bias measured on the benchmarks and its spread fitted on which "
            "reported runs trained or ran out, mixed over the alternatives of ") in tight["message"]
    named = tight["message"].split("mixed over the alternatives of ", 1)[1].split(")", 1)[0].split(", ")
    # the class's widths, when the table carries them, are said after the assumptions (facts/bands.py `basis`)
    named = [n for n in named if not n.startswith("widened by ")]
    # the data is not here: every sample at cutoff_len is an open assumption the interval spreads over; the others
    # are named exactly when the calibration table leaves their alternatives some weight
    assert "sample-lengths" in named and set(named) <= {a["name"] for a in rep["assumptions"]}
    assert ("deepspeed-config" in named) == (assumed_weight("deepspeed-config") < 1.0)
    res = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A800-80GB", "--llamafactory", "0.9.4.dev0",
                                    "--offline"])
    assert "mixed over the alternatives of" in " ".join(res.output.split())


# 8. Cosmetics: one full stop after a quoted exception; postmortem --log alone; an --env file in the run folder is
#    not a log; a transformers-4 key named as one.

def test_a_quoted_exception_ending_in_a_stop_gets_one(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File \"/root/LLaMA-Factory/src/llamafactory/launcher.py\", "
                   "line 23, in <module>\n    launch()\n  File \"/root/LLaMA-Factory/src/llamafactory/train/tuner.py\","
                   " line 72, in run_exp\n    raise ValueError(f\"Unknown task: {finetuning_args.stage}.\")\n"
                   "ValueError: Unknown task: sft.\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["postmortem", "--log", str(log), "--format", "json"])
    assert res.exit_code == 1, res.output
    crashed = next(f for f in json.loads(res.stdout)["findings"] if f["name"] == "run-crashed")
    # the exception's own stop is the sentence's; the raised-at clause that follows it adds none of its own
    assert "with ValueError: Unknown task: sft. — raised in run_exp (tuner.py, llamafactory)." in crashed["message"]
    assert ".." not in crashed["message"]


def test_postmortem_without_run_dir_needs_a_log():
    res = CliRunner().invoke(main, ["postmortem"])
    assert res.exit_code == 2 and "give the run folder (RUN_DIR) or its logs (--log FILE)" in res.output


def test_an_env_file_in_the_run_folder_is_not_read_as_a_log(tmp_path):
    (tmp_path / "env.txt").write_text((PARTIAL / "env.txt").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "train.log").write_text((PARTIAL / "train.log").read_text(encoding="utf-8"), encoding="utf-8")
    res = CliRunner().invoke(main, ["postmortem", str(tmp_path), "--env", str(tmp_path / "env.txt"),
                                    "--format", "json"])
    rep = json.loads(res.stdout)
    assert any("env.txt (not read: the --env file, not a log)" in n for n in rep["notes"])
    assert rep["hardware"]["gpu"] == "RTX-2080Ti"


def test_a_transformers_4_key_is_named_by_its_major(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\nper_gpu_train_batch_size: 2\n",
                   encoding="utf-8")
    _, rep = _run("lint", str(cfg), "--llamafactory", "0.9.5")
    f = next(f for f in rep["findings"] if f["location"]["key"] == "per_gpu_train_batch_size")
    assert "is a transformers 4.x argument (as read from transformers 4.57.6) that 5.x dropped" in f["message"]
    assert "exists only in" not in f["message"]
