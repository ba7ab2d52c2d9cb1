"""LLaMA-Factory's start-up refusals of a config, read from the exception that ended a run (issue #25).

Two checks LLaMA-Factory makes before anything trains stop the run with a message that names the config's fault
itself, so a log holding that message is as good as the config for the rule that owns the fault:

* transformers' ``HfArgumentParser.parse_dict`` with ``allow_extra_keys=False`` (hf_argparser.py: "Some keys are
  not used by the HfArgumentParser: [...]"; LLaMA-Factory's hparams/parser.py ``_parse_args``): each listed key is
  judged by the key schema (readers/config/keyschema.py ``check_keys``, the one judge of keys); one it knows from
  another release (renamed or retired) becomes an item of
  rules/unknown-key.yaml or rules/renamed-key.yaml, worded by their ``check/fate`` table (the fate is ``stops``:
  the log shows the stop);
* LLaMA-Factory's dataset registry (data/parser.py ``get_dataset_list``: "Undefined dataset {name} in
  {DATA_CONFIG}."): an item of rules/dataset-not-defined.yaml's ``log`` case.

Only a problem the schema states without a condition is kept: a key whose fault depends on a transformers or
LLaMA-Factory version the log does not give is left to run-crashed's reading (crashcause.py ``_unused_keys``),
which says so. The shapes are those of facts/lint.py ``KEY_ITEM``, so the rules read one item shape.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.crashcause import UNUSED_KEYS
from finetune_doctor.analyzers.postmortem.msgcause import UNDEFINED_DATASET
from finetune_doctor.readers.config.keyschema import check_keys

KEY_KINDS = ("unknown", "renamed")
"""The key problems a parser's refusal is reported as (rules/unknown-key.yaml, rules/renamed-key.yaml)."""
OTHER_RELEASE = ("renamed", "renamed-undated", "retired", "retired-undated", "old-spelling")
"""The key schema's openings (keyschema.py OPENING_CHECKS) of a key the catalogue knows from another LLaMA-Factory
release: the refusal then has one cause, a config written for that release. A key no release declares is left to
run-crashed, whose reading (crashcause.py ``_unused_keys``) weighs a typo against a fork's or another tool's key."""


def refused_keys(crash: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The keys the exception of `crash` (causes.py ``crash_facts``: ``msg``, ``location``) says the argument parser
    refused that the key schema knows from another release (`OTHER_RELEASE`), each judged as a training config's key: a list of dicts with facts/lint.py
    ``KEY_ITEM``'s fields plus ``location`` (the log line) and ``quote`` (the refused list as printed). A key cut at
    the end of a cut line is dropped; keys the schema declares (a training key given to another subcommand) and
    problems with a version condition are left out. [] without such a message. Never raises."""
    msg = str((crash or {}).get("msg") or "")
    m = UNUSED_KEYS.search(msg)
    if m is None:
        return []
    keys = [k.strip().strip("'\"") for k in m.group("keys").split(",")]
    keys = [k for k in (keys if m.group("end") else keys[:-1]) if k]
    quote = m.group(0)
    out = []
    for p in check_keys({k: None for k in keys}, env={}, parser="train"):
        if p.kind not in KEY_KINDS or p.check not in OTHER_RELEASE or p.condition or p.fate != "stops":
            continue
        # the fix the schema words from the value; the log gives no value, so the rename is said without one
        hint = f"rename `{p.key}` to `{p.replacement_key}`" if p.kind == "renamed" and p.replacement_key else p.suggestion
        out.append({"key": p.key, "kind": p.kind, "message": p.message, "suggestion": hint,
                    "replacement": p.replacement_key, "fix": None, "fix_value": None, "condition": None,
                    "inert": False, "fate": p.fate, "check": p.check, "args": dict(p.args or {}),
                    "ending": p.ending, "case": f"{p.check}/{p.fate}", "override": False, "line": None,
                    "location": (crash or {}).get("location"), "quote": quote})
    return out


def undefined_dataset(crash: dict[str, Any] | None) -> list[dict[str, Any]]:
    """LLaMA-Factory's "Undefined dataset X in dataset_info.json." in the exception of `crash`: [one dict with
    ``key`` "dataset", ``kind`` "dataset", ``check`` "log", ``args`` {name, file}, ``location`` and ``quote``], or
    []. The file is the registry's name as printed (its folder, dataset_dir, is not in the message)."""
    msg = str((crash or {}).get("msg") or "")
    m = UNDEFINED_DATASET.search(msg)
    if m is None:
        return []
    return [{"key": "dataset", "kind": "dataset", "message": None, "suggestion": None, "replacement": None,
             "fix": None, "fix_value": None, "condition": None, "override": False, "line": None,
             "check": "log", "args": {"name": m.group("name"), "file": m.group("file")},
             "location": (crash or {}).get("location"), "quote": m.group(0).rstrip(".")}]
