"""The key schema's openings live beside their rules (issue #22, "prose out of code"): an undeclared key's problem
(readers/config/keyschema.py OPENING_CHECKS) gives its check and fate, and the rule's message table (unknown-key,
renamed-key, derived-key, unverified-config-problem: ``by: item.case``, case ``check/fate``) holds the sentence;
two value checks (item-not-among, choice-not-in-release) are worded by invalid-value's table. These tests pin that every
opening has both fates in the rules that can show it, and that the sentences reach the user word for word."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from finetune_doctor.pipeline import lint
from finetune_doctor.readers.config.keyschema import OPENING_CHECKS
from finetune_doctor.settings import Options

ROOT = Path(__file__).resolve().parent.parent
STOPS = 'LLaMA-Factory stops with "Some keys are not used by the HfArgumentParser"'
DROPS = "LLaMA-Factory drops it silently because ALLOW_EXTRA_ARGS is set, so it has no effect"
# which rule shows each opening when its condition is known (the kind keyschema.py gives it)
# (None: its condition always names releases the inputs leave open, so only unverified-config-problem shows it)
RULE_OF = {"unknown": "unknown-key", "unknown-near": "unknown-key", "not-snake-case": "unknown-key",
           "retired": "unknown-key", "retired-undated": "unknown-key", "not-in-release": "unknown-key",
           "not-in-any-release": "unknown-key", "not-for-training": "unknown-key",
           "transformers-dropped": "unknown-key", "declared-by-some": None, "renamed": "renamed-key",
           "renamed-undated": "renamed-key", "old-spelling": "renamed-key", "computed": "derived-key",
           "derived": "derived-key"}


@functools.cache
def _rule(name: str) -> dict:
    return yaml.safe_load((ROOT / "rules" / f"{name}.yaml").read_text(encoding="utf-8"))


def test_each_opening_has_both_fates_in_its_rule_and_in_the_unverified_rule():
    assert set(RULE_OF) == set(OPENING_CHECKS)
    for check, rule in RULE_OF.items():
        if rule:
            cases = _rule(rule)["message"]["cases"]
            assert _rule(rule)["message"]["by"] == "item.case", rule
            assert STOPS in cases[f"{check}/stops"] and DROPS in cases[f"{check}/drops"], (rule, check)
        # a dropped key's condition is ALLOW_EXTRA_ARGS, never a version: it is never unverified
        cases = _rule("unverified-config-problem")["message"]["parts"][0]["cases"]
        assert STOPS in cases[f"{check}/stops"] and f"{check}/drops" not in cases, check
    # an opening's case in a rule that never shows its kind would be dead text
    for name in ("unknown-key", "renamed-key", "derived-key"):
        ours = {c.split("/")[0] for c in _rule(name)["message"]["cases"] if "/" in c}
        assert ours == {c for c, r in RULE_OF.items() if r == name}, name


def _messages(tmp_path: Path, text: str, *flags: str) -> list[str]:
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\n"
                   + text, encoding="utf-8")
    args = dict(zip(flags[::2], flags[1::2]))
    opts = Options.from_cli(command="lint", paths=[str(cfg)], lf_version=args.get("lf"),
                            transformers_version=args.get("tf"))
    return [f"{f.code} {f.message}" for f in lint.run([str(cfg)], opts).findings
            if f.code in ("FD001", "FD002", "FD003", "FD004", "FD041")]


YAML = ("learning_rte: 1.0e-4\nfoo_bar_baz: 1\nLearning-Rate: 1\nfp32: true\nDPO-Beta: 0.1\ndpo_beta: 0.1\n"
        "fsdp: full_shard zero3\n")


@pytest.mark.parametrize("env, fate", [({}, STOPS), ({"ALLOW_EXTRA_ARGS": "1"}, DROPS)])
def test_the_openings_read_as_before(tmp_path, monkeypatch, env, fate):
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    tail = " (ALLOW_EXTRA_ARGS is set)" if env else ""
    got = _messages(tmp_path, YAML, "lf", "0.9.4", "tf", "4.57.1")
    assert got == [
        f"FD001 Unknown key `learning_rte`: {fate}. Did you mean `learning_rate`?{tail}",
        f"FD001 Unknown key `foo_bar_baz`: {fate}.{tail}",
        f"FD001 `Learning-Rate` is not a key (keys are lower_snake_case): {fate}.{tail}",
        f"FD001 `fp32` is not a LLaMA-Factory key: {fate}. There is no fp32 key. Full fp32 training means leaving "
        "bf16, fp16 and pure_bf16 unset (LF then trains in fp32 for full/freeze tuning); the WebUI's 'fp32' compute "
        f"type maps to exactly that.{tail}",
        f"FD002 `DPO-Beta` is an old spelling of `pref_beta`: {fate}.{tail}",
        f"FD002 `dpo_beta` was renamed to `pref_beta` (last accepted in v0.7); {fate}. The DPO options were renamed "
        f"pref_* when ORPO/SimPO joined DPO.{tail}",
        "FD003 `fsdp` has zero3, which is not among full_shard, shard_grad_op, no_shard, hybrid_shard, "
        "hybrid_shard_zero2, offload, auto_wrap.",
    ], got


def test_the_unverified_and_release_wordings(tmp_path, monkeypatch):
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    got = _messages(tmp_path, "evaluation_strategy: steps\ntrain_mm_proj_only: false\n")
    assert got[0] == (
        f"FD001 `train_mm_proj_only` is not a LLaMA-Factory key (last accepted in v0.9.1): {STOPS}. Replaced by "
        "freeze_vision_tower, freeze_multi_modal_projector and freeze_language_model."), got
    assert got[1] == (
        "FD041 `evaluation_strategy` was renamed to `eval_strategy` (last accepted in transformers 4.45); "
        f"{STOPS}. transformers renamed evaluation_strategy to eval_strategy; neither 4.57 nor 5.8 accepts the old "
        "name. Of the releases the inputs allow, that is transformers >= 4.46; no --transformers given; the inputs "
        "do not say which one ran: pass --transformers VERSION or --env FILE to decide it."), got
    got = _messages(tmp_path, "finetuning_type: oft\n", "lf", "0.9.3")
    assert got == ["FD003 `finetuning_type: oft` is not a choice of LLaMA-Factory 0.9.3, which accepts lora, freeze, "
                   "full: it fails where LLaMA-Factory branches on the value."], got


def test_the_release_transformers_and_derived_openings(tmp_path, monkeypatch):
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    got = _messages(tmp_path, "lang: en\nddp_static_graph: true\ncompute_dtype: bfloat16\n_kt_config_handle: 1\n",
                    "lf", "0.9.4", "tf", "4.57.1")
    assert got == [
        f"FD001 `lang` is read only by llamafactory-cli eval, not by training: {STOPS}.",
        "FD001 `ddp_static_graph` is a transformers 5.x argument (as read from transformers 5.6.0, 5.8.0) that 4.x "
        f"dropped: with transformers 4.x {STOPS}.",
        "FD004 `compute_dtype` is derived by LLaMA-Factory, not set: bfloat16 when bf16 or pure_bf16 is set, float16 "
        "when fp16 is set, otherwise chosen at model load from the checkpoint dtype and the device (parser.py:640-643, "
        f"model/patcher.py:375-379). {STOPS}.",
        "FD004 `_kt_config_handle` is computed inside KTransformersArguments (init=False), not read from a config: "
        f"{STOPS}.",
    ], got
    got = _messages(tmp_path, "image_max_pixels: 1000\n", "lf", "0.8.3")
    assert got == ["FD001 `image_max_pixels` is not a key of LLaMA-Factory 0.8.3 (LLaMA-Factory 0.9.2-0.9.6.dev0 "
                   f"declares it): {STOPS}."], got


def test_a_key_some_releases_declare_on_a_build_between_two(tmp_path, monkeypatch):
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    got = _messages(tmp_path, "image_max_pixels: 1000\n", "lf", "0.9.2.dev0")
    assert got == [
        f"FD041 `image_max_pixels` is declared by LLaMA-Factory 0.9.2-0.9.6.dev0 only: {STOPS} on the others. Of the "
        "releases the inputs allow, that is LLaMA-Factory 0.9.1 (0.9.2.dev0 is a build between 0.9.1 and 0.9.2, so its "
        "commit decides); --llamafactory states LLaMA-Factory 0.9.2.dev0, but not the commit it was built from: "
        "pass --env FILE from the training machine (`llamafactory-cli env`) to decide it."], got


def test_a_dropped_key_is_never_unverified(tmp_path, monkeypatch):
    # no versions given: the stop would be unverified, but with ALLOW_EXTRA_ARGS LF drops the key on every release
    monkeypatch.setenv("ALLOW_EXTRA_ARGS", "1")
    got = _messages(tmp_path, "evaluation_strategy: steps\n")
    assert got == ["FD002 `evaluation_strategy` was renamed to `eval_strategy` (last accepted in transformers 4.45); "
                   f"{DROPS}. transformers renamed evaluation_strategy to eval_strategy; neither 4.57 nor 5.8 accepts "
                   "the old name. (ALLOW_EXTRA_ARGS is set)"], got


TYPES = ('bf16: "true"\nsave_steps: on\nmax_samples: 1.0e5\nlearning_rate: "5e-6"\nper_device_train_batch_size: auto\n'
         "accelerator_config: 7\ninclude_for_metrics: 7\n")


def test_a_value_of_the_wrong_kind_reads_as_before(tmp_path):
    # each hint (TYPE_CHECKS) and each ending (TYPE_ENDINGS) once: invalid-value's two message parts, joined; the
    # sentences as readers/config/keyschema.py wrote them before they moved (main 602693a)
    got = _messages(tmp_path, TYPES)
    convert = "; parse_dict does not convert it, and"
    compare = ("the first comparison or arithmetic on it raises TypeError (while parsing, at model or data loading, "
               "or at the first step).")
    assert got == [
        "FD003 `bf16` is a string (true) but LLaMA-Factory expects a boolean (a quoted boolean is a non-empty string, "
        f"which Python treats as true){convert} Python's truth test reads it as true, so the option is silently on "
        "(a quoted 'false' turns it on).",
        "FD003 `save_steps` is a boolean (true) but LLaMA-Factory expects a float or an integer (YAML 1.1 reads "
        f"on/off/yes/no as booleans){convert} Python uses it as the number 1, which is rarely what was meant.",
        "FD003 `max_samples` is a float (100000.0) but LLaMA-Factory expects an integer (YAML reads 1e5-style numbers "
        f"as floats){convert} it fails where a whole count is needed (range(), slicing: TypeError).",
        "FD003 `learning_rate` is a string (5e-6) but LLaMA-Factory expects a float or an integer (quoted, so it "
        f"stays a string){convert} {compare}",
        "FD003 `per_device_train_batch_size` is a string (auto) but LLaMA-Factory expects an integer ('auto' belongs "
        f"in the DeepSpeed JSON; LLaMA-Factory does not resolve it){convert} {compare}",
        f"FD003 `accelerator_config` is an integer (7) but LLaMA-Factory expects a mapping or a string{convert} the "
        "string operations on it (path joins, splits, name lookups) raise TypeError or look up a name that does not "
        "exist, at model or data loading.",
        f"FD003 `include_for_metrics` is an integer (7) but LLaMA-Factory expects a list{convert} its first use fails "
        "(TypeError).",
    ], got


def test_every_type_and_choice_check_and_ending_has_its_case():
    from finetune_doctor.readers.config.keyschema import CHOICE_CHECKS, CHOICE_ENDINGS, TYPE_CHECKS, TYPE_ENDINGS

    opening, ending = _rule("invalid-value")["message"]["parts"]
    assert (opening["by"], ending["by"]) == ("item.check", "item.ending")
    assert set(TYPE_CHECKS) | set(CHOICE_CHECKS) <= set(opening["cases"])
    # flash_attn is flash-attn-invalid-value's there: its ending would be dead text
    assert set(ending["cases"]) == set(TYPE_ENDINGS) | set(CHOICE_ENDINGS) - {"flash-attn"}
    # a choice that only some releases lack (a wrong kind never is)
    opening, ending = _rule("unverified-config-problem")["message"]["parts"]
    assert set(CHOICE_CHECKS) <= set(opening["cases"]) and set(ending["cases"]) == set(CHOICE_ENDINGS)


HOLDS = ("This holds only for LLaMA-Factory releases whose `{key}` choices lack {value}, which the inputs do not say: "
         "pass --llamafactory VERSION or --env FILE to decide it.")


@pytest.mark.parametrize("text, message", [
    ("quantization_method: bitsandbytes\nquantization_bit: 4\nfinetuning_type: lora\n",
     "FD041 `quantization_method: bitsandbytes` is not a valid choice (an old spelling of bnb: the on-the-fly "
     "quantization branches compare with bnb/hqq/eetq only (model/model_utils/quantization.py:167-207 in 0.9.5), so "
     "quantization_bit is silently ignored and the model loads unquantized); LLaMA-Factory accepts bnb, gptq, awq, "
     "aqlm, quanto, eetq, hqq, mxfp4, fp8. parse_dict does not check Literal choices: the run fails later, where "
     "LLaMA-Factory branches on the value. " + HOLDS.format(key="quantization_method", value="bitsandbytes")),
    ('flash_attn: "off"\n',
     "FD041 `flash_attn: off` is not a valid choice (an old spelling of disabled: LF v0.7-0.8 spelled it off); "
     "LLaMA-Factory accepts auto, disabled, sdpa, fa2, fa3. A wrong value fails only at model load (\"Unknown "
     "attention type\"). " + HOLDS.format(key="flash_attn", value="off")),
    ("infer_backend: ktransformers\n",
     "FD041 `infer_backend: ktransformers` is not a valid choice; LLaMA-Factory accepts huggingface, vllm, sglang. "
     "parse_dict does not check Literal choices: the run fails later, where LLaMA-Factory branches on the value. "
     + HOLDS.format(key="infer_backend", value="ktransformers")),
])
def test_an_unverified_choice_reads_as_before(tmp_path, monkeypatch, text, message):
    # the parity corpus reaches no choice problem that only some releases have: unverified-config-problem's two
    # parts (the hint by item.case, the ending and the condition by item.ending), as keyschema.py wrote them before
    from finetune_doctor.readers.config import lfrelease

    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    assert _messages(tmp_path, text) == [message]


def test_a_choice_reads_as_before(tmp_path):
    # a hint and an ending of each kind the corpus reaches (pinned there too, against main 602693a)
    got = _messages(tmp_path, "lr_scheduler_type: Cosine\nsave_strategy: true\nreport_to: wandbb\n", "lf", "0.9.5")
    assert got[:2] == [
        "FD003 `lr_scheduler_type: Cosine` is not a valid choice (choices are case-sensitive: cosine); LLaMA-Factory "
        "accepts linear, cosine, cosine_with_restarts, polynomial, constant, constant_with_warmup, inverse_sqrt, "
        "reduce_lr_on_plateau, cosine_with_min_lr, cosine_warmup_with_min_lr, warmup_stable_decay, greedy. "
        "transformers converts it to SchedulerType while parsing and stops with \"... is not a valid SchedulerType\".",
        "FD003 `save_strategy: true` is not a valid choice (YAML 1.1 reads on/off/yes/no/true/false as a boolean); "
        "LLaMA-Factory accepts no, steps, epoch, best. transformers converts it to SaveStrategy while parsing and "
        "stops with \"... is not a valid SaveStrategy\".",
    ], got
