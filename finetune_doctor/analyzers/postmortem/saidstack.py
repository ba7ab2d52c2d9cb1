"""What the user's words state of the stack and the set-up, made into the lead of a words finding (issue #25).

readers/runlogs/statedwords.py reads, from a short report, the packages and versions the words name and the set-up
words (ZeRO-3, an MoE model, a datasets map, several nodes, CUDA/NCCL libraries that disagree): ``FileEvidence.
stated``. Here they become sentences the symptom rules add to their ``words`` case (``ev.said.stack_text``,
``ev.said.lead``) and the lead of a traceback cut inside LLaMA-Factory's start-up version check
(``ev.crash.cause``, causes.py). Versions are judged only against the one catalogue of LF's start-up ranges
(catalog/lf_stack_ranges.json, stackcause.py); what the words do not state is asked for with the command that
shows it, never filled in.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.analyzers.postmortem.stackcause import releases_judging
from finetune_doctor.evidence import Evidence


def stated(ev: Evidence) -> dict[str, Any]:
    """{versions, setup} of the first file whose words state any (readers/runlogs/statedwords.py), with a version
    an environment block pasted in the same file gives (``env_versions``) for a package the words name without
    one; {} when no file states anything."""
    for f in ev.files:
        if f.stated:
            versions = {k: dict(v) for k, v in (f.stated.get("versions") or {}).items()}
            for k, v in versions.items():
                env = f.env_versions.get(k)
                if v["version"] is None and env:
                    v["version"], v["from_env"] = str(env[0]), True
            return {"versions": versions, "setup": dict(f.stated.get("setup") or {})}
    return {}


def stated_releases(stated_: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    """{package: (version, "the words")} of the full releases a report's words state (`FileEvidence.stated`):
    "0.34.2", "2.4" — not "0.x", a range, or a dev/rc/local build, which no range check judges. The lowest-ranked
    versions of a crash's readings: what the logs print and the flags outrank them (timeline.py)."""
    return {k: (str(v["version"]), "the words") for k, v in ((stated_ or {}).get("versions") or {}).items()
            if re.fullmatch(r"\d+(?:\.\d+)+", str(v.get("version") or ""))}


VERSION_RANGE = ("A package outside the range the code needs stops a run at import or at model load, and a model "
                 "newer than the installed transformers is not recognised")
"""The opening of a version conflict said in words (rule run-crashed, `version_text`)."""


def version_text(stack: str | None) -> str:
    """``ev.said.version_text``: what a version conflict said in words means and, when `stack` (``stack_text``)
    does not already name the command, the generic `pip show PACKAGE` comparison. One `pip show` sentence, never
    the generic one beside the specific one (issue #25: the message repeated itself)."""
    if stack and "`pip show" in stack:
        return VERSION_RANGE + "."
    return (VERSION_RANGE + ": compare `pip show PACKAGE` (or `llamafactory-cli env`) with the range the error "
            "states and install a release inside it.")


def stack_text(ev: Evidence) -> str | None:
    """The sentence of a version conflict or an error said in words that names what the words state (package and
    version, or range), judges each stated version of a package LLaMA-Factory checks at start-up against its
    releases (stackcause.releases_judging), and names the commands that give what is missing; where the words say
    CUDA versions disagree (not NCCL's), which three CUDA versions to compare. None when the words name neither."""
    st = stated(ev)
    versions = st.get("versions") or {}
    libs = (st.get("setup") or {}).get("lib_mismatch")
    cuda = _CUDA_LIBS.format(lib_mismatch=libs) if libs and "nccl" not in libs.lower() else None
    if not versions:
        return cuda
    named, judged, missing = [], [], []
    lf = lf_named(ev, versions)   # LF's start-up check is LF's: judged only where LF's lines or LF is named
    for pkg, v in versions.items():
        if v["version"] and re.match(r"^\d+(?:\.\d+)+", v["version"]) and "x" not in v["version"]:
            named.append(f"{pkg} {' and '.join([v['version'], *v.get('also', [])])}"
                         + (" (the pasted environment)" if v.get("from_env") else ""))
            j = releases_judging(pkg, v["version"]) if lf else None
            if j:
                judged.append(j)
        else:
            named.append(pkg + (f" {v['spec']}" if v["spec"] else f" {v['version']}" if v["version"] else
                                " (no version)"))
            missing.append(pkg)
    out = f"The words name {', '.join(named)}"
    if judged:
        out += ("; " + "; ".join(judged) + " — `doctor lint CONFIG --env FILE` judges the whole stack against the "
                "release in use (package-version-refused, FD050/FD051)")
    ask = missing or list(versions)
    first = ask[0]
    out += (f". `pip show {' '.join(ask)}`{' (or `llamafactory-cli env`)' if lf else ''} on the training machine gives the "
            f"release{'s' if len(ask) > 1 else ''} that ran; `python -c \"import {first.replace('-', '_')}; "
            f"print({first.replace('-', '_')}.__version__, {first.replace('-', '_')}.__file__)\"` shows the copy the "
            f"run imports (a folder named {first.replace('-', '_')} beside the script, or an older install earlier "
            "on the path, shadows the one pip shows).")
    return out + (f" {cuda}" if cuda else "")


# LLaMA-Factory named in a report: its names, its CLI, its package path, keys only its configs have
_LF_NAMED = re.compile(r"llama[-_ ]?factory|\bllmtuner\b|\bllamafactory|\bfinetuning_type\b|\blf\s?0\.\d", re.I | re.A)


def lf_named(ev: Evidence, versions: dict[str, Any]) -> bool:
    """True when the report names LLaMA-Factory — its version stated, its name or CLI or keys in any file's words
    or read lines (`_LF_NAMED`), or its frames in a traceback. A report of another trainer (TRL, accelerate,
    plain transformers) is never judged against LF's start-up check (trial 15: a transformers issue was told
    which LF releases refuse its transformers)."""
    if "llamafactory" in versions:
        return True
    for f in ev.files:
        if "llamafactory" in f.env_versions or _LF_NAMED.search(str((f.said or {}).get("text") or "")):
            return True
        if any(_LF_NAMED.search(n.text or "") or "llamafactory" in str(n.value) for n in f.notices):
            return True
    return False


# CUDA libraries said not to match (no NCCL in the words): torch's wheel carries its own CUDA runtime, the driver
# must be at least that CUDA, and compiled extensions must be built for torch's CUDA
_CUDA_LIBS = ("The words say CUDA versions disagree (\"{lib_mismatch}\"): a torch wheel brings its own CUDA runtime "
              "(`python -c \"import torch; print(torch.__version__, torch.version.cuda)\"`), the driver must support "
              "at least that CUDA (`nvidia-smi`), and compiled extensions (flash-attn, DeepSpeed's ops, bitsandbytes) "
              "must be built for torch's CUDA, not the toolkit on PATH (`nvcc -V`).")


# (condition on the set-up words, the lead): the first that holds is said
_MOE_Z3 = ("ZeRO-3 with a mixture-of-experts model (the report: \"{zero3}\", \"{moe}\") is a known hang: each rank "
           "gathers only the experts its tokens reach, so the ranks' ZeRO-3 gathers stop matching and every rank "
           "waits, with no error and no loss. LLaMA-Factory gathers the MoE block of the model types it knows whole "
           "(set_z3_leaf_modules; Mixtral since PR #2283, later types per release in catalog/lf_z3_leaf.json), and "
           "transformers 5.0 computes the experts as one module (LlamaFactory#9628): update both, or use ZeRO-2; "
           "`doctor check CONFIG` names the release that covers the model type.")
_MAP = ("The words name a datasets map (\"{map}\"): a map with several worker processes (num_proc, LLaMA-Factory's "
        "preprocessing_num_workers) that never leaves 0 % is a worker that deadlocked or died (a fork after a "
        "thread started, e.g. the tokenizers' own parallelism; a worker killed for host RAM): rerun with "
        "preprocessing_num_workers: 1 (or unset) to tell, and tokenize once with tokenized_path.")
_LIBS = ("The words say CUDA/NCCL library versions disagree (\"{lib_mismatch}\"): every rank must load the NCCL "
         "its torch was built with — `python -c \"import torch; print(torch.__version__, torch.version.cuda, "
         "torch.cuda.nccl.version())\"` on every node, `pip show nvidia-nccl-cu12`, and LD_LIBRARY_PATH for a "
         "system libnccl that shadows it — and the driver must support that CUDA (`nvidia-smi` shows the driver's "
         "CUDA version).")
_NODES = ("The words tie the error to several nodes (\"{nodes}\"): a second node adds the network and its own "
          "install, so check the same torch, CUDA and NCCL on every node (`python -c \"import torch; "
          "print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())\"` on each).")


# a CUDA error said in words whose text names its cause (cudaGetErrorString's texts, torch's _lazy_init)
_DRIVER = re.compile(r"driver version is insufficient|driver on your system is too old|driver (?:is )?too old|"
                     r"驱动(?:版本)?(?:太低|过低|太旧|过旧|不够)", re.I)
_NO_IMAGE = re.compile(r"no kernel image is available", re.I)
_CUDA_LEADS = ((_DRIVER, "The words say the NVIDIA driver is older than the CUDA runtime torch was built with: "
                         "`nvidia-smi` shows the highest CUDA the driver supports, `python -c \"import torch; "
                         "print(torch.__version__, torch.version.cuda)\"` the CUDA torch needs; update the driver or "
                         "install a torch built for the driver's CUDA."),
               (_NO_IMAGE, "The words say no kernel was built for this GPU: torch or a compiled extension "
                           "(flash-attn, bitsandbytes, apex) lacks the card's architecture — `python -c \"import "
                           "torch; print(torch.cuda.get_device_capability(), torch.cuda.get_arch_list())\"` shows "
                           "both; install a build that lists it, or rebuild the extension."))


_SHM = ("The words name shared memory (\"{shm}\"): /dev/shm is not the disk — DataLoader workers pass every batch "
        "through it, and a container's default is 64 MB (Docker's --shm-size); `df -h /dev/shm` inside the job shows "
        "it: run with --ipc=host or a larger --shm-size, or fewer dataloader workers.")
_CONTAINER = ("The words place the run in a container or pod (\"{container}\"): its writable layer (the pod's "
              "ephemeral storage) is a small disk of its own, so checkpoints, the datasets cache and /tmp written "
              "there fill it whatever the host has: point output_dir, HF_HOME and TMPDIR at a mounted volume, and "
              "`df -h` inside the container shows which one is full.")


def moe_zero3_said(setup: dict[str, Any]) -> str | None:
    """The ZeRO-3 + MoE hang lead when the words name both (`setup`: statedwords.setup_words), worded for a
    collective timeout or a hang: None unless both are named."""
    if not (setup.get("zero3") and setup.get("moe")):
        return None
    return _MOE_Z3.format(**setup).rstrip(".")


def setup_lead(ev: Evidence, symptom: str | None, phase: str | None, words: str = "") -> str | None:
    """The lead the set-up words give a hang or an NCCL error said in words: ZeRO-3 with an MoE model (the
    experts' gathers), a datasets map that never moved, library versions that disagree, several nodes; for a CUDA
    error, what its own text (`words`, the description) names: a driver older than torch's CUDA, no kernel for
    the card. None when the words give none of these for `symptom`."""
    setup = stated(ev).get("setup") or {}
    if symptom == "hang":
        if moe_zero3_said(setup):
            return _MOE_Z3.format(**setup)
        if setup.get("map"):
            return _MAP.format(**setup)
    if symptom == "disk-full":
        return _SHM.format(**setup) if setup.get("shm") else _CONTAINER.format(**setup) if setup.get("container") \
            else None
    if symptom == "cuda-error":
        return next((lead for pat, lead in _CUDA_LEADS if pat.search(words)), None)
    if symptom == "nccl-error":
        if setup.get("lib_mismatch"):
            return _LIBS.format(**setup)
        if setup.get("nodes"):
            return _NODES.format(**setup)
    return None

