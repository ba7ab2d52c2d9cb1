"""Sizing a model by its name when no config.json is at hand: what a name can and cannot decide (issue 21).

A name such as ``/data/model/Qwen2.5-7b-sft-v3`` (a folder of the training machine) or ``${model_dir}/Qwen2-7B``
says three things that decide memory: the family (``qwen2.5``), the size class (``7b``) and, for a mixture of
experts, the active size (``a14b`` in Qwen2-57B-A14B). A name-based match may use none of its freedom to change
any of them: it is accepted only when exactly one catalogue architecture has the same family, size class and
active size (`traits`), and it is then an assumption the report names (``model`` from the ``folder name``,
removed by ``--model-config``), never a silent substitution.

LLaMA-Factory's ``template`` and its ``image_*``/``video_*`` keys narrow the family: a vision template (its
mm_plugin, LLaMA-Factory ``data/template.py`` at the snapshot in docs/reference/llamafactory/SNAPSHOT_COMMIT.txt)
means the checkpoint carries a vision tower, so a text-only entry of the same name cannot be it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from finetune_doctor.readers.model.catalog import catalog_entries, norm, resolve_entry

SIZE = re.compile(r"^(\d+x)?\d+(\.\d+)?[bm]$")    # 7b, 0.5b, 57b, 8x7b, 560m
ACTIVE = re.compile(r"^a\d+(\.\d+)?b$")            # a14b, a3b (Qwen MoE active size)
SHELL_VAR = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")

# Templates whose mm_plugin makes the model a vision/audio model (LF data/template.py register_template ...
# mm_plugin=get_mm_plugin(...)). Templates that serve text-only checkpoints of the same family as well (gemma3,
# gemma4, llama4, qwen3_5, mistral_small, ministral3, custom) are left out: they do not decide the modality.
MULTIMODAL_TEMPLATES = frozenset({
    "dots_ocr", "ernie_vl", "gemma3n", "glm4v", "glm4_5v", "glm_ocr", "granite3_vision", "intern_vl", "intern_s1",
    "keye_vl", "kimi_vl", "lfm2_vl", "mllama", "moss_vl", "llava", "llava_next", "llava_next_llama3",
    "llava_next_mistral", "llava_next_qwen", "llava_next_yi", "llava_next_video", "llava_next_video_mistral",
    "llava_next_video_yi", "mimo_vl", "minicpm_v", "minicpm_v_4_6", "minicpm_o", "paligemma", "paligemma_chat",
    "pixtral", "qwen2_audio", "qwen2_omni", "qwen3_omni", "qwen3_omni_nothink", "qwen2_vl", "qwen3_vl",
    "qwen3_vl_nothink", "video_llava", "yi_vl", "youtu_vl",
})
# Every template registered with an image/video/audio plugin (LF main data/template.py, ``mm_plugin=get_mm_plugin(``
# in its register_template call), those that also serve text-only checkpoints included: under any other template
# LLaMA-Factory uses the base plugin, which passes no media to the model.
MEDIA_TEMPLATES = MULTIMODAL_TEMPLATES | frozenset({
    "gemma3", "gemma4", "gemma4n", "llama4", "qwen3_5", "qwen3_5_nothink", "qwen3_6", "mistral_small", "ministral3",
})


def media_template(template: object) -> bool:
    """Whether LLaMA-Factory can hand images (or video, audio) to the model under ``template``: False for a
    template the LF release catalogue lists without a media plugin (`MEDIA_TEMPLATES`); True for a media template,
    for one the catalogue does not know (a template registered by the user may carry a plugin) and without a
    template. Without one LF parses the tokenizer's chat template with the base plugin (data/template.py
    ``get_template_and_fix_tokenizer``), which refuses images; but a missing key says nothing about the data (the
    calibration rows of other trainers name none), so the images stay an open assumption there."""
    if template is None or not str(template).strip():
        return True
    name = str(template).strip()
    if name in MEDIA_TEMPLATES:
        return True
    from finetune_doctor.readers.config.lfrelease import load

    return name not in (load().get("templates") or {})


# Words people put before the size that name no model family (/data/sft-7b, my-ckpt-7b)
GENERIC_WORDS = frozenset({"sft", "ckpt", "checkpoint", "output", "outputs", "out", "merged", "merge", "lora",
                           "model", "models", "my", "final", "best", "last", "run", "exp", "train", "trained",
                           "finetune", "finetuned", "ft", "dpo", "full", "base", "new", "old", "test"})
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# Words after the size that name another architecture than the base's: LLaMA Pro's block expansion adds layers
# (LF scripts/llama_pro.py writes "<name>-pro"), depth up-scaling, MoE upcycling, added towers. A name carrying
# one is never sized as the base.
CHANGES_ARCH = frozenset({"pro", "expanded", "expand", "upscaled", "dus", "moe", "upcycled", "vl", "vision",
                          "audio", "omni", "mm", "multimodal"})


@dataclass(frozen=True)
class Traits:
    """What a name says about the model: `family` (letters and digits before the size, ``meta`` dropped),
    `size` (``7b``, ``8x7b``; None when the name states none) and `active` (``a14b``; None for a dense name)."""

    family: str
    size: str | None
    active: str | None


@functools.lru_cache(maxsize=4096)
def traits(name: str) -> Traits:
    """The family, size class and active size stated by the last path component of `name`. Memoized (a pure
    function of the text; `Traits` is frozen): each lint of a config compares its model's name with catalogue
    entries whose names repeat from file to file."""
    base = norm(name).rsplit("/", 1)[-1]
    toks = [t for t in re.split(r"[-\s]+", base) if t]
    for i, t in enumerate(toks):
        if SIZE.match(t):
            fam = re.sub(r"[^a-z0-9]", "", "".join(w for w in toks[:i] if w not in GENERIC_WORDS))
            act = toks[i + 1] if i + 1 < len(toks) and ACTIVE.match(toks[i + 1]) else None
            return Traits(_family(fam), t, act)
    return Traits(_family(re.sub(r"[^a-z0-9]", "", base)), None, None)


def _family(fam: str) -> str:
    # meta-llama/Meta-Llama-3-8B and a folder named Llama-3-8B are one family
    return fam[4:] if fam.startswith("meta") and len(fam) > 4 else fam


def changes_architecture(name: str) -> bool:
    """True when a word after the size (or a second size) says the checkpoint is not the base's shape
    (`CHANGES_ARCH`: llama3-8b-pro, Qwen2-7B-moe, ...)."""
    base = norm(name).rsplit("/", 1)[-1]
    toks = [t for t in re.split(r"[-\s]+", base) if t]
    idx = next((i for i, t in enumerate(toks) if SIZE.match(t)), None)
    if idx is None:
        return False
    tail = toks[idx + 1:]
    return any(t in CHANGES_ARCH or SIZE.match(t) for t in tail)


# The words LF's LLaMA Pro script and its example give an expanded checkpoint's folder (examples/extras/llama_pro/
# expand.sh: ``--output_dir models/llama3-8b-pro``): the base's name with one of these after the size
EXPANSION_WORDS = frozenset({"pro", "expanded", "expand"})


def expansion_base(name: str) -> str | None:
    """The base model's name inside a block-expanded checkpoint's folder name, or None: ``models/llama3-8b-pro`` →
    ``models/llama3-8b`` when the only words after the size that change the architecture (`CHANGES_ARCH`) are
    `EXPANSION_WORDS`; ``Qwen2-7B-moe`` or a name with no size gives None."""
    parts = str(name).replace("\\", "/").rstrip("/").split("/")
    toks = [t for t in re.split(r"([-\s]+)", parts[-1])]
    words = [t.lower() for t in toks[::2]]
    idx = next((i for i, t in enumerate(words) if SIZE.match(t)), None)
    if idx is None:
        return None
    tail = [t for t in words[idx + 1:] if t in CHANGES_ARCH or SIZE.match(t)]
    if not tail or any(t not in EXPANSION_WORDS for t in tail):
        return None
    keep = [w for i, w in enumerate(toks[::2]) if not (i > idx and w.lower() in EXPANSION_WORDS)]
    return "/".join([*parts[:-1], "-".join(keep)])


# Folders a training run writes under its output directory (transformers Trainer ``checkpoint-<step>``, DeepSpeed
# ``global_step<N>``, LLaMA-Factory export / merge folders people name ``merged``/``final``): they say nothing
# about the model, their parent folder does
CHECKPOINT_LEAF = re.compile(r"^(checkpoint[-_]?\d+|global[-_]?step[-_]?\d+|step[-_]?\d+|epoch[-_]?\d+|"
                             r"ckpt([-_]?\d+)?|final|merged?|best|last|latest|export(ed)?|hf(_model)?)$", re.I)


# LLaMA-Factory's examples write a run to saves/<model>/<finetuning_type>/<stage> (examples/train_full/*.yaml
# output_dir: saves/qwen3-4b/full/sft), and its inference and merge examples load that folder back
# (examples/inference/qwen3_full_sft.yaml). Only full and freeze runs save a whole model there; a lora or oft run
# saves an adapter, which is no model_name_or_path.
LF_OUTPUT_TAIL = re.compile(r"^(full|freeze)/(sft|pt|rm|ppo|dpo|kto|orpo|simpo)$", re.I)


def checkpoint_parent(name: str) -> tuple[str, str] | None:
    """(the nearest ancestor of `name` whose leaf is not a checkpoint-like folder, the checkpoint part) when the
    leaf of the path `name` is one (`CHECKPOINT_LEAF`: ``checkpoint-1200``, ``global_step500``, ``merged``) or the
    path ends in LF's output layout (`LF_OUTPUT_TAIL`: ``full/sft``), else None.
    ``/data/m/qwen2.5-7b-sft-v3/checkpoint-1200`` → (``/data/m/qwen2.5-7b-sft-v3``, ``checkpoint-1200``);
    ``saves/qwen3-4b/full/sft`` → (``saves/qwen3-4b``, ``full/sft``)."""
    parts = [p for p in str(name).replace("\\", "/").rstrip("/").split("/")]
    tail: list[str] = []
    while len(parts) > 1 and CHECKPOINT_LEAF.match(parts[-1]):
        tail.insert(0, parts.pop())
    if len(parts) > 2 and LF_OUTPUT_TAIL.match("/".join(parts[-2:])):
        tail[:0] = parts[-2:]
        del parts[-2:]
    if not tail or not parts or parts[-1] in ("", ".", ".."):
        return None
    return "/".join(parts), "/".join(tail)


def shell_variables(name: str) -> list[str]:
    """Unexpanded shell variables in `name` (``${model_dir}``, ``$MODEL``), as written."""
    return [m.group(0) for m in SHELL_VAR.finditer(name)]


def is_moe(cfg: dict[str, Any]) -> bool:
    subs = [cfg] + [v for k, v in cfg.items() if k.endswith("_config") and isinstance(v, dict)]
    return any(isinstance(d.get(k), int) and not isinstance(d.get(k), bool) and d[k] > 0
               for d in subs for k in _EXPERT_KEYS)


def is_multimodal(cfg: dict[str, Any]) -> bool:
    return any(isinstance(cfg.get(k), dict) for k in ("vision_config", "audio_config", "visual", "vision_tower"))


def multimodal_hint(values: dict[str, Any]) -> str | None:
    """Why the YAML says the model sees images, video or audio (a vision template, an ``image_*``/``video_*``
    key), or None."""
    tpl = str(values.get("template") or "").strip()
    if tpl in MULTIMODAL_TEMPLATES:
        return f"template {tpl}"
    keys = sorted(k for k in values if isinstance(k, str) and k.startswith(("image_", "video_", "audio_"))
                  and values[k] is not None)
    return f"{keys[0]} is set" if keys else None


def _entry_traits(entry: dict[str, Any]) -> list[Traits]:
    return [traits(n) for n in [entry["id"], *entry.get("aliases", [])]]


def _base_id(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    cfg, chain = resolve_entry(entry)
    return chain[-1], cfg


def same_class(name: str, entry: dict[str, Any]) -> bool:
    """True when `entry` keeps the size class, the active size (MoE vs dense) and the family `name` states.

    A name that states no size decides nothing and passes; the entry's MoE-ness must match a stated active size.
    """
    t = traits(name)
    if t.size is None:
        return True
    _, cfg = _base_id(entry)
    if t.active is not None and not is_moe(cfg):
        return False
    return any(e.size == t.size and e.active == t.active and (not t.family or e.family == t.family)
               for e in _entry_traits(entry))


def _billions(size: str | None) -> float | None:
    """``7b`` -> 7.0, ``8x7b`` -> 56.0, ``500m`` -> 0.5; None for what is not a plain size."""
    m = re.fullmatch(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])", (size or "").lower())
    if m is None:
        return None
    n = float(m.group(2)) * (int(m.group(1)) if m.group(1) else 1)
    return n / 1000 if m.group(3) == "m" else n


def near_size(name: str, entry: dict[str, Any]) -> bool:
    """True unless `name` and `entry` both state a size and they differ by more than a typo would (a factor of
    1.5: ``Qwen2.5-8B`` suggests Qwen2.5-7B, ``Qwen2-VL-72B`` does not suggest Qwen2-VL-7B)."""
    mine = _billions(traits(name).size)
    if mine is None:
        return True
    theirs = [b for t in _entry_traits(entry) if (b := _billions(t.size)) is not None]
    return not theirs or any(max(mine, b) / max(min(mine, b), 1e-9) <= 1.5 for b in theirs)


# Size words families use instead of a parameter count (GPT-2 small/medium/large/xl, BERT/T5 base/large, Phi-3
# mini/small/medium): shared across families, so they never make two names one family
SIZE_WORDS = frozenset({"tiny", "mini", "small", "medium", "base", "large", "xl", "xxl", "nano", "micro"})


def word_family(name: str) -> str:
    """The family the last path component of `name` states before its first size, numeric (``7b``) or a word
    (`SIZE_WORDS`): ``gpt2-medium`` → ``gpt2``, ``microsoft/Phi-3-medium-4k-instruct`` → ``phi3``,
    ``Qwen2.5-7B`` → ``qwen25``; the whole name squashed when it states none."""
    base = norm(name).rsplit("/", 1)[-1]
    toks = [t for t in re.split(r"[-_\s]+", base) if t]
    cut = next((i for i, t in enumerate(toks) if SIZE.match(t) or t in SIZE_WORDS), len(toks))
    return _family(re.sub(r"[^a-z0-9]", "", "".join(w for w in toks[:cut] if w not in GENERIC_WORDS)))


def same_kind(name: str, entry: dict[str, Any]) -> bool:
    """True when `entry` is a fair suggestion for `name`: the same family, and never a dense entry for a name that
    states an active size (a size may differ: ``Qwen2.5-8B`` is a typo of Qwen2.5-7B; ``Qwen2-57B-A14B`` is not a
    Qwen2-7B); a name without one may be a MoE's (``Qwen2-57B``), and `suggestion_note` says so. A name without a
    numeric size keeps its family too (`word_family`, one a prefix of the other): ``gpt2-medium`` never suggests
    Phi-3-medium on the shared size word (trial 11, LlamaFactory#5320)."""
    t = traits(name)
    if t.size is None:
        mine = word_family(name)
        return not mine or any(f and (f.startswith(mine) or mine.startswith(f))
                               for f in (word_family(n) for n in [entry["id"], *entry.get("aliases", [])]))
    _, cfg = _base_id(entry)
    if t.active is not None and not is_moe(cfg) and not t.size.count("x"):
        return False   # a name that states an active size is a MoE: never a dense suggestion
    # a name without an active size may still be a MoE's folder (trial 16: `Qwen2-57B` for Qwen2-57B-A14B): its
    # MoE-ness is unknown, so a MoE entry may be suggested, and `suggestion_note` says that it is one
    return any((not t.family or e.family == t.family) and (t.active is None or e.active is not None)
               for e in _entry_traits(entry))


def suggestion_note(name: str, entry: dict[str, Any]) -> str:
    """What a did-you-mean entry does not share with `name`, said beside it (trial 16: `Qwen2-57B` got "did you
    mean Qwen/Qwen2-72B?", a dense model of another size): `` (a MoE, 14B active)``, `` (dense)``, ``
    (72.71B: another size than 57B)``; "" when it shares both. Sizes are the entry's published parameter count
    (models.json ``published_params``, billions) against the size the name states (`traits`); "another size" past a
    10 % difference."""
    t, (_, cfg) = traits(name), _base_id(entry)
    parts = []
    if is_moe(cfg) and t.active is None:
        act = entry.get("published_active_params")
        parts.append(f"a MoE{f', {act:g}B active' if act else ''}")
    elif t.active is not None and not is_moe(cfg):
        parts.append("dense")
    mine, theirs = _billions(t.size), entry.get("published_params")
    if mine and isinstance(theirs, (int, float)) and abs(theirs / mine - 1) > 0.10:
        parts.append(f"{theirs:g}B: another size than {mine:g}B")
    return f" ({'; '.join(parts)})" if parts else ""


@dataclass(frozen=True)
class Inference:
    """One catalogue entry a name points at: `entry`, `why` (what narrowed it), `others` (other architectures
    of the same family and size that the narrowing excluded)."""

    entry: dict[str, Any]
    why: str
    others: tuple[str, ...] = ()


def infer(name: str, mm_hint: str | None = None, template: str | None = None) -> Inference | None:
    """The one catalogue architecture whose family, size class and active size equal those `name` states,
    narrowed to vision/audio models when `mm_hint` says so; None when the name states no size, or when zero or
    several architectures fit (a guess between them would be silent)."""
    t = traits(name)
    tkey = re.sub(r"[^a-z0-9]", "", (template or "").lower())
    # a name without a family word (/data/model/7b-sft) takes the template's family, if it names one
    from_template = not t.family and bool(tkey) and tkey not in ("default", "empty", "custom", "alpaca", "vicuna")
    if t.size is None or not (t.family or from_template) or changes_architecture(name):
        return None
    by_arch: dict[str, dict[str, Any]] = {}
    excluded: list[str] = []
    for e in catalog_entries():
        fits = False
        for et in _entry_traits(e):
            if et.size != t.size or et.active != t.active:
                continue
            if (t.family and et.family == t.family) or (from_template and et.family.startswith(tkey)) or (
                    mm_hint and tkey and et.family.startswith(tkey)
                    and (tkey.startswith(t.family) or t.family.startswith(tkey))):
                fits = True
                break
        if not fits:
            continue
        base, cfg = _base_id(e)
        if mm_hint and not is_multimodal(cfg):
            excluded.append(e["id"])
            continue
        if t.active is not None and not is_moe(cfg):
            continue
        by_arch.setdefault(base, e)
    if len(by_arch) != 1:
        return None
    (entry,) = by_arch.values()
    why = (f"family '{t.family}'" if t.family else f"family of template {template}") + f", size {t.size}" + (
        f", active {t.active}" if t.active else "")
    if mm_hint:
        why += f", with a vision/audio tower ({mm_hint})"
    return Inference(entry, why, tuple(dict.fromkeys(excluded)))
