"""Trial 9's postmortem kinds (fixtures/postmortem/trial9/README.md): a NaN from the very first logged step at
learning rate 0 is neither the learning rate nor one bad batch; a DPO/KTO run with its own reference model under
FSDP on an LLaMA-Factory release before PR #10127 is named as that known fault, certain only when the config, the
accelerate config and the release say so."""

from __future__ import annotations

import os

from finetune_doctor.analyzers.postmortem import refmodel
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence
from pmhelp import diagnose_dir

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem", "trial9")
KTO = os.path.join(FIX, "kto-fsdp")


def _kto(**opts):
    return diagnose_dir(os.path.join(KTO, "run"), [], os.path.join(KTO, "config.yaml"), **opts)


def _nan(r):
    return next(f for f in r.findings if f.name == "nan-loss")


def test_kto_under_fsdp_on_0_9_4_is_the_reference_model_fault_and_certain():
    r = _kto(accelerate_config=os.path.join(KTO, "fsdp.yaml"), env_file=os.path.join(KTO, "env.txt"))
    f = _nan(r)
    assert r.findings[0].name == "nan-loss"
    assert "not the learning rate and not one bad batch; this is the known fault" in f.message
    assert "(LLaMA-Factory#10126, fixed by PR #10127 in 0.9.5)" in f.message
    assert "KTO (from the config)" in f.message and "under FSDP (from the accelerate config)" in f.message
    assert "on LLaMA-Factory 0.9.4" in f.message and "not read" not in f.message
    # epoch 0.06 at step 1 (256 samples) is not "late": no contradictory clauses about healthy training
    assert "at the first log read" in f.message
    for wrong in ("healthy before the logs read", "bad sample", "lower the learning rate", "after 0 healthy"):
        assert wrong not in f.message
    assert f.fix.title.startswith("upgrade LLaMA-Factory to 0.9.5 or later")


def test_without_the_accelerate_config_the_launcher_is_named_as_unread():
    f = _nan(_kto(env_file=os.path.join(KTO, "env.txt")))
    assert "it matches the known fault" in f.message and "this is the known fault" not in f.message
    assert "not read: the launcher (FSDP or not: give --accelerate-config)" in f.message


def test_a_release_with_the_fix_is_not_told_about_it():
    f = _nan(_kto(accelerate_config=os.path.join(KTO, "fsdp.yaml"), lf_version="0.9.5"))
    assert "10127" not in f.message
    # still the first step at learning rate 0: the forward pass of the model as prepared, not a batch
    assert "no optimizer update can have caused it, nor one late batch" in f.message
    assert "bad sample" not in f.message


def _cx(cfg: dict, run: dict | None = None) -> RunContext:
    return RunContext({"cfg": cfg, "run": run or {}}, Evidence(None))


def test_who_has_a_reference_model():
    fsdp = {"fsdp": 1, "engine": "fsdp", "fsdp_source": "accelerate config"}
    v094 = ("0.9.4", "--llamafactory")
    # LoRA without ref_model: the policy with adapters off is the reference (create_ref_model returns None)
    assert refmodel.ref_model_fsdp(_cx({"stage": "dpo"}, {"stage": "dpo", "finetuning_type": "lora", **fsdp}),
                                   v094) is None
    got = refmodel.ref_model_fsdp(_cx({"stage": "dpo", "ref_model": "m/ref"},
                                      {"stage": "dpo", "finetuning_type": "lora", **fsdp}), v094)
    assert got["certain"] and "ref_model: m/ref" in got["text"]
    # reference-free losses and other stages build none
    assert refmodel.ref_model_fsdp(_cx({"stage": "dpo", "pref_loss": "simpo"},
                                       {"stage": "dpo", "finetuning_type": "full", **fsdp}), v094) is None
    assert refmodel.ref_model_fsdp(_cx({"stage": "sft"}, {"stage": "sft", "finetuning_type": "full", **fsdp}),
                                   v094) is None
    # DeepSpeed has its own reference-model path in every release
    assert refmodel.ref_model_fsdp(_cx({"stage": "dpo", "deepspeed": "ds_z3.json"},
                                       {"stage": "dpo", "finetuning_type": "full", "engine": "deepspeed"}),
                                   v094) is None


def test_release_states_follow_pep440():
    assert refmodel._release_state("0.9.4") == "unfixed"
    assert refmodel._release_state("0.9.5.dev0") == "maybe"
    assert refmodel._release_state("0.9.5") == "fixed"
    assert refmodel._release_state("0.9.6.dev0") == "fixed"
    assert refmodel._release_state(None) == "unknown"


def test_a_kto_traceback_cut_in_the_first_step_names_the_lead_and_what_is_unread():
    r = diagnose_dir(os.path.join(FIX, "kto-first-step", "train.log"))
    f = next(f for f in r.findings if f.name == "run-crashed")
    assert "it matches the known fault of LLaMA-Factory's DPO/KTO trainers up to 0.9.4" in f.message
    assert "read: KTO (from the traceback)" in f.message
    assert "the launcher (FSDP or not: give --accelerate-config)" in f.message
    assert "give the lines after this traceback" in f.message


def test_a_cut_traceback_of_an_sft_run_gets_no_reference_model_lead(tmp_path):
    with open(os.path.join(FIX, "kto-first-step", "train.log"), encoding="utf-8") as fh:
        text = fh.read().replace("run_kto", "run_sft").replace("kto/workflow.py", "sft/workflow.py")
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    f = next(f for f in diagnose_dir(log).findings if f.name == "run-crashed")
    assert "reference model" not in f.message


def test_without_a_config_the_stage_comes_from_trls_metric_keys():
    # KTOTrainer logs rewards/chosen beside kl; a run without --config still gets the lead, with what is unread
    f = _nan(diagnose_dir(os.path.join(KTO, "run")))
    assert "read: KTO (from the log's metric keys (rewards/chosen" in f.message
    assert "not read: whether a separate reference model is built (give --config)" in f.message
    assert "bad sample" not in f.message


def test_a_tail_paste_at_the_end_of_a_cosine_schedule_is_not_the_start(tmp_path):
    # the last logs of a 3-epoch run: lr decays to 0, the first visible log is already NaN; nothing says the run
    # just started, so no first-step explanation is given
    log = tmp_path / "tail.log"
    log.write_text("\n".join(
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': %s, 'epoch': %s}" % (lr, ep)
        for lr, ep in (("3.1e-09", "2.98"), ("7.7e-10", "2.99"), ("0.0", "3.0"))) + "\n", encoding="utf-8")
    f = _nan(diagnose_dir(log))
    assert "from the first logged step" not in f.message and "no optimizer update" not in f.message
    assert "lower the learning rate" not in f.message   # at 3.1e-09 a lower rate is no remedy
