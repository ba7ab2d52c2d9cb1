"""What a short report's words state beside its symptom: the package versions they name, and the words of the run's
set-up (ZeRO-3, a mixture-of-experts model, a datasets map, several nodes) that narrow a hang or an NCCL failure.

Issue titles and one-sentence reports say "deepspeed 0.14.3 with torch 2.4", "我必须得更新accelerate到0.34.2",
"deepspeed zero3 + lora 训练 mixtral-8x7b 会 hang". readers/runlogs/userwords.py reads the symptom; this module reads
what the same words say of the stack and the set-up, so that the finding can judge what is stated and ask for what
is not (``pip show PACKAGE``, ``llamafactory-cli env``). Nothing is inferred: a package named without a version is
kept as named, with version None.

The package names are readers/config/stack.py ``PACKAGES`` (the one list the version readers share), plus the
spellings users write for them (``pytorch``, ``flash_attn``, ``llama-factory``).
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.readers.config.stack import PACKAGES

# users' spellings of the packages of stack.PACKAGES
_ALIASES = {"pytorch": "torch", "flash_attn": "flash-attn", "flashattn": "flash-attn", "flash-attention":
            "flash-attn", "llama-factory": "llamafactory", "llama_factory": "llamafactory", "liger_kernel":
            "liger-kernel", "liger kernel": "liger-kernel", "ds": None}
_NAMES = sorted({*PACKAGES, *(k for k, v in _ALIASES.items() if v)}, key=len, reverse=True)
# a package name, then within a few characters a version or a range: "accelerate==0.34.2", "accelerate到0.34.2",
# "torch 2.4", "deepspeed 0.x", "transformers v4.45.0", "accelerate>=0.30.1,<=0.33.0", "peft (0.5.0)"
_MENTION = re.compile(
    # (not a path's or a module's part: "site-packages/transformers/trainer.py", "from llamafactory.cli import")
    r"(?<![A-Za-z0-9_/.\\-])(?P<name>" + "|".join(re.escape(n) for n in _NAMES) + r")(?![A-Za-z0-9_/\\]|\.[A-Za-z_])"
    r"(?:\s*(?:version|版本)?\s*(?:(?P<spec>(?:[<>=!~]=?\s*\d+(?:\.\d+)*\s*,?\s*)+)|"
    r"(?:to\s+|[(\s:=]|到|为|是|升级到|降级到|更新到|==)\s*v?(?P<ver>\d+\.(?:\d+|x)(?:\.(?:\d+|x))*(?:\.?(?:dev|rc|post|a|b)\d*)?(?:\+\w+)?)))?",
    re.I | re.A)
# more releases right after a named one: "2.2 and 2.4", "2.1, 2.3 or 2.4", "2.2/2.4", "2.2 和 2.4"
_MORE = re.compile(r"(?:\s*(?:,|/|、|&|\band\b|\bor\b|和|或|以及|及)\s*v?\d+\.\d+(?:\.\d+)*(?![\w.]))*", re.I | re.A)
_MORE_VERS = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*)(?![\w.])", re.A)
# "a version that is greater than 0.5.0": a bound the words state, for the one package they name
_BOUND = re.compile(r"\b(?:greater|newer|higher|later)\s+than\s+v?(?P<gt>\d+(?:\.\d+)+)|"
                    r"\b(?:lower|older|less)\s+than\s+v?(?P<lt>\d+(?:\.\d+)+)", re.I | re.A)

# the set-up words: DeepSpeed ZeRO stage 3; a mixture-of-experts model (Mixtral and its misspellings, "MoE",
# DeepSeek-V2/V3/MoE, Qwen's "-A3B"/"-A22B" active-parameter tags, 8x7B, DBRX, Jamba, OLMoE, Qwen*-MoE); a
# datasets map (datasets arrow_dataset.py's "Map (num_proc=N)" bar, LLaMA-Factory's preprocessing_num_workers);
# several nodes
ZERO3 = re.compile(r"\bzero[-_ ]?(?:stage[-_ ]?)?3\b|\bz3\b|\bds_z3\w*|\bstage[-_ ]?3\b|zero3", re.I | re.A)
MOE = re.compile(r"\bmix?tr?[ai]+l\w*|\bmoe\b|\w*moe\b|\bdeepseek[-_ ]?(?:v2|v3|r1|moe)\w*|-a\d+(?:\.\d+)?b\b|"
                 r"\b\d+\s*[x*×]\s*\d+b\b|\bdbrx\b|\bjamba\b|\bexperts?\b|专家|混合专家", re.I | re.A)
MAP = re.compile(r"\bMap \(num_proc=\d+\)|\bnum_proc\b|\bpreprocessing_num_workers\b|\bdatasets?\.map\b|"
                 r"\b\.map\(|Running tokenizer on dataset|Converting format of dataset", re.I | re.A)
NODES = re.compile(r"多机|多节点|跨节点|跨机|\bmulti[- ]?node\b|\bmultiple (?:nodes|machines)\b|"
                   r"\b(?:two|2|several) (?:nodes|machines)\b", re.I | re.A)
# a container or pod, whose writable layer is a small disk of its own; /dev/shm, the DataLoader's shared memory
CONTAINER = re.compile(r"\b(?:pod|pods|container|docker|kubernetes|k8s|kubelet|ephemeral[- ]storage|emptyDir|"
                       r"openshift)\b|容器", re.I | re.A)
SHM = re.compile(r"/dev/shm|\bshm\b|shared memory|共享内存|--shm-size", re.I | re.A)
# ZeRO-1/2 or plain data parallel (DDP): every parameter whole on each rank, so ZeRO-3's gathers are not in play
# (analyzers/postmortem/kindwords.py `moe_not_zero3_lead`)
NOT_ZERO3 = re.compile(r"\bzero[-_ ]?(?:stage[-_ ]?)?[12]\b|\bz[12]\b|\bds_z[12]\w*|\bstage[-_ ]?[12]\b|zero[12]\b|"
                       r"\bDDP\b", re.I | re.A)
# the words of a version mismatch of the CUDA / NCCL libraries (not of a Python package)
LIB_MISMATCH = re.compile(r"\b(?:NCCL|CUDA|cudart|libnccl\S*|driver)\b[^.\n。]{0,40}(?:versions?\b|版本)[^.\n。]{0,20}"
                          r"(?:mismatch\w*|do(?:es)?(?: not|n't) match|incompatib\w*|insufficient|conflict\w*|"
                          r"不匹配|不一致|不兼容|对不上|冲突)|\bNCCL (?:version )?mismatch\w*|undefined symbol:?\s*nccl\w+",
                          re.I | re.A)


def stated_versions(text: str) -> dict[str, dict[str, Any]]:
    """{package: {version, spec, line[, also]}} of the packages `text` names (stack.PACKAGES and `_ALIASES`), in
    the order first named: `also` the other releases the words list for it (after the first, in order), `version` the release the words give ("0.34.2", "2.4", "0.x" kept as written) or None,
    `spec` a range the words give (">=0.30.1,<=0.33.0", or ">0.5.0" from "greater than 0.5.0" when the words name
    one package) or None, `line` the 1-based line of the first mention. A bounded read: the first 4 KiB."""
    text = text[:4096]
    out: dict[str, dict[str, Any]] = {}
    for m in _MENTION.finditer(text):
        raw = m.group("name").lower()
        name = _ALIASES.get(raw, raw)
        if not name:
            continue
        got = out.setdefault(name, {"version": None, "spec": None,
                                    "line": text.count("\n", 0, m.start()) + 1})
        if m.group("ver") and got["version"] is None:
            got["version"] = m.group("ver")
        if m.group("ver"):
            # every release the words list for it ("pytorch 2.2 and 2.4 are tested", "torch 2.1/2.3", a second
            # mention): kept in `also`, so a quote never drops one (trial 15)
            more = [m.group("ver")] + _MORE_VERS.findall(_MORE.match(text, m.end()).group(0))
            for x in more:
                if x != got["version"] and x not in got.get("also", []):
                    got.setdefault("also", []).append(x)
        if m.group("spec") and got["spec"] is None:
            got["spec"] = re.sub(r"\s+", "", m.group("spec")).rstrip(",")
            pinned = re.fullmatch(r"==(\d+(?:\.\d+)+)", got["spec"])
            required = re.search(r"(?:requir\w*|needs?|install)\s*$", text[max(0, m.start() - 12):m.start()], re.I)
            if pinned and got["version"] is None and not required:
                # "trl==0.15.0" names a release, as pip freeze writes it; "requires torch==2.4.0" a requirement
                got["version"], got["spec"] = pinned.group(1), None
    if len(out) == 1:
        # one package named: a bare release of the same major elsewhere in the words is that package's too
        # ("升级 transformers 到 4.46.2 后报错，4.45.2 正常"); another major is another thing (CUDA 12.1, python 3.10)
        only = next(iter(out.values()))
        major = str(only["version"] or "").split(".")[0]
        for x in _MORE_VERS.findall(text) if major.isdigit() else ():
            if x.split(".")[0] == major and x.count(".") >= 2 and x != only["version"] \
                    and x not in only.get("also", []):
                only.setdefault("also", []).append(x)
        b = _BOUND.search(text)
        if b and only["spec"] is None:
            only["spec"] = f">{b.group('gt')}" if b.group("gt") else f"<{b.group('lt')}"
    return out


def setup_words(text: str) -> dict[str, str | None]:
    """{zero3, moe, map, nodes, lib_mismatch, container, shm, not_zero3}: the words of `text` (first 64 KiB) that say
    the run used ZeRO-3, an MoE model, a datasets map, several nodes, that CUDA/NCCL library versions disagree, that
    it ran in a container or pod, that name shared memory (/dev/shm), or ZeRO-1/2 or DDP; None where none do. The
    caller hands short files only (userwords.MAX_PASTE_BYTES)."""
    text = text[:65536]
    out: dict[str, str | None] = {}
    for key, pat in (("zero3", ZERO3), ("moe", MOE), ("map", MAP), ("nodes", NODES), ("lib_mismatch", LIB_MISMATCH),
                     ("container", CONTAINER), ("shm", SHM), ("not_zero3", NOT_ZERO3)):
        m = pat.search(text)
        out[key] = m.group(0).strip() if m else None
    return out
