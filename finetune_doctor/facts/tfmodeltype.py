"""Whether the training machine's transformers registers the model's ``model_type``.

LLaMA-Factory loads every model through transformers' ``AutoConfig.from_pretrained``, which raises ValueError
"The checkpoint you are trying to load has model type `qwen3` but Transformers does not recognize this
architecture" for a type its CONFIG_MAPPING lacks (transformers models/auto/configuration_auto.py). The first
release registering each type is catalog/tf_model_types.json (with its source per row). Trial 5: LF 0.9.2 with
transformers 4.49.0 sized Qwen3-8B without a word, which is what stopped hiyouga/LlamaFactory#7977.

Only the standard library is imported: `doctor lint` reaches this module.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "tf_model_types.json"


@lru_cache(maxsize=1)
def load() -> dict[str, dict[str, str]]:
    """{model_type: {"since": first transformers release, "source": where that is stated}}."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))["model_types"]


@lru_cache(maxsize=1)
def _names() -> tuple[tuple[Any, str], ...]:
    import re

    rows = json.loads(CATALOG.read_text(encoding="utf-8")).get("names", [])
    return tuple((re.compile(r["pattern"]), r["model_type"]) for r in rows)


def type_by_name(name: str | None) -> str | None:
    """The model_type a model's name states (catalog/tf_model_types.json ``names``: ``GLM-4-9B-0414`` is ``glm4``),
    for a model whose config.json was not read; None when no pattern matches."""
    if not name:
        return None
    return next((t for pat, t in _names() if pat.search(str(name))), None)


def unregistered(model_type: str | None, transformers: str | None, stated: bool, source: str,
                 assumed_why: str = "") -> dict[str, Any] | None:
    """The ``lint.model_type_unregistered`` fact: {model_type, since, source_of_since, transformers, stated,
    source, why} when `transformers` ("4.49.0") is older than the first release that registers `model_type`;
    None when it is not, when the type is not catalogued, or when the comparison hinges on a pre-release suffix
    (facts/stackrange.py `satisfies`). `stated`: the version was read from the inputs (`source` says where), else
    assumed (`assumed_why` says from what)."""
    if not model_type or not transformers:
        return None
    row = load().get(str(model_type))
    if row is None:
        return None
    from finetune_doctor.facts.stackrange import satisfies

    if satisfies(transformers, f"transformers>={row['since']}") is not False:
        return None
    return {"model_type": model_type, "since": row["since"], "source_of_since": row["source"],
            "transformers": transformers, "stated": stated, "source": source, "why": assumed_why, "by_name": None,
            "scope": "all", "given": "", "admitted_by": ""}


def _model_type(asm: Any, arch: Any) -> tuple[str | None, str | None]:
    """(model_type, the name it was read from when no config.json was: None when read) of an assembly."""
    name = str(asm.doc.values.get("model_name_or_path") or "")
    # the type read from a config.json, else (nothing read, or a match by name the name's release tag leaves open:
    # readers/model/modelcfg.py `_assumed`) the one the name states
    open_match = any(a.name == "model" and a.moves_verdict for a in asm.assumptions)
    mtype = arch.model_type if arch is not None and not open_match else (type_by_name(name) or
                                                                      (arch.model_type if arch is not None else None))
    return mtype, (name if arch is None or open_match else None)


def facts(asm: Any, arch: Any) -> dict[str, Any]:
    """The lint facts of this module: ``model_type_unregistered`` (`fact`) and ``tf_conflict`` (`conflict`); a
    transformers refusal of ``asm.facts["lint"]["stack_refusals"]`` that the conflict makes pointless to cure
    inside the release's range gets its ``advice`` from the conflict (rule package-version-refused)."""
    got = conflict(asm, arch)
    if got is not None:
        for item in asm.facts["lint"].get("stack_refusals") or ():
            if item.get("package") == "transformers":
                item["advice"] = got["advice"]
    from finetune_doctor.facts import visionfreeze

    return {"model_type_unregistered": fact(asm, arch), "tf_conflict": got,
            # the tower `freeze_vision_tower` leaves partly trainable in the judged release (FD058, PR #10139)
            "vision_pos_embed_trains": visionfreeze.fact(asm, _model_type(asm, arch)[0])}


def conflict(asm: Any, arch: Any) -> dict[str, Any] | None:
    """The ``lint.tf_conflict`` fact: the model's type needs a transformers (catalog/tf_model_types.json ``since``)
    that every judged LLaMA-Factory release's start-up range caps below (catalog/lf_stack_ranges.json), so no
    transformers version satisfies both and the cure is a newer LLaMA-Factory (trial 11, LlamaFactory#6823: the
    doctor said "install transformers<=4.46.1" for LF 0.9.1, then that qwen2_5_vl needs >= 4.49.0).

    {model_type, since, source_of_since, releases ("0.9.1"), release_source, specs (the judged requirements),
    first (the first later release whose range admits ``since`` or newer, stackrange `first_release_admitting`;
    "" when none), first_spec, advice ("upgrade-lf", or "no-release" when no catalogued release admits it),
    by_name}. None without a known release, a catalogued type, or when some judged release admits it."""
    from finetune_doctor.facts import stackrange

    mtype, by_name = _model_type(asm, arch)
    row = load().get(str(mtype)) if mtype else None
    release = getattr(asm, "release", None)
    if row is None or release is None or not getattr(release, "known", False) or getattr(release, "older", False):
        return None
    catalog = stackrange.load()["releases"]
    judged = [v for v in release.versions if v in catalog]
    reqs = [next((r for r in catalog[v]["requires"] if r["package"] == "transformers"), None) for v in judged]
    if not judged or len(judged) != len(release.versions) or any(r is None for r in reqs):
        return None
    if any(stackrange.admits_from(r["spec"], row["since"]) is not False for r in reqs):
        return None
    first = stackrange.first_release_admitting("transformers", row["since"], judged[-1])
    return {"model_type": mtype, "since": row["since"], "source_of_since": row["source"],
            "releases": judged[0] if len(judged) == 1 else f"{judged[0]}-{judged[-1]}",
            "release_source": getattr(release, "source", "") or "",
            "specs": "; ".join(dict.fromkeys(r["spec"] for r in reqs)),
            "first": first[0] if first else "", "first_spec": first[1] if first else "",
            "first_text": "" if not first else (f"{first[0]} (the main branch, not yet published: "
                                                 "pip install from its git repository)" if "dev" in first[0]
                                                 else f"{first[0]} (pip install -U \"llamafactory>={first[0]}\")"),
            "advice": "upgrade-lf" if first else "no-release", "by_name": by_name}


def fact(asm: Any, arch: Any) -> dict[str, Any] | None:
    """The ``lint.model_type_unregistered`` fact of an assembly (facts/config.py `Assembly`): the model's type
    against the transformers the inputs state (``asm.stack_sources``), else the one assumed from the LF release's
    range (``asm.tf_assumed``, facts/stackrange.py `assumed_transformers`); None without a model."""
    mtype, by_name = _model_type(asm, arch)
    stated = next(((v, src) for p, v, src in asm.stack_sources if p == "transformers"), None)
    a = getattr(asm, "tf_assumed", None)
    if stated is not None:
        out = unregistered(mtype, stated[0], True, stated[1])
    elif (newest := _newest_per_release(getattr(asm, "release", None) if a is not None or stated is None
                                        else None)):
        # a development build judged by two releases (0.9.3.dev0 -> 0.9.2 and 0.9.3): the type is refused only if
        # the newest transformers of each is too old, and the message gives each release its own bound (trial 9:
        # "0.9.2-0.9.3 runs with at most 4.49.0" beside 0.9.3's "<=4.52.4")
        refused = [(v, r) for v, r in newest if unregistered(mtype, v, False, "") is not None]
        if not refused:
            return None
        rel = asm.release
        why = "; ".join(f"{r} accepts at most {v}" for v, r in newest)
        if len(refused) < len(newest):
            # only one bounding release stops short of the type: the commit decides, an unverified warning (README,
            # `--llamafactory`), never silence (trial 11)
            v, r = refused[0]
            got = unregistered(mtype, v, False, f"LLaMA-Factory {r} ({rel.source})", why)
            return None if got is None else {**got, "scope": "some", "given": rel.given or "",
                                             "by_name": by_name, "admitted_by": ", ".join(
                                                 x for _, x in newest if (_, x) not in refused)}
        top = max(newest, key=lambda x: _key(x[0]))
        out = unregistered(mtype, top[0], False, f"LLaMA-Factory {rel.versions[0]}-{rel.versions[-1]} ({rel.source})",
                           why)
    elif a is not None:
        out = unregistered(mtype, a["version"], False, f"LLaMA-Factory {a['releases']} ({a['release_source']})",
                           f"the newest version LLaMA-Factory {a['releases']} accepts ({a['spec']})")
    else:
        return None
    return {**out, "by_name": by_name} if out is not None and by_name else out


def _key(v: str) -> tuple[int, ...]:
    from finetune_doctor.numbers import parse_version

    return tuple(parse_version(v, parts=None) or ())


def _newest_per_release(release: Any) -> list[tuple[str, str]]:
    """[(newest transformers the release's start-up range admits, release)] for each release `release` is judged
    by (facts/stackrange.py `assumed_transformers` of each alone); [] when one of them has no bound."""
    if release is None or len(getattr(release, "versions", ()) or ()) < 2:
        return []
    from finetune_doctor.facts.stackrange import assumed_transformers
    from finetune_doctor.readers.config.lfrelease import choose

    out = []
    for v in release.versions:
        got = assumed_transformers(choose(v, getattr(release, "source", "") or "--llamafactory"))
        if got is None:
            return []
        out.append((got["version"], v))
    return out


def could_run(asm: Any, arch: Any, version: str) -> bool:
    """Whether the training machine could run transformers `version` (a what-if alternative such as the older stack
    of facts/assume.py `OLD_TRANSFORMERS`): the model's type is registered by it (catalog/tf_model_types.json) and
    some judged LLaMA-Factory release's start-up range admits it (catalog/lf_stack_ranges.json; any release when
    none is known). Trial 11 (LlamaFactory PR #10139): Qwen3-VL on LF 0.9.4 was sized "if transformers 4.48.3",
    a version that neither loads qwen3_vl (4.57.0) nor passes 0.9.4's check (>= 4.51.0)."""
    from finetune_doctor.facts import stackrange

    mtype, _ = _model_type(asm, arch)
    row = load().get(str(mtype)) if mtype else None
    if row is not None and stackrange.satisfies(version, f"transformers>={row['since']}") is False:
        return False
    release = getattr(asm, "release", None)
    catalog = stackrange.load()["releases"]
    judged = [v for v in getattr(release, "versions", ()) or () if v in catalog]
    if release is None or not getattr(release, "known", False) or not judged:
        return True
    reqs = [next((r for r in catalog[v]["requires"] if r["package"] == "transformers"), None) for v in judged]
    return any(r is None or stackrange.satisfies(version, r["spec"]) is not False for r in reqs)
