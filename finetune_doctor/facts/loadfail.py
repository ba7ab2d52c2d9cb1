"""A postmortem's load failure read against the model type's transformers requirement (trial 12, LlamaFactory#10235).

When a run dies loading the model or its processor, and the model's ``model_type`` needs a newer transformers
than the run had, the version is the cause to name first: the fact is the one ``lint`` states as
``lint.model_type_unregistered`` (rules FD052/FD053), computed by facts/tfmodeltype.py `unregistered` from
catalog/tf_model_types.json (the first transformers release registering each type, with its source). The load
failures it explains, as the upstream code words them:

- transformers models/auto/configuration_auto.py (``AutoConfig.from_pretrained``): "The checkpoint you are trying
  to load has model type `X` but Transformers does not recognize this architecture", and in older releases the
  bare ``KeyError: 'X'`` from ``CONFIG_MAPPING[config_dict["model_type"]]``;
- transformers models/auto/auto_factory.py (``_BaseAutoModelClass.from_config/from_pretrained``): "Unrecognized
  configuration class ... for this kind of AutoModel"; processing_auto.py / tokenization_auto.py: "Unrecognized
  processing class", "Unrecognized model in";
- LLaMA-Factory data/mm_plugin.py:178 at the snapshot (``_validate_input``): "Processor was not found, please
  check and update your model file." — AutoProcessor of a transformers that does not know the model's processor
  returns a tokenizer, which LF's loader drops (model/loader.py ``load_tokenizer``).

Only the standard library and facts modules are imported: no torch.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.kindwords import NEW_TYPE_RELEASES, family_type
from finetune_doctor.analyzers.postmortem.saidstack import version_text
from finetune_doctor.facts import tfmodeltype

LOAD_FAILURE = re.compile(r"does not recognize this architecture|Unrecognized configuration class|"
                          r"Unrecognized processing class|Unrecognized model in|Processor was not found")


def _is_load_failure(crash: dict[str, Any], mtype: str | None) -> bool:
    text = f"{crash.get('msg') or ''} {crash.get('text') or ''}"
    if LOAD_FAILURE.search(text):
        return True
    # transformers before the "does not recognize" wording: CONFIG_MAPPING["X"] raised a bare KeyError
    return bool(mtype) and crash.get("cls") == "KeyError" and f"'{mtype}'" in text


def _model_type(facts: dict[str, Any]) -> str | None:
    got = (facts.get("lint") or {}).get("model_type_unregistered")
    if got:
        return got["model_type"]
    mtype = (facts.get("model") or {}).get("model_type")
    if mtype and mtype in tfmodeltype.load():
        return str(mtype)
    name = ((facts.get("cfg") or {}).get("model_name_or_path")) or (facts.get("model") or {}).get("name")
    return tfmodeltype.type_by_name(str(name)) if name else None


def version_first(facts: dict[str, Any], versions: dict[str, tuple[str, str]], words: str = "") -> None:
    """Put the model type's transformers requirement first in ``ev.crash.cause`` when the crash is a load failure
    (module docstring). `versions` are {package: (version, where)} from --transformers / --env, then the versions
    the logs print (``ev.stack``). Stated and too old: the requirement is the cause, the earlier cause follows as
    what else to check. Not stated: the requirement is named with "the inputs do not say which transformers ran".
    Stated and new enough, no catalogued type, or no load failure: nothing changes. Without a config, the model
    is the one `words` (the user's words of the files read, FileEvidence.said) or the exception's own line name."""
    ev = facts.get("ev") or {}
    crash = ev.get("crash")
    if not crash:
        return
    mtype = _model_type(facts)
    cause = crash.get("cause") or {}
    if mtype is None and crash.get("cls") == "KeyError" and (
            cause.get("kind") != "raised-at" or "transformers" in str(cause.get("text"))):
        # no model known (a postmortem without --config): a KeyError whose key is a catalogued model type, raised
        # inside transformers or pasted alone, is CONFIG_MAPPING's own failure in the transformers releases before
        # the "does not recognize" wording (a KeyError the traceback shows raised in the user's code is not)
        key = re.match(r"\s*['\"]([\w.-]+)['\"]", str(crash.get("msg") or ""))
        mtype = key.group(1) if key and key.group(1) in tfmodeltype.load() else None
    if mtype is None and LOAD_FAILURE.search(str(crash.get("msg") or "")):
        # no config: a model the words on the exception's own line name ("微调gemma3报错: ValueError: Processor was
        # not found ..."), by the catalogue's name patterns or a family as users write it (round 10's kind)
        head = words + " " + str(crash.get("text") or "").split(str(crash.get("msg") or "\0"))[0]
        mtype = tfmodeltype.type_by_name(head) or family_type(head)
    row = tfmodeltype.load().get(str(mtype)) if mtype else None
    if row is None or not _is_load_failure(crash, mtype):
        return
    stack = {k: (v["version"], v["source"]) for k, v in (ev.get("stack") or {}).items()
             if isinstance(v, dict) and v.get("version")}
    stated = versions.get("transformers") or stack.get("transformers")
    need = f"the model's type `{mtype}` needs transformers >= {row['since']} ({row['source']})"
    if stated is not None:
        got = tfmodeltype.unregistered(mtype, stated[0], True, stated[1])
        if got is None:
            return
        lead = (f"{need}, and this run's transformers is {stated[0]} ({stated[1]}): a transformers that does not "
                f"register `{mtype}` cannot build its config or processor, which is what fails here; install "
                f"transformers>={row['since']} with a LLaMA-Factory whose range admits it (`doctor lint CONFIG "
                f"--transformers {row['since']}` checks)")
    else:
        lead = (f"{need}; the inputs do not say which transformers ran (--transformers VERSION or --env FILE "
                f"decides it): if it is older, that is the cause, as such a transformers cannot build the "
                f"model's config or processor")
    old = crash.get("cause")
    text = lead + (f". If the version is not it: {old['text']}" if old and old.get("text") else "")
    crash["cause"] = {"kind": "model-type-needs-transformers", "text": text,
                      "was": old.get("kind") if old else None}
    crash["cause_text"] = f" — {text}"


# a model type the user's words name: "model type `qwen3` ...", "model_type qwen2_vl", "KeyError: 'qwen3_moe'"
_SAID_TYPE = re.compile(r"model[_ ]type\s*[:=]?\s*[`'\"]?(?P<a>[a-z][\w.-]*)|KeyError\W{0,3}(?P<b>[a-z][\w.-]*)", re.I)


def said_type_need(facts: dict[str, Any], versions: dict[str, tuple[str, str]]) -> None:
    """Add to ``ev.said.stack_text`` the transformers a model type the user's words name needs (a version conflict
    or an error said in words: "model type qwen2_vl not recognised", "KeyError: 'qwen3'", a model name
    catalog/tf_model_types.json ``names`` maps to its type, or a family as users write it: kindwords.family_type),
    from the same catalogue as `version_first`. With a transformers stated (`versions`: --env, the flags, a
    pasted environment; or the words themselves) it says whether that release registers the type; without one it
    asks for it. Nothing changes for an uncatalogued
    type or when no type is named."""
    said = (facts.get("ev") or {}).get("said")
    if not said or said.get("symptom") not in ("version", "error"):
        return
    text = str(said.get("text") or "")
    m = _SAID_TYPE.search(text)
    mtype = (m.group("a") or m.group("b")).lower() if m else None
    if mtype not in tfmodeltype.load():
        # a checkpoint's name (the catalogue's patterns), else a family as users write it ("Qwen1.5", "Gemma3") when
        # the words give nothing else to go on (no lead, no stated stack, no reading of an error they quote)
        bare = not (said.get("lead") or said.get("stack_text") or said.get("reading"))
        mtype = tfmodeltype.type_by_name(text) or (family_type(text) if bare else None)
    row = tfmodeltype.load().get(str(mtype)) if mtype else None
    if row is None:
        return
    need = f"the model type `{mtype}` the words name needs transformers >= {row['since']} ({row['source']})"
    words = (said.get("versions") or {}).get("transformers")
    stated = versions.get("transformers") or ((words, "the words") if words else None)
    if stated:
        older = tfmodeltype.unregistered(mtype, stated[0], True, stated[1]) is not None
        need += (f", and the transformers stated is {stated[0]} ({stated[1]}): "
                 + ("older, so it cannot build the model's config: the likely cause" if older else
                    "new enough, so the release is not what fails"))
    else:
        need += (": an older transformers does not recognise it at load, " + NEW_TYPE_RELEASES + "; `pip show "
                 "transformers` on the training machine says which ran")
    said["stack_text"] = (str(said.get("stack_text") or "") + " " + need[0].upper() + need[1:] + ".").strip()
    said["version_text"] = version_text(said["stack_text"])
