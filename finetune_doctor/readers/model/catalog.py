"""The bundled model catalog (``finetune_doctor/catalog/models.json``): the offline fallback.

An entry either holds the ``config`` fields copied from its model's config.json (with the ``source`` address),
or names another entry with ``same_architecture_as`` (fine-tunes and distills that keep a base model's shapes:
DeepSeek-R1-Distill-Llama-70B → Llama-3.3-70B-Instruct) plus an optional ``config_overrides`` dict of the
config.json fields that differ (``vocab_size``, ``torch_dtype``, ``quantization_config``), its own ``source``
and the ``basis`` of the claim. Lookups go by repo id, alias, the last path component, or that name with
architecture-neutral endings dropped (``-Instruct``, ``-Chat``, ``-hf``; and quantization endings such as
``-AWQ``: the weights are then sized as such uploads are stored, quant.py `hinted_spec`, and the report names that
as an assumption; an ending with no usual layout, ``-FP8``, leaves the quantization unknown).
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from finetune_doctor.arch import ModelArch
from finetune_doctor.quant import QuantSpec, hinted_spec, name_suggests_quantized
from finetune_doctor.readers.model.generic import arch_from_config

CATALOG_PATH = Path(__file__).resolve().parent.parent.parent / "catalog" / "models.json"

# Name endings that do not change the architecture: chat/instruct tunes, HF-format exports, quantized
# re-uploads keep the base model's shapes. Stripped one at a time from the end when looking up the catalog.
QUANT_SUFFIXES = ("gptq", "awq", "int4", "int8", "fp8", "bnb", "4bit", "8bit", "gguf", "mlx", "mxfp4")
# Precision conversions (unsloth's gpt-oss-120b-BF16, DeepSeek-R1 BF16 uploads) keep the shapes; their dtype is
# the base entry's, which for an MXFP4/FP8 base is what LLaMA-Factory dequantizes to anyway (bf16).
PRECISION_SUFFIXES = ("bf16", "fp16", "fp32")
NEUTRAL_SUFFIXES = (
    "instruct", "chat", "hf", "base", "it", "pt", "sft", "dpo", "rlhf", "4k", "8k", "32k", "128k",
    "ms", "full", "lora", "merged",
    # the original (unconverted) weights a KTransformers run starts from: LF's examples/ktransformers name the
    # folder /path/to/DeepSeek-V3.1-source
    "source",
) + QUANT_SUFFIXES + PRECISION_SUFFIXES
# A four-digit release tag (DeepSeek-R1-0528, DeepSeek-V3-0324, Qwen3-30B-A3B-2507, Mistral-Small-...-2503) marks
# a retrained checkpoint of the same architecture; sizes always carry a unit (7b, 32k), so four bare digits do not.
RELEASE_TAG = re.compile(r"-\d{4}$")
MAX_ALIAS_DEPTH = 4


def norm(s: str) -> str:
    # ModelScope's snapshot_download writes "Qwen2.5-7B" as "Qwen2___5-7B" on disk
    return s.strip().strip("/").replace("___", ".").lower().replace("_", "-")


# One search finds whichever neutral ending or release tag closes the name (no ending contains a hyphen, so at most
# one matches at a time); `stem` strips them until none is left. Built once: the catalog index stems ~300 names per
# process, and a loop of `endswith` over every ending cost ~8 ms of a one-file `doctor lint`.
_NEUTRAL_END = re.compile("-(?:" + "|".join(map(re.escape, NEUTRAL_SUFFIXES)) + r")$|" + RELEASE_TAG.pattern)
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def stem(s: str) -> str:
    """Lower-cased last path component with architecture-neutral endings removed (tune, quantization and precision
    endings, a four-digit release tag), repeatedly, never down to nothing."""
    base = norm(s).rsplit("/", 1)[-1]
    while (end := _NEUTRAL_END.search(base)) is not None and end.start() > 0:
        base = base[:end.start()]
    return base


def release_tag_lacking(name: str, entry: dict[str, Any]) -> str | None:
    """The four-digit release tag (``-0414``, ``-2507``, ``-0528``) that `name` carries and `entry`'s id and aliases
    do not, dropped by `stem` to match them; None when there is none. A tag marks another checkpoint of the family,
    and not always of the same architecture: THUDM/GLM-4-9B-0414 is transformers' ``glm4`` (4.51), THUDM/glm-4-9b
    the ``chatglm`` remote code (hiyouga/LlamaFactory#7779), so such a match is only an assumption (trial 5)."""
    base = norm(name).rsplit("/", 1)[-1]
    tags = []
    while (end := _NEUTRAL_END.search(base)) is not None and end.start() > 0:
        if RELEASE_TAG.fullmatch(base[end.start():]):
            tags.append(base[end.start():])
        base = base[:end.start()]
    if not tags:
        return None
    known = " ".join(norm(x) for x in (entry.get("id", ""), *entry.get("aliases", ())))
    missing = [t for t in tags if t not in known]
    return missing[-1] if missing else None


def _squash(s: str) -> str:
    return _NOT_ALNUM.sub("", stem(s))


@lru_cache(maxsize=1)
def catalog_entries() -> tuple[dict[str, Any], ...]:
    """The bundled catalog: one dict per model with ``id``, ``aliases``, ``source`` and either ``config`` (fields
    copied from its config.json, ``published_params`` in billions, ``published_basis``) or
    ``same_architecture_as`` (another entry's id, ``basis``, optional ``config_overrides``)."""
    try:
        from finetune_doctor.fsutil import bundled_json   # a marshal copy: ~1/3 of json.loads' time (issue #22)

        data: Any = bundled_json(str(CATALOG_PATH))
    except (OSError, ValueError) as e:  # a broken install, not user input
        raise RuntimeError(f"bundled model catalog unreadable: {CATALOG_PATH}: {e}") from e
    return tuple(data["models"])


def catalog_names() -> list[str]:
    """Repo ids of every catalog entry, in catalog order (for did-you-mean and the docs)."""
    return [e["id"] for e in catalog_entries()]


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, set[int]], dict[str, int]]:
    by_id: dict[str, int] = {}
    by_name: dict[str, int] = {}
    by_stem: dict[str, int] = {}
    by_squash: dict[str, set[int]] = {}
    ids: dict[str, int] = {}
    for i, e in enumerate(catalog_entries()):
        ids.setdefault(norm(e["id"]), i)
        for n in [e["id"], *e.get("aliases", [])]:
            if "/" in n:
                by_id.setdefault(norm(n), i)
            by_name.setdefault(norm(n).rsplit("/", 1)[-1], i)
            st = stem(n)
            by_stem.setdefault(st, i)
            by_squash.setdefault(_NOT_ALNUM.sub("", st), set()).add(i)
    return by_id, by_name, by_stem, by_squash, ids


def find_in_catalog(name: str) -> tuple[dict[str, Any], str] | None:
    """The catalog entry for a repo id or name, and how it matched: ``id`` (a repo id or aliased repo id,
    case-insensitive), ``name`` (the last path component equals an entry's or alias's name), ``stem`` (equal
    after dropping architecture-neutral endings such as -Instruct, -Chat, -hf, -it, -GPTQ) or ``loose`` (equal
    letters and digits once separators are dropped, ``qwen25_7b`` for Qwen2.5-7B, when only one entry fits).
    None when absent."""
    by_id, by_name, by_stem, by_squash, _ = _index()
    entries = catalog_entries()
    n = norm(name)
    if n in by_id:
        return entries[by_id[n]], "id"
    base = n.rsplit("/", 1)[-1]
    if base in by_name:
        return entries[by_name[base]], "name"
    st = stem(name)
    if st in by_stem:
        return entries[by_stem[st]], "stem"
    hits = by_squash.get(_squash(name), set())
    if len(hits) == 1:
        return entries[next(iter(hits))], "loose"
    return None


def did_you_mean(name: str, n: int = 3) -> list[str]:
    """Up to `n` catalog ids whose names are closest to `name` (difflib ratio >= 0.6)."""
    return list(_did_you_mean(name, n))


@lru_cache(maxsize=256)
def _did_you_mean(name: str, n: int) -> tuple[str, ...]:
    # one difflib scan of the catalog per name per process: a corpus names the same few models over and over
    import difflib   # here: only a name the catalogue does not hold needs it (not the lint of a known model)

    _, by_name, by_stem, _, _ = _index()
    ids = catalog_names()
    keys = {**by_stem, **by_name}
    out: list[str] = []
    for k in difflib.get_close_matches(stem(name), list(keys), n=n * 3, cutoff=0.6):
        i = ids[keys[k]]
        if i not in out:
            out.append(i)
    return tuple(out[:n])


def _entry_by_id(mid: str) -> dict[str, Any] | None:
    i = _index()[4].get(norm(mid))
    if i is None:
        found = find_in_catalog(mid)
        return found[0] if found and found[1] == "id" else None
    return catalog_entries()[i]


def resolve_entry(entry: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The config dict of `entry` after following ``same_architecture_as`` links (overrides applied), and the
    chain of ids followed. Raises RuntimeError on a dangling or circular link (a broken catalog, not user input)."""
    chain = [entry["id"]]
    overrides: list[dict[str, Any]] = []
    cur = entry
    while "config" not in cur:
        target = cur.get("same_architecture_as")
        if not target or len(chain) > MAX_ALIAS_DEPTH:
            raise RuntimeError(f"catalog entry {entry['id']}: no config and no resolvable same_architecture_as")
        nxt = _entry_by_id(str(target))
        if nxt is None or nxt["id"] in chain:
            raise RuntimeError(f"catalog entry {cur['id']}: same_architecture_as {target!r} is not a catalog id")
        if isinstance(cur.get("config_overrides"), dict):
            overrides.append(cur["config_overrides"])
        chain.append(nxt["id"])
        cur = nxt
    cfg = dict(cur["config"])
    for ov in reversed(overrides):  # the entry closest to the user's name wins
        cfg.update(ov)
    return cfg, chain


def _dtype_not_in_config(cfg: dict[str, Any], entry: dict[str, Any], base: dict[str, Any]) -> dict[str, Any] | None:
    """The ``provenance.torch_dtype`` record (value, from, source, checked) when the catalogue's config copy names
    no dtype, else None. The record says whether the value is the real config.json's (left out of a copy read from
    a fine-tune or conversion), the stored weights' (what ``torch_dtype="auto"`` resolves to when config.json
    names none: transformers modeling_utils.py ``_get_dtype``) or the modeling code's; scripts/catalog_provenance.py
    writes it."""
    for d in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}):
        v = d.get("torch_dtype") or d.get("dtype")
        if isinstance(v, str) and v != "auto":
            return None
    for e in (entry, base):
        rec = (e.get("provenance") or {}).get("torch_dtype")
        if isinstance(rec, dict) and isinstance(rec.get("value"), str):
            return rec
    return None


_PLAIN_DTYPE = re.compile(r"(^|[-_.])(bf16|fp16|fp32|bfloat16|float16)($|[-_.])")


def names_plain_dtype(name: str) -> bool:
    """True when the last path component of `name` states an unquantized dtype (``DeepSeek-R1-0528-BF16``,
    ``...-fp16``) and no quantized format: a conversion of a quantized release to plain weights."""
    base = str(name).strip().strip("/").rsplit("/", 1)[-1].lower()
    return bool(_PLAIN_DTYPE.search(base)) and name_suggests_quantized(name) is None


def cfg_quant_method(entry: dict[str, Any]) -> str:
    qc = resolve_entry(entry)[0].get("quantization_config")
    return str(qc.get("quant_method") or "quantized") if isinstance(qc, dict) else "none"


def catalog_arch(entry: dict[str, Any], name: str | None = None, how: str = "id", *,
                 transformers_major: int | str | None = None) -> ModelArch:
    """`ModelArch` of one catalog entry; `name`/`how` record what the user wrote and how it matched.

    An alias entry (``same_architecture_as``) takes its target's architecture and says so in `notes` and
    `source`. When the lookup stripped a quantization ending from `name` and no catalog config states a
    ``quantization_config``, `ModelArch.quant` is ``QuantSpec("unknown", known=False)``: the weights are sized at
    the base checkpoint's dtype and the notes say the quantization is unknown.

    Kept per (entry, name, how, transformers_major) for the process: the answer depends on nothing else and
    `ModelArch` is frozen; a lint of LF's examples sizes the same few models in most of its ~90 files (issue #22).
    """
    key = (id(entry), name, how, transformers_major)
    hit = _ARCHS.get(key)
    if hit is not None and hit[0] is entry:
        return hit[1]
    arch = _catalog_arch(entry, name, how, transformers_major)
    if len(_ARCHS) < 4096:
        _ARCHS[key] = (entry, arch)   # the entry is held so that its id() stays its own
    return arch


_ARCHS: dict[tuple[Any, ...], tuple[dict[str, Any], ModelArch]] = {}


def _catalog_arch(entry: dict[str, Any], name: str | None, how: str,
                  transformers_major: int | str | None) -> ModelArch:
    cfg, chain = resolve_entry(entry)
    base = catalog_entries()[_index()[4][norm(chain[-1])]]
    notes: list[str] = []
    stored = _dtype_not_in_config(cfg, entry, base)
    if stored is not None:
        cfg = {**cfg, "torch_dtype": stored["value"]}
        notes.append(f"checkpoint dtype {stored['value']} from the {stored['from']} (catalogue provenance"
                     + ("" if stored.get("checked", True) else ", recalled, not re-read") + ")")
    if name and isinstance(cfg.get("quantization_config"), dict) and names_plain_dtype(name):
        # DeepSeek-R1-0528-BF16: an upcast of the FP8 release; the catalogue's quantization_config is not its own
        cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
        notes.append(f"the name '{name}' states an unquantized dtype: {entry['id']}'s quantization_config "
                     f"({cfg_quant_method(entry)}) is dropped, the weights sized as {cfg.get('torch_dtype') or 'stored'}")
    arch = arch_from_config(cfg, entry["id"], f"bundled catalog: {entry.get('source') or base['source']}",
                            transformers_major=transformers_major)
    if len(chain) > 1:
        notes.append(f"architecture of {chain[-1]} (catalog alias"
                     + (f": {entry['basis']}" if entry.get("basis") else "") + ")")
    else:
        notes.append(f"shapes from the bundled catalog entry {entry['id']}")
    if how != "id" or (name and norm(name) != norm(entry["id"])):
        notes[-1] += f", matched by name from '{name}' (not read from your checkpoint)"
    notes = notes[1:] + notes[:1]   # how it matched first, then where the dtype came from
    quant = arch.quant
    hint = name_suggests_quantized(name) if name else None
    spec = hinted_spec(name) if hint and quant is None else None
    if spec is not None:
        # a -AWQ / -GPTQ-Int4 / -bnb-4bit upload is stored that way: sized so, named as an assumption (issue #21,
        # trial 2: an AWQ 70B headlined as 131.8 GiB of bf16 weights)
        quant = replace(spec, from_name=True, detail=f"assumed from the name's {hint} ending")
        notes.append(f"the name suggests a {hint}-quantized checkpoint and no config.json says how it is stored: "
                     f"weights sized as {spec.label}, the usual layout of such uploads (an assumption)")
    elif hint and quant is None:
        quant = QuantSpec("unknown", known=False, detail=f"the name suggests {hint}")
        notes.append(f"the name suggests a {hint}-quantized checkpoint, but no config.json says how it is stored: "
                     "quantization unknown, weights sized as the unquantized base model")
    published = base.get("published_params") if len(chain) > 1 and not entry.get("published_params") \
        else entry.get("published_params")
    return replace(arch, published_params=published, quant=quant, source_kind="catalog",
                   notes="; ".join(x for x in (*notes, arch.notes) if x))


# Separators people and tools put between a repository's owner and its name when they flatten ``ORG/NAME`` into one
# folder, longest first so that ``Qwen___Qwen3-14B`` is not read as owner ``Qwen`` plus ``__Qwen3-14B``. ``--`` is
# huggingface_hub's (file_download.py ``repo_folder_name``: ``models--{org}--{name}``, handled with its
# ``snapshots/`` layout by caches.py ``repo_of_cache_folder``); the underscore forms are what users write when they
# save a download from ModelScope or the hub under one folder (trial 18, LlamaFactory#8641:
# ``/workspace/models/Qwen_Qwen3-14B``). ModelScope's own cache keeps ``<org>/<name>`` and writes a dot in the name
# as ``___`` (modelscope hub/snapshot_download.py ``create_temporary_directory_and_cache``), which `norm` undoes.
OWNER_SEPARATORS = ("___", "__", "--", "_")


@lru_cache(maxsize=1)
def _owners() -> tuple[str, ...]:
    """Lower-cased owners of every catalogue id and aliased repo id, longest first."""
    owners = {n.split("/", 1)[0].lower() for e in catalog_entries() for n in [e["id"], *e.get("aliases", [])]
              if "/" in n}
    return tuple(sorted(owners, key=len, reverse=True))


def owner_joined_repo(name: str) -> tuple[str, str] | None:
    """(``ORG/NAME``, the separator) when the last path component of `name` is a catalogue owner joined to a
    name by one of `OWNER_SEPARATORS` (``Qwen_Qwen3-14B``, ``Qwen__Qwen3-14B``, ``Qwen___Qwen2___5-7B``,
    ``meta-llama--Llama-3.1-8B``), with ModelScope's ``___`` in the name read back as a dot; else None. Only owners
    the catalogue holds are read this way (``my_qwen3-14b`` is no repository), and the caller records the reading
    as an assumption: the folder's name is all that says which repository it holds."""
    leaf = str(name).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    low = leaf.lower()
    for owner in _owners():
        if not low.startswith(owner):
            continue
        rest = leaf[len(owner):]
        sep = next((s for s in OWNER_SEPARATORS if rest.startswith(s)), None)
        if sep is None or len(rest) == len(sep):
            continue
        return f"{leaf[:len(owner)]}/{rest[len(sep):].replace('___', '.')}", sep
    return None
