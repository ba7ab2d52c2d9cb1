"""Signs that a config file is a cut-off paste, and the ``config-complete`` assumption they open.

Users paste a YAML into an issue, or copy part of it out of one, and the paste stops mid-config (trial 11 cases
08 and 09: LlamaFactory#8137 ends after its dataset section, #5320 after the first key of its train section). A
rule whose only basis is an absent key (no `bf16`/`fp16`: fp32; `streaming` without `max_steps`: LF stops) then
states as the run's behaviour what the doctor only infers from the keys the paste lost. This module decides, from
the file's text and keys alone, whether the file shows one of these signs; the rules tagged ``absence`` word their
finding as "this file does not set X" and are at most a warning when it does (engine/judge.py), and the report
lists the assumption that the file is the whole config.

The signs (each a fact of the text, never a guess about the run):

- ``empty-last-key``: the last line is a bare key with no value and nothing under it (`lr_scheduler_type:`): YAML
  reads it as null, which no one writes on purpose as a file's last line.
- ``empty-section``: the last non-blank line is a section header comment (`### train`, LLaMA-Factory's example
  layout) with nothing, not even a commented key, under it.
- ``cut-mid-line``: the last line is one bare word with no colon (`lr_`): the paste stopped inside a key; the
  YAML reader reads the file without that line (readers/config/yamlcfg.py `_parse_maybe_cut`).
- ``open-block``: the text ends without a newline on an indented line (a nested mapping or list cut mid-block).
- ``no-training-section``: a training config (readers/config/lfkind.py kind ``train``) that sets not one key of
  the training section every LLaMA-Factory example writes (`TRAIN_SECTION_KEYS`: batch, accumulation, learning
  rate, epochs or steps, scheduler, warm-up, precision). Trial 17 (LF#7341): a paste that stopped in its
  `### method` section was sized at transformers' micro batch 8, fp32 and no DeepSpeed, "oom > 99 %", for a run
  that trained with bf16, batch 1 and ZeRO-3. Of the dev fixtures' training configs, 10 of 165 set none of these
  keys: pastes and fragments (trial 3's qwen3vl_fragment, cases 005/026/037 "nothing else reported") and one LF
  example that only preprocesses (qwen3_preprocess.yaml, `tokenized_path`: not a sign); the sign opens the
  verdict, it does not refuse the file.
Absence of a few keys is not a sign: a training config that sets none of `learning_rate`, `num_train_epochs` and
`max_steps` (a fourth sign tried in session 11) is how many real configs are written — the parity corpus holds 12
LF rejections of such files ("Please specify dataset for training.") that the hedge turned into warnings, so a
file that sets any key of its training section is judged as whole.
"""

from __future__ import annotations

import re
from typing import Any

_BARE_KEY = re.compile(r"^\s*(?:-\s+)?([A-Za-z_][\w.\-]*)\s*:\s*(?:#.*)?$")
_HEADER = re.compile(r"^\s*#{2,}\s*\w")
_CUT_WORD = re.compile(r"^[A-Za-z_][\w.\-]*$")   # readers/config/yamlcfg.py CUT_WORD: a key cut mid-token
# the keys of the `### train` section of LLaMA-Factory's example configs (examples/train_lora/llama3_lora_sft.yaml and
# the rest) with the precision flags: a training config that sets none of them lost its training section
TRAIN_SECTION_KEYS = frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
                                "num_train_epochs", "max_steps", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
                                "bf16", "fp16", "pure_bf16"})


def signs(text: str, values: dict[str, Any] | None, kind: str | None) -> list[dict[str, str]]:
    """The cut-paste signs of a config: a list of ``{"sign", "text"}`` (sign as in the module docstring, text a
    clause for messages, e.g. "its `### train` section is its last line, with nothing under it"); empty for a file
    that shows none. `text` is the file's text, `values` its keys after overrides (a key given on the command line
    is set) and `kind` readers/config/lfkind.py's reading; the signs read the text, but ``no-training-section`` reads
    the keys of a ``train`` config."""
    out: list[dict[str, str]] = []
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        return out
    last = lines[-1]
    bare = _BARE_KEY.match(last)
    if bare and not last.lstrip().startswith("#"):
        out.append({"sign": "empty-last-key",
                    "text": f"its last line, `{bare.group(1)}:`, is a key with no value"})
    elif _CUT_WORD.match(last) and len(lines) > 1:
        out.append({"sign": "cut-mid-line",
                    "text": f"its last line, `{last.strip()}`, stops in the middle of a key"})
    elif _HEADER.match(last):
        out.append({"sign": "empty-section",
                    "text": f"its last line is the section header `{last.strip()}` with nothing under it"})
    if text and not text.endswith(("\n", "\r")) and last[:1] in (" ", "\t") and not last.lstrip().startswith("#"):
        out.append({"sign": "open-block", "text": "it ends without a newline inside an indented block"})
    if kind == "train" and lost_training_section(text, values or {}):
        out.append({"sign": "no-training-section",
                    "text": "it sets no key of a training section (batch size, learning rate, epochs or steps, "
                            "precision), so transformers' and LLaMA-Factory's defaults stand in for all of them"})
    return out


_TOP_KEY = re.compile(r"^([A-Za-z_][\w.\-]*)\s*:", re.MULTILINE)
LOST = "no-training-section"


def lost_training_section(text: str, values: dict[str, Any]) -> bool:
    """Whether a config that trains (``do_train: true``; LLaMA-Factory's default is false) sets no key of
    `TRAIN_SECTION_KEYS`, in its text (top-level keys) or in `values` (a key=value override sets one). A
    preprocessing-only run (``tokenized_path``: LF saves the tokenized dataset and exits) needs no training section."""
    if values.get("do_train") is not True or values.get("tokenized_path"):
        return False
    keys = set(map(str, values)) | set(_TOP_KEY.findall(text or ""))
    return not TRAIN_SECTION_KEYS & keys


def cut_facts(doc: Any, kind: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """(``lint.config_cut``, ``lint.training_section_lost``) of a config (a `ConfigDoc`), from one pass of `signs`.

    ``config_cut``: None when the file shows no sign of its text; else ``{"signs": [...], "text": "<the clauses
    joined>"}``. ``training_section_lost``: the clause of the ``no-training-section`` sign, or None. A lost training
    section is not a sign of the text: it opens the memory verdict (facts/assumepartial.py) but does not hedge the
    absence rules, since LLaMA-Factory refuses such a file as given ("Please specify dataset for training.": cases
    005, 026, 037 of the parity corpus, as in cf3b1cea). A config given as command-line words (WebUI preview, .sh)
    is whole by construction: (None, None)."""
    path = str(getattr(doc, "path", "") or "")
    text = str(getattr(doc, "text", "") or "")
    if path == "<command line>" or text.lstrip().startswith(("llamafactory-cli", "CUDA_", "FORCE_TORCHRUN")):
        return None, None
    found = signs(text, getattr(doc, "values", None), kind)
    lost = next((x["text"] for x in found if x["sign"] == LOST), None)
    cut = [x for x in found if x["sign"] != LOST]
    return ({"signs": [x["sign"] for x in cut], "text": "; ".join(x["text"] for x in cut)} if cut else None), lost


def assumption(cut: dict[str, Any] | None) -> Any:
    """The ``config-complete`` Assumption of a config with cut-paste signs (`fact`), or None: the doctor judges
    the file as the whole config, and names what removes the doubt."""
    if not cut:
        return None
    from finetune_doctor.types import Assumption

    return Assumption(name="config-complete", value="the file is the whole config",
                      source=f"the file may be cut off: {cut['text']}; findings that rest on a key it does not set "
                             "say so and are at most warnings",
                      alternatives=("part of a longer config (a paste that stops early)",),
                      resolve_with="the whole YAML as it is launched, with the command line's key=value overrides")
