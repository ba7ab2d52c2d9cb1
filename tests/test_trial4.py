"""What a new user's fourth trial found (issue #21, /tmp/briefs8/trial4_report.md), each fixed as a kind.

1. A release the user states that is older than the catalogue (0.6.3 < 0.8.0) is never judged as 0.8.0: the report
   says the keys are not judged for it, and no rename or removal error (``cache_path`` "last accepted in v0.6")
   nor a fix to a key that release lacks (``tokenized_path``) is made.
3. A template the stated release lacks but a later one registers (``qwen3_vl`` on 0.9.3, ``qwen3_5`` on 0.9.4) is
   fixed by upgrading to the first release that registers it, never by "did you mean" the same name, and the
   thinking-template rewrite does not write a ``_nothink`` sibling the release lacks as well.
2. A per-step loss dict that carries ``train_runtime``/``train_tokens_per_second`` is a step, not the final metrics
   (which always have ``train_loss``): a crashed run is not "finished"; the world size is read from the training
   header (total batch / per-device batch / accumulation) before the ranks a log names.
6. FD041 never asks for ``--transformers VERSION`` when it was given: it names what decides the condition.
9. An explicit ``bf16: false`` is said as such, not as "neither bf16 nor fp16 set".
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers import dists
from finetune_doctor.readers.config.lfrelease import choose

from casekit import run_json as _run

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures" / "trial4"




def test_a_release_before_the_catalogue_is_not_replaced():
    rel = choose("0.6.3", "--llamafactory")
    assert rel.older and rel.given == "0.6.3"
    assert rel.note == "the doctor knows LLaMA-Factory releases from 0.8.0; keys are not judged for 0.6.3"
    assert not choose("0.8.0").older and not choose("0.9.2.dev0").older
    from finetune_doctor.readers.config.lfrelease import version_in_use

    env = version_in_use(None, {"llamafactory": "0.7.1"}, "env.txt")   # what `llamafactory-cli env` printed
    assert env.older and env.given == "0.7.1" and env.source == "env.txt"


def test_stated_063_gets_no_rename_error_and_no_fix_to_a_key_it_lacks():
    case = FX / "galore_train_bash_063"
    for cmd in (("check", str(case / "config.yaml"), "--launch", str(case / "cmdline.txt")),
                ("lint", str(case / "config.yaml"))):
        _, rep = _run(*cmd, "--llamafactory", "0.6.3")
        names = {f["name"] for f in rep["findings"]}
        assert "renamed-key" not in names and "unknown-key" not in names, names
        assert "tokenized_path" not in json.dumps([f.get("fix") for f in rep["findings"]])
        assert any("keys are not judged for 0.6.3" in n for n in rep["notes"]), rep["notes"]
        assert not [a for a in rep["assumptions"] if a["name"] == "lf-version"]
    # a chat config of that release gets no training parser's checks either
    infer = FX / "galore_train_bash_063" / "infer.yaml"
    code, rep = _run("lint", str(infer), "--llamafactory", "0.6.3")
    assert code == 0 and not [f for f in rep["findings"] if f["severity"] == "error"], rep["findings"]
    # without the version, the launch line's src/train_bash.py (renamed before 0.8.0) says the release is older
    _, rep = _run("check", str(case / "config.yaml"), "--launch", str(case / "cmdline.txt"))
    assert "renamed-key" not in {f["name"] for f in rep["findings"]}
    assert any("the launch runs src/train_bash.py" in n for n in rep["notes"]), rep["notes"]
    # with neither, every catalogued release renamed the key: the error stands (0.8.0 ... main)
    _, rep = _run("lint", str(case / "config.yaml"))
    assert "renamed-key" in {f["name"] for f in rep["findings"]}
    # a stated version wins over what the launch line implies
    _, rep = _run("check", str(case / "config.yaml"), "--launch", str(case / "cmdline.txt"), "--llamafactory", "0.9.5")
    assert "renamed-key" in {f["name"] for f in rep["findings"]}


def _template_finding(rep: dict) -> dict:
    return next(f for f in rep["findings"] if f["name"] == "template-not-registered")


def test_a_template_of_a_later_release_is_fixed_by_upgrading():
    cfg = FX / "qwen3vl_on_093" / "config.yaml"
    code, rep = _run("check", str(cfg), "--llamafactory", "0.9.3")
    f = _template_finding(rep)
    assert code == 1 and f["severity"] == "error"
    assert "LLaMA-Factory 0.9.4 is the first release that registers it" in f["message"]
    assert "Did you mean" not in f["message"]
    assert f["fix"]["title"] == "upgrade LLaMA-Factory to >= 0.9.4, the first release that registers `qwen3_vl`"
    assert not f["fix"]["edits"]
    # the Instruct model's warning stays, but its rewrite to qwen3_vl_nothink (also 0.9.4+) is not offered
    thinking = next(x for x in rep["findings"] if x["name"] == "thinking-template-on-instruct-model")
    assert not (thinking.get("fix") or {}).get("edits")
    res = CliRunner().invoke(main, ["lint", str(cfg), "--llamafactory", "0.9.3", "--unsafe-fixes", "--diff"])
    assert "qwen3_vl_nothink" not in res.output
    # on 0.9.4 both templates exist: the template is fine, the rewrite to _nothink is offered
    _, rep = _run("check", str(cfg), "--llamafactory", "0.9.4")
    assert "template-not-registered" not in {x["name"] for x in rep["findings"]}
    thinking = next(x for x in rep["findings"] if x["name"] == "thinking-template-on-instruct-model")
    assert [e["value"] for e in thinking["fix"]["edits"]] == ["qwen3_vl_nothink"]


def test_qwen3_5_on_094_names_095():
    _, rep = _run("check", str(FX / "qwen35_moe_tf52" / "config.yaml"), "--llamafactory", "0.9.4")
    f = _template_finding(rep)
    assert "LLaMA-Factory 0.9.5 is the first release that registers it" in f["message"]
    assert "`qwen3_5`?" not in f["message"]


def test_a_misspelt_template_is_never_suggested_as_itself():
    # `qwen3-vl` was never registered: the nearest name the judged release has -- on 0.9.4 qwen3_vl, on 0.9.3
    # (which lacks qwen3_vl) one of its own; `qwen3_NOTHINK` is another value than `qwen3_nothink`
    from finetune_doctor.analyzers.config.launch import check_launch

    def fix(values: dict, version: str) -> str:
        return next(p for p in check_launch(values, None, choose(version)) if p["kind"] == "template")["fix_value"]

    model = {"model_name_or_path": "Qwen/Qwen3-VL-8B-Instruct"}
    assert fix({"template": "qwen3-vl", **model}, "0.9.4") == "qwen3_vl"
    on_093 = fix({"template": "qwen3-vl", **model}, "0.9.3")
    assert on_093 == "qwen3" and choose("0.9.3").has_template(on_093)
    assert fix({"template": "qwen3_NOTHINK"}, "0.9.5") == "qwen3_nothink"


def test_fd041_does_not_ask_for_the_transformers_version_it_was_given(monkeypatch):
    real = dists.installed_version
    monkeypatch.setattr(dists, "installed_version", lambda d: None if d == "llamafactory" else real(d))
    cfg = str(FX / "qwen35_moe_tf52" / "config.yaml")
    # the template (0.9.5+) is left out so that the template does not decide the release. With no version at all the
    # config's own keys narrow the release (readers/config/lfnarrow.py) and no FD041 is left; a development build
    # between two releases keeps one open: the key 0.9.2 added and 0.9.1 lacks
    res = CliRunner().invoke(main, ["check", cfg, "template=qwen", "--transformers", "5.2.0", "--format", "json"])
    assert not [f for f in json.loads(res.stdout)["findings"] if f["code"] == "FD041"]
    res = CliRunner().invoke(main, ["check", cfg, "template=qwen", "--transformers", "5.2.0", "--llamafactory",
                                    "0.9.2.dev0", "--format", "json"])
    rep = json.loads(res.stdout)
    fd041 = [f for f in rep["findings"] if f["code"] == "FD041"]
    assert {f["location"]["key"] for f in fd041} == {"trust_remote_code"}
    for f in fd041:
        assert "--transformers VERSION" not in f["message"]
        # a development build was given: its commit decides, so only the training machine's env file can (trial 6)
        assert "pass --env FILE from the training machine" in f["message"]
        assert "--llamafactory VERSION" not in f["message"]


def test_a_step_dict_with_train_runtime_does_not_finish_the_run():
    from finetune_doctor.readers.runlogs.logpatterns import is_summary

    log = FX / "z3_rank5_crash" / "log.txt"
    res = CliRunner().invoke(main, ["postmortem", "--log", str(log), "--format", "json"])
    assert res.exit_code == 1, res.output
    rep = json.loads(res.stdout)
    pm = rep["postmortem"]
    assert pm["crashed"] and not pm["completed"]
    assert pm["steps"]["last"] == 2 and pm["curves"]["loss"]["values"] == [1.9251, 1.8173]
    assert "finished" not in json.dumps(rep["timeline"])
    assert rep["notes"] == ["world size 8 from the log's training header: total train batch size 64 = 1 per device "
                            "x 8 gradient accumulation x 8 ranks"]
    # transformers' final dict (speed_metrics + train_loss + epoch) is the summary; a step's is not
    assert is_summary({"train_runtime": 55.1, "train_samples_per_second": 1.2, "train_steps_per_second": 0.02,
                       "train_tokens_per_second": 2376.4, "total_flos": 1e18, "train_loss": 1.8, "epoch": 1.0})
    assert not is_summary({"loss": 1.8173, "grad_norm": 2.56, "learning_rate": 1e-05, "epoch": 0.0,
                           "train_runtime": 55.1, "train_tokens_per_second": 2376.4})


def test_an_explicit_bf16_false_is_named():
    cfg = FX / "qwen25vl3b_dpo_bf16_false" / "config.yaml"
    _, rep = _run("check", str(cfg))
    assert "bf16: false, fp16 not set: LF infers compute dtype bfloat16 from the checkpoint (bfloat16)" in rep["notes"]
    assert not [n for n in rep["notes"] if n.startswith("neither bf16 nor fp16")]
    # without the line the old wording holds: nothing was set
    _, rep = _run("check", str(cfg), "bf16=null")
    assert any(n.startswith("neither bf16 nor fp16 set: LF infers") for n in rep["notes"]), rep["notes"]


def test_a_rename_is_not_offered_to_a_release_that_lacks_the_new_key_too():
    # image_resolution (0.9.0-0.9.1) became image_max_pixels (0.9.2+): on 0.8.3 neither exists
    from finetune_doctor.readers.config.keyschema import check_keys

    values = {"model_name_or_path": "Qwen/Qwen2-VL-7B-Instruct", "stage": "sft", "do_train": True,
              "finetuning_type": "lora", "template": "qwen2_vl", "image_resolution": 512, "output_dir": "out"}
    old = [p for p in check_keys(values, release=choose("0.8.3")) if p.key == "image_resolution"]
    assert [(p.kind, p.replacement_key, p.fix) for p in old] == [("unknown", None, None)]
    # worded by unknown-key's not-in-release case: "not a key of LLaMA-Factory 0.8.3 (LLaMA-Factory 0.9.0-0.9.1
    # declares it)"
    assert (old[0].check, old[0].args) == ("not-in-release", {"release": "LLaMA-Factory 0.8.3", "have": "0.9.0-0.9.1"})
    new = [p for p in check_keys(values, release=choose("0.9.3")) if p.key == "image_resolution"]
    assert [(p.kind, p.replacement_key) for p in new] == [("renamed", "image_max_pixels")]


def test_a_version_mapped_onto_the_catalogue_keeps_what_was_given():
    # newer than the catalogue, or a build between releases: the assumption shows the stated version beside its mapping
    cfg = str(FX / "galore_train_bash_063" / "config.yaml")
    for given, judged in (("0.9.7", "0.9.6.dev0"), ("0.9.2.dev0", "0.9.1-0.9.2")):
        _, rep = _run("lint", cfg, "--llamafactory", given)
        lf = [a["value"] for a in rep["assumptions"] if a["name"] == "lf-version"]
        assert lf == [f"{given} as given, judged as {judged}"]
