"""Round 10's kinds of exception reading (issue #25): a model newer than the installed transformers behind LF's
"Processor was not found", torch's optimizer groups on a resume after the trainable set changed, and a KeyError in
another trainer's table of supported models.

- LLaMA-Factory data/mm_plugin.py ``_validate_input`` (:178 at the snapshot) raises "Processor was not found, please
  check and update your model file." when ``load_tokenizer`` kept no processor (model/loader.py:97-117: AutoProcessor
  failed, logged at INFO as "Failed to load processor: ...", or returned a tokenizer only). A transformers release
  that does not know the model's processor class does exactly that (LlamaFactory#9277: Qwen3-VL, working with
  transformers 4.57.1; #7370 / #7281: Gemma 3, the v4.49.0-Gemma-3 build), so the installed transformers is one
  of the causes named (``NEWER_MODEL``); the release a named model needs is facts/loadfail.py's (catalog/
  tf_model_types.json), its one home.
- torch/optim/optimizer.py ``Optimizer.load_state_dict`` (torch 2.13.0 wheel :941-953) raises "loaded state dict
  has a different number of parameter groups" / "loaded state dict contains a parameter group that doesn't match
  the size of optimizer's group" when the saved groups do not hold as many parameters as the optimizer built for
  this run: the trainable set is not the one the checkpoint was written with (unslothai/unsloth#3108: lm_head and
  embed_tokens in modules_to_save reloaded as not trainable).
- A KeyError whose key is an architecture class (``BaichuanForCausalLM``), raised in a trainer's own file:
  transformers keys its auto mappings by ``model_type`` (lower case), so a class-name key is the trainer's own
  table of the models it supports (InternLM/xtuner#812: xtuner/model/modules/dispatch/__init__.py
  ``LOWEST_TRANSFORMERS_VERSION[...]``, fixed by xtuner PR #802).
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.evidence import Evidence

NEWER_MODEL = ("the installed transformers predates the model's processor class (a model newer than the "
               "transformers release: AutoProcessor then fails or returns a tokenizer only, which LLaMA-Factory "
               "drops), so `pip show transformers` against the release the model card names")
"""The cause a model newer than the installed transformers gives a processor or config load, in words."""


def processor_missing(msg: str, model: dict[str, Any], ev: Evidence) -> str | None:
    """Words for LLaMA-Factory's "Processor was not found" (`msg`; `model`: what is known of the model, its name;
    `ev`: the evidence, for LF's INFO line "Failed to load processor: ..."): the load that failed and its usual
    causes, the installed transformers predating the model's processor among them (`NEWER_MODEL`). None for
    another message."""
    if "rocessor was not found" not in msg:
        return None
    why = next((n for f in ev.files for n in f.notices if n.kind == "processor-failed"), None)
    name = str(model.get("name") or "") + (why.text if why is not None else "")
    internvl = ("; LLaMA-Factory reads InternVL from the transformers-format \"-hf\" repositories (OpenGVLab/"
                "InternVL…-hf, extras/constants.py)") if "internvl" in (name + msg).lower() else ""
    lead = internvl_original(name + " " + msg)
    if lead:
        internvl = ""
    if why is not None:
        return lead + (f"LLaMA-Factory's multimodal template needs the model's processor, and loading it failed: "
                f"\"Failed to load processor: {why.text[:200]}\" ({why.file}:{why.line}); a model folder without "
                "its processor files (preprocessor_config.json / processor_config.json, chat template, remote-code "
                ".py files) or without trust_remote_code: true fails so; copy the processor files from the base "
                "model's repository into the folder" + internvl)
    return lead + ("LLaMA-Factory's multimodal template needs the model's processor and none was loaded: AutoProcessor "
            "failed on the model folder or returned no Processor (LLaMA-Factory logs the failure at INFO as "
            "\"Failed to load processor: ...\"); the folder lacks its processor files "
            "(preprocessor_config.json / processor_config.json, the tokenizer and chat template, and for a "
            "remote-code model its .py files), the model needs trust_remote_code: true, the template is a "
            "multimodal one for a text-only checkpoint, or " + NEWER_MODEL + "; copy the processor files from the "
            "base model's repository into the folder" + internvl)


# an InternVL model as users name it: a hub id or a folder's last component ("OpenGVLab/InternVL3-8B", "/workspace/
# InternVL3-8B", "internvl2_5-8b-hf"); ASCII word rules, so a name written against Chinese ends at the first Han character
_INTERNVL_NAME = re.compile(r"(?<![\w.-])internvl[\w.-]*", re.I | re.A)


def internvl_original(text: str) -> str:
    """The lead sentence for "Processor was not found" when `text` (the model's name, the error and the words around
    it) names an InternVL model and no name of it carries the "-hf" suffix, else "". LLaMA-Factory trains InternVL
    through transformers' InternVL classes and lists only the "-hf" conversions (extras/constants.py:1355-1373 at
    0.9.4); the original remote-code checkpoint (model_type internvl_chat) loads no processor there
    (LlamaFactory#7789, answered in #7802; rule internvl-remote-code-checkpoint judges the config.json when it is
    read). A name without the suffix makes the original checkpoint the most likely reading, not a certain one (a
    renamed folder keeps no suffix), so the sentence names the one input that decides: the folder's model_type."""
    names = [m.group(0).rstrip(".-") for m in _INTERNVL_NAME.finditer(text)]
    if not names or any(n.lower().endswith("-hf") for n in names):
        return ""
    shown = max(names, key=len)
    return (f"most likely the model is InternVL's original remote-code checkpoint: it is named `{shown}`, with "
            "no \"-hf\" suffix, and LLaMA-Factory trains InternVL only through transformers' own InternVL classes from "
            "the \"-hf\" conversions (e.g. OpenGVLab/InternVL3-8B-hf, extras/constants.py), loading no processor "
            "for the original checkpoint (model_type internvl_chat; LlamaFactory#7789, #7802): use the -hf "
            "repository, with a transformers that registers model_type internvl. The one input that decides: "
            "`model_type` in the model folder's config.json (internvl_chat: the original checkpoint; internvl: the "
            "-hf conversion, and then one of the other causes). Otherwise: ")


_GROUPS = re.compile(r"loaded state dict (?:contains a parameter group that doesn't match the size of optimizer's "
                     r"group|has a different number of parameter groups)")


def optimizer_groups(cls: str, msg: str) -> str | None:
    """Words for torch's refusal of a saved optimizer state whose parameter groups differ from this run's (module
    docstring), or None for another exception."""
    if cls not in ("ValueError", "") or not _GROUPS.search(msg):
        return None
    return ("torch's Optimizer.load_state_dict compares the saved optimizer state with the optimizer built for this "
            "run group by group (torch/optim/optimizer.py): a group of another size means the set of trainable "
            "parameters is not the one the checkpoint was saved with — other LoRA target modules, modules_to_save "
            "(lm_head, embed_tokens) reloaded as not trainable, a part frozen or unfrozen since (freeze_vision_tower, "
            "additional_target), another finetuning_type; make the same parameters trainable as when it was saved "
            "(compare the `trainable params` line of the two runs), or start from the saved weights without "
            "resume_from_checkpoint (a fresh optimizer)")


_ARCH_KEY = re.compile(r"""^\s*['"]([A-Z]\w*For(?:CausalLM|ConditionalGeneration|Sequence\w+|\w+))['"]""")
_TRAINERS = (r"(xtuner|swift|axolotl|trl|llamafactory|llmtuner|verl|unsloth\w*|openrlhf|nemo\w*|megatron\w*|mmengine|"
             r"peft|deepspeed|accelerate)")
_FILE = re.compile(r'File "[^"]*?[/\\]' + _TRAINERS + r'[/\\][^"]*"', re.I)
_PKG = re.compile(r"(?<=[/\\])" + _TRAINERS + r"(?=[/\\])", re.I)


def _trainer_file(exc: Any) -> str | None:
    """The last trainer file (`_FILE`) a ``File "..."`` line names within the 12 lines above the exception `exc`
    (a Notice): the paste may lack the traceback's header, so the reader kept no frames, but it kept those lines
    (``value["frame_lines"]``, readers/runlogs/logkept.py `frame_lines_above`; the file is not read again)."""
    lines = (getattr(exc, "value", None) or {}).get("frame_lines") or ()
    found = [m.group(0) for ln in lines for m in [_FILE.search(ln)] if m]
    return found[-1] if found else None


def _package(where: str) -> str | None:
    """The innermost trainer folder of a ``File "..."`` path (`_PKG`): the file's own package, not a home folder
    that shares a trainer's name ("/home/swift/xtuner/..." is xtuner's)."""
    names = _PKG.findall(where)
    return names[-1] if names else None


def trainer_table_key(cls: str, msg: str, frames: tuple, ev: Evidence, exc: Any) -> str | None:
    """Words for a KeyError whose key is an architecture class raised in a trainer's own file (module docstring):
    the trainer's table lacks the model, not transformers. None without such a key or file."""
    key = _ARCH_KEY.match(msg)
    if cls != "KeyError" or not key:
        return None
    where = _trainer_file(exc)
    pkg = _package(where or "")
    if not pkg:
        return None
    return (f"the KeyError is raised in {pkg}'s own code ({where}), in a table keyed by the model's architecture "
            f"class: transformers keys its auto mappings by the lower-case model_type, so this is {pkg}'s list of "
            f"the models it supports, and `{key.group(1)}` is not in it — upgrade {pkg} to a release that lists "
            f"the model, or add the entry to that table; a newer transformers does not change it")
