"""An error said of a model whose modelling code ships with its checkpoint, with no traceback (issue #25, words).

Some families are not (or were not, in the releases users still train) part of transformers: their repositories
carry their own ``modeling_*.py`` and ``config.json``'s ``auto_map`` points at them, loaded with
``trust_remote_code`` from the Hugging Face modules cache (transformers dynamic_module_utils.py
``get_class_from_dynamic_module``; e.g. baichuan-inc/Baichuan2-13B-Chat, THUDM/chatglm3-6b, internlm/internlm2-7b,
Qwen/Qwen-7B, openbmb/MiniCPM-V-2_6). That code is written against the transformers its authors used, and
repositories are updated after release, so an error from such a model with nothing else said is most often the
model's files against the installed transformers or an old copy of those files (LlamaFactory#699: Baichuan-13B full
SFT, answered "update the model files"; analyzers/postmortem/remotecode.py reads the same clash from a traceback's
frames). The lead says so as the likely reading and names the input that decides: the traceback's innermost frame.
The same holds for an error said of unsloth alone, whose compiled dependencies are the likely side (`unsloth_lead`).
"""

from __future__ import annotations

import re
from typing import Any

# the families users name in their words, as they write them; the first-generation Qwen ("Qwen-7B", "qwen 14b chat")
# only, since Qwen1.5 and later are transformers' own qwen2 classes
REMOTE_FAMILIES = re.compile(
    r"\bbaichuan[-_ ]?2?(?:[-_ ]?\d+b)?|\bchatglm[-_ ]?[236]?(?:[-_ ]?6b)?|\binternlm[-_ ]?2?(?:\.5)?(?:[-_ ]?\d+b)?|"
    r"\bqwen[-_](?:\d+b|vl)\b|\bminicpm[-_ ]?(?:v|o)\b[\w.-]*|\btelechat\w*|\bxverse\w*",
    re.I | re.A)


def remote_family_lead(said: dict[str, Any]) -> str | None:
    """The lead for an error said of a remote-code model family (`REMOTE_FAMILIES` in the words of `said`,
    userwords.read_words' answer) when nothing else was read from the words: no reading of an error text
    (`said["reading"]`) and no package named (`said["stack_text"]`, which leads instead); None otherwise."""
    if said.get("symptom") != "error" or said.get("reading") or said.get("stack_text"):
        return None
    m = REMOTE_FAMILIES.search(str(said.get("text") or ""))
    if m is None:
        return None
    return (f"The words name {m.group(0).strip()}, a model whose modelling code ships with its checkpoint "
            "(trust_remote_code: config.json's auto_map points at the repository's own modeling_*.py): with nothing "
            "else said, the likeliest cause is that code against the installed transformers (written for another "
            "release) or an old copy of the model's files; update the model's .py files and config.json from its "
            "repository, or install the transformers release its model card names. The input that decides: the "
            "traceback's innermost frame (one under transformers_modules/<model>/modeling_*.py is the model's own "
            "code).")


# unsloth named as what was on when the error came ("--use_unsloth 训练时报错", "use_unsloth: true fails")
UNSLOTH_SAID = re.compile(r"(?<![\w-])(?:--)?(?:use_)?unsloth\b", re.I | re.A)


def unsloth_lead(said: dict[str, Any]) -> str | None:
    """The lead for an error said of unsloth with no error text read (`said["reading"]` empty): unsloth checks its
    compiled stack when imported (unsloth/__init__.py: bitsandbytes' CUDA library through triton's ``libcuda_dirs``,
    warning "Unsloth: CUDA is not linked properly" with `python -m bitsandbytes` / `python -m xformers.info` as the
    checks), and its kernels need bitsandbytes, triton, xformers and unsloth_zoo built for the installed torch and
    CUDA (LlamaFactory#2070: `--use_unsloth` failing on a broken bitsandbytes install). None otherwise."""
    if said.get("symptom") != "error" or said.get("reading"):
        return None
    if not UNSLOTH_SAID.search(str(said.get("text") or "")):
        return None
    return ("The words tie the error to unsloth: unsloth checks its compiled stack when it is imported (bitsandbytes' "
            "CUDA library, found through triton, then xformers) and its kernels need bitsandbytes, triton, xformers "
            "and unsloth_zoo releases built for the installed torch and CUDA, so a broken or mismatched one of them "
            "is the likeliest cause; `python -m bitsandbytes` and `python -m xformers.info` test the two that fail "
            "most often. The input that decides: those two commands' output and `pip show unsloth unsloth_zoo "
            "bitsandbytes xformers triton torch`.")
