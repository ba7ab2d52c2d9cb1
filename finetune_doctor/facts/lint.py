"""``lint``: what is wrong with the keys of a config as written, before anything is resolved.

* ``keys``: one item per key problem of readers/config/keyschema.py (unknown, renamed, retired, derived, wrong type,
  invalid value), with the line it is on and whether the value came from a ``key=value`` override;
* ``ds_missing``: the ``deepspeed:`` path that did not resolve, when the command reads on without it;
* ``model_unresolved``: the model whose config.json was found nowhere (or was unusable), when the command reads on;
* ``unused_suppressions``: suppression comments that hid nothing (engine/suppression.py), filled by the judge;
* ``rule_failures``: rules whose evaluation raised on this file (engine/evaluate.py), filled by the judge.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.facts.tmpladvice import (export_merge_quantized, ref_model_fix_state, reasoning_template,
                                               template_mismatch)
from finetune_doctor.facts import cutpaste
from finetune_doctor.facts.schema import LOCATION, F, Namespace
from finetune_doctor.analyzers.config.launch import CHECK_NAMES, check_launch
from finetune_doctor.readers.config.keyschema import (CHOICE_CHECKS, CHOICE_ENDINGS, OPENING_CHECKS, TYPE_CHECKS,
                                                      TYPE_ENDINGS, VALUE_CHECKS, check_keys)
from finetune_doctor.readers.config.yamlcfg import ConfigDoc
from finetune_doctor.readers.config.lfkind import COMMANDS
from finetune_doctor.readers.config.lfnarrow import bridging_build, old_evidence

# an undeclared key's opening with its fate (keyschema OPENING_CHECKS x KeyProblem.fate): one case each
OPENING_CASES = tuple(f"{c}/{f}" for c in OPENING_CHECKS for f in ("stops", "drops"))
KEY_ITEM = {
    "key": F("str", "the key as written (dotted for nested keys)"),
    "kind": F("str", "unknown | renamed | retired | derived | wrong_type | invalid_value | not_here (a path "
                     "the training machine may hold: not checked here) | ..."),
    "message": F("str", "what is wrong, in LLaMA-Factory's or transformers' terms (None for a launch check, \"\" "
                        "for a key-schema check: their words are their rule's, `check`)"),
    "check": F("str", "the launch check (analyzers/config/launch.py CHECK_NAMES), key-schema value check "
                      "(readers/config/keyschema.py VALUE_CHECKS, TYPE_CHECKS, CHOICE_CHECKS) or undeclared "
                      "key's opening (OPENING_CHECKS) "
                      "that found it: the case of its rule's message table (an opening's with its fate: `case`); "
                      "None for the other key-schema problems and v1's",
              values=(*CHECK_NAMES, *VALUE_CHECKS, *TYPE_CHECKS, *CHOICE_CHECKS, *OPENING_CHECKS)),
    "ending": F("str", "for a value of the wrong kind or not among the choices: where it fails (readers/config/"
                       "keyschema.py TYPE_ENDINGS, CHOICE_ENDINGS), the second part of invalid-value's and "
                       "unverified-config-problem's message; None for the others",
              values=(*TYPE_ENDINGS, *CHOICE_ENDINGS)),
    "args": F("dict", "the values a check's message case shows (as written in the config)", open=True),
    "suggestion": F("str", "did-you-mean key, when one is close"),
    "replacement": F("str", "the key that replaces a renamed/retired one"),
    "fix": F("str", "short title of the fix"),
    "fix_value": F("any", "the value the fix writes"),
    "condition": F("str", "when the problem applies (e.g. a version range)"),
    "fate": F("str", "what LLaMA-Factory does with a key its parser does not declare: stops | drops "
                     "(ALLOW_EXTRA_ARGS set) | None; the rules word it with the opening (`case`)",
              values=("stops", "drops")),
    "was": F("str", "for kind unverified: the kind the problem has when its condition holds"),
    "case": F("str", "the case of the message table of unknown-key, renamed-key, derived-key and (kind unverified) "
                     "unverified-config-problem: `check/fate` for a key-schema opening (OPENING_CHECKS), else, for "
                     "kind unverified, the check's name; None for the others",
              values=(*CHECK_NAMES, *VALUE_CHECKS, *CHOICE_CHECKS, *OPENING_CASES)),
    "decide": F("str", "for kind unverified: the inputs that would decide the condition (--llamafactory VERSION or "
                       "--env FILE, ...), none of them given"),
    "unsaid": F("str", "for kind unverified: the clause after the condition, `, which the inputs do not say`, or "
                       "what an input file states of it first (`_unsaid`)"),
    "unran": F("str", "for kind unverified: the same clause after a release list, `; the inputs do not say which "
                      "one ran`, or what an input file states"),
    "line": F("int", "1-based line of the key in the config"),
    "override": F("bool", "the value was given as key=value on the command line"),
    "inert": F("bool", "deleting the key changes nothing: a retired key at the default it had where it was read"),
}
UNUSED_ITEM = {
    "code": F("str", "code or rule name as written in the comment"),
    "line": F("int", "line of the comment"),
    "file": F("str", "the file holding the comment"),
    "scope": F("str", "line | file", values=("line", "file")),
    "reason": F("str", "unused | unknown", values=("unused", "unknown")),
    "comment": F("str", "the comment's form with this code, as written: `# doctor: ignore[CODE]`"),
    "case": F("str", "the message the comment takes (rules/unused-suppression.yaml)",
              values=("unknown", "unused_line", "unused_file")),
    "location": LOCATION(),
}

NAMESPACE = Namespace("lint", __doc__.split("\n\n")[0], {
    "keys": F("list", "key problems", items=KEY_ITEM),
    "ds_missing": F("dict", "the deepspeed path that did not resolve", fields={
        "value": F("str", "the path as written"), "message": F("str", "why it did not resolve"),
        "machine_dependent": F("bool", "lint: the training machine may hold it (not checked here unless --strict)")}),
    "accelerate": F("dict", "the accelerate config's FSDP wrapping (facts/accel.py; None without one)", fields={
        "file": F("str", "the accelerate config"), "distributed_type": F("str", "FSDP | DEEPSPEED | MULTI_GPU | ..."),
        "auto_wrap_policy": F("str", "fsdp_auto_wrap_policy as written"),
        "cls_to_wrap": F("any", "fsdp_transformer_layer_cls_to_wrap as written (None: absent)"),
        "fsdp_version": F("any", "fsdp_version as written")}),
    "unused_suppressions": F("list", "suppression comments that hid nothing", items=UNUSED_ITEM),
    "rule_failures": F("list", "rules whose evaluation raised on this file, filled by the judge (engine/evaluate.py)",
                       items={"code": F("str", "the failing rule's code"), "name": F("str", "its name"),
                              "rule_file": F("str", "the rule file"), "error": F("str", "what it raised")}),
    "standalone_ds": F("bool", "a DeepSpeed JSON linted on its own, without a training config"),
    "assumptions": F("list", "what the command assumed rather than read, verdict-moving first (facts/assume.py)",
                     items={"name": F("str", "stable id"), "value": F("any", "the value used"),
                            "source": F("str", "why"), "alternatives": F("list", "other plausible values"),
                            "effect": F("dict", "total_gib and verdict per alternative"),
                            "resolve_with": F("str", "what removes it"),
                            "moves_verdict": F("bool", "an alternative gives another verdict"),
                            "effect_text": F("str", "each evaluated alternative: total GiB and verdict")}),
    "strict": F("bool", "--strict: verdict-moving assumptions and machine-dependent checks are errors"),
    "keys_dropped": F("int", "key problems beyond MAX_PER_KIND of one kind, counted but not judged one by one"),
    "reasoning_template": F("dict", "a reasoning model under a template that is not the one it wants, for the "
                                    "judged release(s) (facts/tmpladvice.py)", fields={
        "template": F("str", "the config's template"), "want": F("str", "the template to use"),
        "problem": F("str", "plain (no thought block) | format (another model's chat format)",
                     values=("plain", "format")),
        "registered": F("bool", "every judged release registers `want` (None: some do)"),
        "note": F("str", "what the message adds: none | may_predate (some judged releases lack `want`) | "
                         "no_reasoning (none registers a reasoning template: deepseek3)",
                  values=("none", "may_predate", "no_reasoning")),
        "first": F("str", "the first catalogued release that registers `want`"),
        "releases": F("str", "the judged releases ('0.9.2', '0.9.2-0.9.3', 'any release')")}),
    "export_merge_quantized": F("str", "the key that makes an export merge into a quantized model or merge and "
                                       "quantize in one run (facts/tmpladvice.py), None otherwise",
                                values=("quantization_bit", "export_quantization_bit")),
    "ref_model_fsdp_fix": F("str", "whether the judged LLaMA-Factory release(s) prepare a DPO/KTO reference model "
                                   "for FSDP (PR #10127, 0.9.5): none | some | all | unknown "
                                   "(analyzers/postmortem/refmodel.py)", values=("none", "some", "all", "unknown")),
    "template_mismatch": F("dict", "a model under the template of another model generation (facts/tmpladvice.py "
                                   "`template_mismatch`)", fields={
        "template": F("str", "the config's template"), "want": F("str", "the template to use"),
        "model": F("str", "the model family named"),
        "registered": F("bool", "every judged release registers `want` (None: some; False: none)"),
        "registration": F("str", "the same as all | some | none", values=("all", "some", "none")),
        "first": F("str", "the first catalogued release that registers `want`"),
        "releases": F("str", "the judged releases")}),
    "config_kind": F("str", "which LLaMA-Factory command reads the config: train, train-v1, export, export-v1, "
                            "chat, eval (readers/config/lfkind.py)"),
    "lf_version": F("str", "the LLaMA-Factory release(s) the keys were judged for, or 'unknown'"),
    "release_conflicts": F("list", "no version given and the config's keys exist together in no catalogued "
                                   "release (readers/config/lfnarrow.py): one item per config", items={
        "key": F("str", "the first conflicting key, where the finding points"),
        "keys_text": F("str", "each conflicting key with the releases declaring it: '`a` (0.9.2-0.9.6.dev0), ...'"),
        "bridge_text": F("str", "which build could still declare them all: a git install between two consecutive "
                                "versions, or none (lfnarrow.py `bridging_build`)"),
        "range_text": F("str", "the catalogued releases judged: '0.8.0-0.9.6.dev0'")}),
    "old_release_keys": F("list", "no version given, and keys that later releases dropped narrowed the judged "
                                  "releases to old ones (lfnarrow.py `old_evidence`)", items={
        "key": F("str", "the first key of the group"), "keys_text": F("str", "the group's keys: '`a`, `b`'"),
        "count": F("int", "how many keys the group holds"),
        "range_text": F("str", "the releases declaring them: '0.8.0-0.8.2'"),
        "dropped_in": F("str", "the first catalogued release that refuses them"),
        "variant": F("str", "eval-split (an eval config's `split`) | one | several (keys in the group)",
                     values=("eval-split", "one", "several")),
        "task_split": F("str", "an eval config's task name with its split, as releases without `split` read it: "
                                   "'mmlu_test'"),
        "location": LOCATION()}),
    "release_note": F("str", "why the keys were not judged (a stated release older than the catalogue), or ''"),
    "config_suffix": F("str", "the config file's suffix, lower-cased ('.yml')"),
    "vision_pos_embed_trains": F("dict", "the judged LF release freezes the vision tower by keys that miss its "
                                         "position embedding (facts/visionfreeze.py, PR #10139)", fields={
        "model_type": F("str", "the model's type"), "releases": F("str", "the judged releases that miss it"),
        "scope": F("str", "all | some of the judged releases", values=("all", "some")),
        "fixed_in": F("str", "the first release whose keys hold it")}),
    "config_cut": F("dict", "signs that the config file is a cut-off paste (facts/cutpaste.py), None when it shows "
                            "none: rules tagged `absence` then say the file does not set the key", fields={
        "signs": F("list", "empty-last-key | empty-section | open-block | no-schedule"),
        "text": F("str", "the signs as clauses for a message")}),
    "training_section_lost": F("str", "the clause saying a training config sets no key of a training section "
                                      "(facts/cutpaste.py `section_lost`), None when it sets one: opens the verdict, "
                                      "never hedges a rule"),
    "yaml_refused": F("dict", "the file as given is refused by PyYAML, the loader of every LLaMA-Factory release, "
                              "and was read without its cut last line (readers/config/yamlcfg.py "
                              "`_parse_maybe_cut`); None when it loads as it is", fields={
        "line": F("int", "1-based line of the bare word"), "word": F("str", "the word, as written"),
        "message": F("str", "PyYAML's words for the refusal, on one line"),
        "location": LOCATION()}),
    "duplicates": F("list", "keys the config file repeats (`duplicate_facts`)", items={
        "key": F("str", "the key (dotted when nested)"), "line": F("int", "1-based line of the repeat"),
        "first_line": F("int", "1-based line of the first occurrence"),
        "same": F("bool", "the repeat has the same value as the first"),
        "refused": F("bool", "every judged release refuses the file (True), none does (False), some do or the "
                             "release is unknown (None)"),
        "refused_versions": F("str", "the catalogued releases whose loader refuses a repeated key"),
        "kept_versions": F("str", "the catalogued releases that keep the last value"),
        "values_text": F("str", "'the same value' or 'with different values'"),
        "reader_text": F("str", "who keeps the last value: 'LLaMA-Factory V loads the YAML with PyYAML, which' or "
                                "the JSON reader"),
        "dropped_text": F("str", "', so line N has no effect' when the values differ, else ''"),
        "kept_note": F("str", "for a refused file with different values: the releases that kept the last one"),
        "refused_note": F("str", "for a kept YAML: the releases that refuse the file, else ''"),
        "location": LOCATION()}),
    "suffix_read": F("bool", "LF's read_args loads a file of this suffix on every judged release (False: on "
                             "none; None: on some, or the release is unknown and some refuse it)"),
    "suffix_versions": F("str", "the catalogued releases that read the suffix ('0.9.1-0.9.6.dev0')"),
    "suffix_refused": F("str", "the catalogued releases that do not ('0.8.0-0.9.0'; empty: none)"),
    "launch_known": F("bool", "the launcher and rank count were read from the inputs (--gpu, --launch, "
                              "--accelerate-config, the environment), not assumed"),
    "torchrun": F("bool", "the inputs say the run is launched with torchrun (FORCE_TORCHRUN=1, WORLD_SIZE > 1)"),
    "launch_trains": F("str", "the --launch line that starts training (`llamafactory-cli train ...`, torchrun, "
                              "accelerate, deepspeed), as written; None without one"),
    "config_command": F("str", "the command that reads this config kind (lfkind.COMMANDS: llamafactory-cli export, "
                               "...)"),
    "torch_known": F("bool", "the training machine's torch version was read (--torch, --env, its own GPUs)"),
    "bf16_refused": F("bool", "the training machine's torch/transformers raise at start-up on bf16 without bf16 "
                              "units (None: the deciding versions are not known; facts/bf16stack.py)"),
    "bf16_stack": F("str", "the versions bf16_refused was decided on, or what would decide it"),
    "stack_refusals": F("list", "packages whose version every judged LF release refuses at start-up "
                                "(extras/misc.py check_dependencies; facts/stackrange.py)", items={
        "package": F("str", "transformers | datasets | accelerate | peft | trl"),
        "version": F("str", "the version as read"), "source": F("str", "where it was read"),
        "spec": F("str", "the first judged release's requirement ('transformers>=4.51.0,<=4.57.1')"),
        "specs_text": F("str", "every judged release's requirement, '; '-joined"),
        "where": F("str", "the requirement's file:line in the release"),
        "releases": F("str", "the judged releases ('0.9.4', '0.9.2-0.9.6.dev0')"),
        "release_source": F("str", "where the release was read (--llamafactory, the --env file, installed here)"),
        "message": F("str", "the ImportError LF stops with (transformers utils/versions.py)"),
        "certain": F("bool", "one published release read exactly (True), or every release the inputs leave "
                                "open refuses it (False)"),
        "scope": F("str", "all: every judged release refuses it; some: only one of the two releases a version "
                          "between them is judged by", values=("all", "some")),
        "refused_by": F("str", "the judged releases that refuse it ('0.9.1')"),
        "given": F("str", "the LF version as the inputs give it ('0.9.2.dev0')"),
        "advice": F("str", "range: a version inside the range cures it; upgrade-lf / no-release: the model needs a "
                           "transformers the range caps below (lint.tf_conflict)",
                    values=("range", "upgrade-lf", "no-release")),
        "admitted_by": F("str", "the judged releases that do not, each with its requirement ('' when none)")}),
    "model_type_unregistered": F("dict", "the model's model_type is newer than the training machine's transformers "
                                         "(stated or assumed from the LF release's range): facts/tfmodeltype.py",
                                 fields={
        "model_type": F("str", "config.json model_type"),
        "since": F("str", "the first transformers release that registers it"),
        "source_of_since": F("str", "where that is stated (catalog/tf_model_types.json)"),
        "transformers": F("str", "the training machine's transformers, stated or assumed"),
        "stated": F("bool", "read from the inputs (True) or assumed from the LF release (False)"),
        "source": F("str", "where the version was read, or the LF release it was assumed from"),
        "why": F("str", "how an assumed version was chosen"),
        "by_name": F("str", "the model name the type was read from when its config.json was not read (None: read)"),
        "scope": F("str", "all: every judged release's range stops short of it; some: only one of the two releases "
                          "a version between them is judged by", values=("all", "some")),
        "given": F("str", "scope some: the LF version as given ('0.9.3.dev0')"),
        "admitted_by": F("str", "scope some: the judged release whose range admits a transformers that has it")}),
    "tf_conflict": F("dict", "the model's type needs a transformers every judged LF release's start-up range caps "
                             "below: no transformers satisfies both (facts/tfmodeltype.py `conflict`)", fields={
        "model_type": F("str", "config.json model_type"),
        "since": F("str", "the first transformers release that registers it"),
        "source_of_since": F("str", "where that is stated (catalog/tf_model_types.json)"),
        "releases": F("str", "the judged LF releases ('0.9.1')"),
        "release_source": F("str", "where the LF release was read"),
        "specs": F("str", "their transformers requirements, '; '-joined"),
        "first": F("str", "the first later LF release whose range admits `since` or newer ('' when none)"),
        "first_spec": F("str", "that release's transformers requirement"),
        "first_text": F("str", "that release as a message names it, with how to install it"),
        "advice": F("str", "upgrade-lf | no-release", values=("upgrade-lf", "no-release")),
        "by_name": F("str", "the model name the type was read from when its config.json was not read")}),
    "moe_z3_leaf": F("dict", "a ZeRO-3 MoE run on an LF release that does not fetch the MoE block whole "
                             "(facts/moeleaf.py)", fields={
        "model_type": F("str", "the MoE model type"), "releases": F("str", "the judged LF releases"),
        "without": F("str", "the judged releases that do not make its MoE block a ZeRO-3 leaf"),
        "first": F("str", "the first catalogued release that does"),
        "certain": F("bool", "every judged release lacks it"), "where": F("str", "LF's file and function"),
        "variant": F("str", "certain | dev-build | range", values=("certain", "dev-build", "range")),
        "given": F("str", "the LF version as the inputs state it")}),
    "kind_estimate": F("dict", "the estimate of a config that does not train (facts/kinds.py)", fields={
        "kind": F("str", "export | chat"), "fits": F("bool", "fits the GPUs (None: not judged)"),
        "device": F("str", "export: cpu | gpu"), "peak_gib": F("float", "export: peak while merging, GiB"),
        "written_gib": F("float", "export: size of export_dir, GiB"), "backend": F("str", "chat: engine"),
        "weights_gib": F("float", "chat: weights, GiB"),
        "verdict": F("str", "export: fits | at-risk | oom (None: not judged); at-risk when an assumption moves it"),
        "interval_gib": F("list", "export: the peak's range over its load-dtype assumption, GiB (absent: none)"),
        "weights_format": F("str", "the checkpoint's stored quantization (e.g. AWQ 4-bit g128; None: unquantized)"), "kv_gib": F("float", "chat: KV cache at max_len, GiB"),
        "max_len": F("int", "chat: tokens the KV cache is sized for"),
        "reserved_gib": F("float", "chat: vLLM/SGLang's up-front reservation of one card, GiB"),
        "capacity_gib": F("float", "the GPU memory the estimate is judged against, GiB"),
        "host_ram_gib": F("float", "export on the CPU: the host RAM it is judged against, GiB (None: not given)"),
        "cpu_fits": F("bool", "export: export_device cpu would fit the host RAM (None: RAM not given)"),
        "auto_fits": F("bool", "export: export_device auto (device_map auto: GPUs, then host RAM) would fit "
                               "(None: GPUs not given)"),
        "spill_gib": F("float", "export: what device_map auto puts in host RAM, GiB (0: the GPUs hold it)"),
        "gpus_gib": F("float", "export: GPU memory of all visible cards, GiB (None: not given)"),
        "dtype": F("str", "the dtype the weights load in"), "merge_gib": F("float", "export: the merge's working set"), "params_b": F("float", "parameters, billions"),
        "shards": F("int", "export: files of export_size GB written"),
        "quantized_bits": F("int", "export: GPTQ bits, None when not quantized")}),
    "model_unresolved": F("dict", "the model could not be resolved: memory is not estimated", fields={
        "name": F("str", "model_name_or_path as written"), "message": F("str", "why"),
        "sentence": F("str", "message ending in a full stop (one added where it ends in none: facts/config.py)"),
        "missing": F("str", "what was not found"), "fix": F("str", "the one flag or command that supplies it"),
        "config_json": F("str", "file:line of a config.json that was found but is unusable"),
        "not_here": F("bool", "a local path that is not on this machine (lint: not checked here unless --strict; "
                               "check and estimate: model-unresolved, FD607)"),
        "parse_limit": F("bool", "a config.json was read but lacks a field where the doctor looks for it: the "
                                 "doctor's limit (model-config-not-understood)"),
        "why": F("str", "why it is not sized (facts/nothere.py)",
                 values=("path-not-here", "hub-not-here", "parse-limit", "unknown"))}),
})


MAX_PER_KIND = 1000
"""Key problems of one kind (unknown, renamed, ...) judged one by one per file. Each costs about 1 ms of rule
evaluation; a file of 100k unknown keys (issue 27) is reported by its first 1,000 and a count of the rest."""

KEY_FIELDS = ("key", "kind", "message", "suggestion", "replacement_key", "fix", "fix_value", "condition", "inert",
              "fate", "check", "args", "decide", "ending")


def _problems(doc: ConfigDoc, transformers_version: str | None, release: Any, kind: str) -> list[Any]:
    """The key and parse-time problems of `doc` for the LF command that reads it (readers/config/lfkind.py)."""
    if kind in ("train-v1", "export-v1"):
        from finetune_doctor.readers.config.lfv1 import check_v1, no_v1

        refused = no_v1(doc.values, release)
        return [refused] if refused else check_v1(doc.values, release=release)
    if getattr(release, "older", False):
        # a release before the catalogue's first: which keys, values and templates it reads is not known here, so
        # none is judged (a rename "last accepted in v0.6" is wrong for a user on 0.6); the launch checks stand
        if kind != "train":
            return []   # the launch checks are the training parser's; chat/export/eval read only the template
        return [p for p in check_launch(doc.values, doc.path, None) if p.get("kind") != "template"]
    if kind == "train":
        return [*check_keys(doc.values, transformers_version=transformers_version, release=release),
                *check_launch(doc.values, doc.path, release, transformers_version)]
    # export, chat, eval: LF's infer/eval parsers; of the launch checks only the template lookup applies
    return [*check_keys(doc.values, transformers_version=transformers_version, release=release, parser="any"),
            *[p for p in check_launch(doc.values, doc.path, release) if p.get("kind") == "template"]]


def _unverified(condition: str | None, transformers_version: str | None) -> bool:
    """A condition that names a version or build the inputs did not give: the problem may not apply."""
    if not condition:
        return False
    return (condition.startswith("LLaMA-Factory ") or condition.startswith("stock transformers")
            or (condition.startswith("transformers ") and not transformers_version))


def _decide(condition: str, transformers_version: str | None, release_source: str = "") -> str:
    """The flags that would decide an unverified `condition`, never one the user gave (trial 4: FD041 said "pass
    --transformers VERSION" right after --transformers 5.2.0 was passed, for a key only LF's release decides)."""
    if condition.startswith("LLaMA-Factory ") and "so its commit decides" in condition and release_source \
            and release_source not in ("--llamafactory", "installed here", "not given"):
        # the dev version came from the training machine's own env output (trial 9: "pass --env" after --env);
        # `_unsaid` has named that file and its version just before
        return ("the `Git commit` line of `llamafactory-cli env` (or `git log -1` in the LLaMA-Factory checkout) "
                "gives it")
    if condition.startswith("LLaMA-Factory ") and "so its commit decides" in condition:
        # --llamafactory named a build between releases (trial 6: 0.9.3.dev0): another version flag cannot help
        return "pass --env FILE from the training machine (`llamafactory-cli env`) to decide it"
    if condition.startswith("LLaMA-Factory "):
        told = f" (transformers {transformers_version}, given, does not decide it)" if transformers_version else ""
        return "pass --llamafactory VERSION or --env FILE to decide it" + told
    if transformers_version:   # "stock transformers ...": the build, not the version, is open
        return "pass --env FILE from the training machine to decide it"
    return "pass --transformers VERSION or --env FILE to decide it"


def _stated_dev(condition: str, release: Any) -> str | None:
    """The input that states the development build a commit-dependent `condition` is about (the --env file, a log's
    `llamafactory` version line, --llamafactory), or None: the version came from this machine or nowhere."""
    source = str(getattr(release, "source", "") or "")
    if condition.startswith("LLaMA-Factory ") and "so its commit decides" in condition and source \
            and source not in ("installed here", "not given"):
        # --llamafactory 0.9.2.dev0 states the build as much as an env file does (session 12's leftover: it was
        # followed by "the inputs do not say which one ran")
        return source
    return None


def _unsaid(condition: str, release: Any) -> tuple[str, str]:
    """The clauses between an unverified condition and what decides it (`unsaid` after a condition, `unran` after
    a release list). When an input file states the version, that is said first: the inputs do say which release
    ran, a build between two, and only its commit is open (issue #25: "the inputs do not say which one ran" was
    followed by the file that named 0.9.2.dev0)."""
    source = _stated_dev(condition, release)
    if source is None:
        return ", which the inputs do not say", "; the inputs do not say which one ran"
    stated = f"; {source} states LLaMA-Factory {getattr(release, 'given', None)}, but not the commit it was built from"
    return stated, stated


def _bridge_text(keys: list[str]) -> str:
    """The clause of keys-of-no-one-release (FD040) that says which build, if any, could still run the config:
    readers/config/lfnarrow.py `bridging_build`."""
    gap = bridging_build(keys)
    if gap is None:
        return "No build of LLaMA-Factory, released or from git, declares them all."
    return (f"Only a git install between {gap[0]} and {gap[1]} could declare them all: if that is what runs, pass "
            f"its version (`llamafactory-cli env` prints e.g. {_dev_of(gap[1])}) with --llamafactory to judge "
            f"the config for it.")


def _dev_of(version: str) -> str:
    """The development version string a git install before `version` prints (``0.9.2`` -> ``0.9.2.dev0``)."""
    return version if ".dev" in version else f"{version}.dev0"


def assemble(doc: ConfigDoc | None, transformers_version: str | None = None, *, release: Any = None,
             kind: str = "train", launch: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``lint`` facts of `doc` (None: a DeepSpeed JSON on its own, no keys to check): the key schema's problems
    (readers/config/keyschema.py, for the training machine's transformers and the LF `release` when known, see
    readers/config/lfrelease.py) and LLaMA-Factory's launch-time checks (analyzers/config/launch.py), or v1's (readers/config/lfv1.py)
    for a v1 config. A problem whose condition names a version the inputs did not give becomes kind
    ``unverified`` (rule unverified-config-problem: a warning, not an error), its own kind kept in ``was``.
    `launch` is facts/kinds.py `launch_facts`."""
    if doc is None:
        return {"keys": [], "standalone_ds": True, "assumptions": [], "strict": False}
    out = []
    per_kind: dict[str, int] = {}
    dropped = 0
    for p in _problems(doc, transformers_version, release, kind):
        p = p if isinstance(p, dict) else {k: getattr(p, k, None) for k in KEY_FIELDS}
        problem_kind = str(p.get("kind"))   # not `kind`: that is the config's kind, reported below
        per_kind[problem_kind] = per_kind.get(problem_kind, 0) + 1
        if per_kind[problem_kind] > MAX_PER_KIND:
            dropped += 1
            continue
        d = {k: p.get(k) for k in KEY_FIELDS}
        d["replacement"] = d.pop("replacement_key")
        d["line"] = doc.line_of(d["key"])
        # a value given as key=value on the command line is judged there, whether or not the file has the key
        d["override"] = any(k == d["key"] or k.startswith(d["key"] + ".") for k in doc.overrides)
        # an undeclared key's rule words its opening and its fate together (the case `check/fate`)
        d["case"] = f"{d['check']}/{d['fate']}" if d["fate"] else None
        d["args"] = _why_for_kind(d, kind)
        if _unverified(d["condition"], transformers_version):
            d["was"], d["kind"] = d["kind"], "unverified"
            # one rule words every unverified problem: its table switches on the check (whose sentence the
            # launch check no longer carries) or, for an undeclared key, on its opening and fate
            d["case"] = d["case"] or d["check"]
            d["decide"] = _decide(d["condition"], transformers_version, str(getattr(release, "source", "") or ""))
            d["unsaid"], d["unran"] = _unsaid(d["condition"], release)
        out.append(d)
    rel = ("unknown" if release is None or not release.known
           else str(release.given) if getattr(release, "older", False) else ",".join(release.versions))
    clash = getattr(release, "conflict", ())
    conflicts = [{"key": clash[0][0], "keys_text": ", ".join(f"`{k}` ({s})" for k, s in clash),
                  "range_text": f"{release.versions[0]}-{release.versions[-1]}",
                  "bridge_text": _bridge_text([k for k, _ in clash])}] if clash else []
    return {"keys": out, "keys_dropped": dropped, "assumptions": [], "strict": False, "config_kind": kind,
            **dict(zip(("config_cut", "training_section_lost"), cutpaste.cut_facts(doc, kind))),
            "yaml_refused": _yaml_refused(doc),
            **suffix_facts(doc.path, release), "duplicates": duplicate_facts(doc, release),
            "lf_version": rel, "release_conflicts": conflicts, "old_release_keys": _old_keys(doc, release, kind),
            "release_note": release.note if getattr(release, "older", False) else "",
            "launch_trains": None, "config_command": COMMANDS.get(kind or "train"), "stack_refusals": [],
            "model_type_unregistered": None, "tf_conflict": None, "moe_z3_leaf": None,
            "vision_pos_embed_trains": None,
            "reasoning_template": reasoning_template(doc.values, release),
            "ref_model_fsdp_fix": ref_model_fix_state(release),
            "export_merge_quantized": export_merge_quantized(doc.values, kind),
            "template_mismatch": template_mismatch(doc.values, release),
            **(launch or {"launch_known": False, "torchrun": False, "torch_known": False, "bf16_refused": None,
                          "bf16_stack": "the training machine's torch and transformers (not given) decide whether "
                                        "it starts"})}


def suffix_facts(path: str, release: Any) -> dict[str, Any]:
    """Whether LLaMA-Factory's ``read_args`` loads `path` as a config on the judged `release` (readers/config/
    lfrelease.py `Release.suffix_versions`): ``config_suffix`` (".yml"), ``suffix_read`` (True: every release of
    the selection reads it; False: none does; None: some do, or the release is not known and some refuse it),
    ``suffix_versions`` (the catalogued releases that read it, "0.9.1-0.9.6.dev0") and ``suffix_refused`` (those
    that do not)."""
    from pathlib import Path

    from finetune_doctor.readers.config.lfrelease import choose, load

    suffix = Path(path or "").suffix.lower()
    out: dict[str, Any] = {"config_suffix": suffix, "suffix_read": True, "suffix_versions": "",
                           "suffix_refused": ""}
    if suffix not in (".yaml", ".yml", ".json"):
        return out   # another kind of file (a --launch script, a DeepSpeed JSON on its own): not LF's to read
    allv = load()["versions"]
    every = choose(None).suffix_versions(suffix)
    refused = [v for v in allv if v not in every]
    span = (lambda vs: "" if not vs else vs[0] if len(vs) == 1 else f"{vs[0]}-{vs[-1]}")
    out.update(suffix_versions=span(every), suffix_refused=span(refused))
    if release is None or not release.known:
        out["suffix_read"] = None if refused else True
        return out
    reads = release.suffix_versions(suffix)
    out["suffix_read"] = True if len(reads) == len(release.versions) else (False if not reads else None)
    return out


OMEGACONF_FROM = "0.9.4"
"""The first LLaMA-Factory release whose ``read_args`` loads a YAML config with ``OmegaConf.load`` (hparams/parser.py
of the published wheels: 0.8.0-0.9.1 ``HfArgumentParser.parse_yaml_file``, 0.9.2-0.9.3 ``yaml.safe_load``, both of
which keep a repeated key's last value; 0.9.4, 0.9.5 and main ``OmegaConf.load``). OmegaConf's YAML loader refuses a
repeated key with ``ConstructorError ... found duplicate key`` (omegaconf/_yaml.py:203 in 2.4.0, checked by loading
trial 8's case LlamaFactory#8150 with it). A JSON config is read with json.load on every release: the last wins."""


def duplicate_facts(doc: ConfigDoc, release: Any) -> list[dict[str, Any]]:
    """``lint.duplicates``: each key `doc` repeats, with whether the judged `release` refuses the file (True: all
    of its versions do; False: none; None: some, or the release is unknown or only the one installed here —
    facts/kinds.py then records the assumption `duplicate-key`). Versions: readers/config/lfrelease.py's catalogue; the loaders: OMEGACONF_FROM."""
    from pathlib import Path

    from finetune_doctor.readers.config.lfrelease import load

    if not doc.duplicates:
        return []
    yaml_file = Path(doc.path or "").suffix.lower() in (".yaml", ".yml") or doc.path == "<stdin>"
    allv = load()["versions"]   # the catalogue's releases, oldest first
    refuses = (lambda v: yaml_file and v in allv and allv.index(v) >= allv.index(OMEGACONF_FROM))
    span = (lambda vs: "" if not vs else vs[0] if len(vs) == 1 else f"{vs[0]}-{vs[-1]}")
    # the llamafactory installed here is not necessarily the training machine's: open, as for the config suffix
    judged = (list(release.versions) if release is not None and release.known and release.source != "installed here"
              else [])
    n = sum(1 for v in judged if refuses(v))
    refused = None if not judged or 0 < n < len(judged) else n == len(judged)
    rv, kv = span([v for v in allv if refuses(v)]), span([v for v in allv if not refuses(v)])
    # the message variants as facts: lint rule messages hold no inline conditionals (tests/test_rule_registry.py)
    reader = (f"LLaMA-Factory {','.join(judged) or kv} loads the YAML with PyYAML, which" if yaml_file
              else "a JSON config is read with json.load, which")
    return [{**d, "refused": refused, "refused_versions": rv, "kept_versions": kv,
             "values_text": "the same value" if d["same"] else "with different values", "reader_text": reader,
             "dropped_text": "" if d["same"] else f", so line {d['first_line']} has no effect",
             "kept_note": "" if d["same"] else f" (releases {kv} kept the last value)",
             "refused_note": f"; releases {rv} (OmegaConf.load) refuse the file" if yaml_file and rv else "",
             "location": {"file": doc.path, "line": d["line"], "column": 1, "key": d["key"]}}
            for d in doc.duplicates]


def dropped_note(path: str, facts: dict[str, Any]) -> list[str]:
    """The note for key problems past facts/lint.py MAX_PER_KIND of one kind (counted, not judged one by one)."""
    lint = facts.get("lint") or {}
    n = lint.get("keys_dropped") or 0
    out = [f"{path}: {n} more key problems of a kind reported 1,000 times were counted, not listed"] if n else []
    return out + ([f"{path}: {lint['release_note']}"] if lint.get("release_note") else [])


def _yaml_refused(doc: Any) -> dict[str, Any] | None:
    """``lint.yaml_refused`` of a `ConfigDoc`: its ``refused`` record with the location of the cut line."""
    r = getattr(doc, "refused", None)
    if not r:
        return None
    return {**r, "location": {"file": doc.path, "line": r["line"], "column": 1, "key": None}}


def _old_keys(doc: Any, release: Any, kind: str | None) -> list[dict[str, Any]]:
    """``lint.old_release_keys``: lfnarrow.py `old_evidence` grouped by the releases that declare the keys, one item
    per group pointing at its first key (LF's Ray example of 0.9.2-0.9.4 carries four keys that 0.9.5 dropped:
    one finding, not four). An eval config's ``split`` is its own case: the releases that declared it indexed the
    benchmark with ``data_args.split``, the later ones read the split from the task name (eval/evaluator.py
    ``eval``: ``task.split("_")``; examples/train_lora/llama3_lora_eval.yaml ``task: mmlu_test``; LlamaFactory#5843)."""
    task = str(doc.values.get("task") or "mmlu").split("_", 1)[0] + "_" + str(doc.values.get("split") or "test")
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key, span, dropped in old_evidence(release):
        variant = "eval-split" if kind == "eval" and key == "split" else "default"
        groups.setdefault((span, dropped, variant), []).append(key)
    return [{"key": keys[0], "keys_text": ", ".join(f"`{k}`" for k in keys), "count": len(keys),
             "range_text": span, "dropped_in": dropped, "task_split": task,
             "variant": variant if variant != "default" else ("one" if len(keys) == 1 else "several"),
             "location": {"file": doc.path, "line": doc.line_of(keys[0]), "column": 1, "key": keys[0]}}
            for (span, dropped, variant), keys in groups.items()]


def _why_for_kind(d: dict[str, Any], kind: str | None) -> Any:
    """A retired key's ``args`` with its explanation for the config's kind when the key schema has one
    (catalog/lf_keys.json ``retired.<key>.explanation_by_kind``, from scripts/lf_key_tables.py): an eval config's
    `split` moved into the task name, a training config's into dataset_info.json (trial 18, LlamaFactory#5843)."""
    args = d.get("args")
    if not str(d.get("check") or "").startswith("retired") or not isinstance(args, dict):
        return args
    from finetune_doctor.readers.config.keyschema import load_schema

    alt = ((load_schema().get("retired") or {}).get(str(d.get("key"))) or {}).get("explanation_by_kind") or {}
    return {**args, "why": alt[kind]} if kind in alt else args
