"""Check the bundled model catalog against transformers and against the published parameter counts.

Independent of the doctor's own model reader: for every entry of ``finetune_doctor/catalog/models.json`` that
has a ``config`` this builds the model transformers implements for it (the class ``architectures[0]`` names,
else the Auto class for its ``model_type``) on the meta device -- no weights, no download, no remote code --
and compares ``sum(p.numel() for p in model.parameters())`` with ``published_params`` (billions, from the model
card, technical report or the hub's safetensors metadata; ``published_basis`` says which). The bar is 1 %.
Alias entries (``same_architecture_as``) are built from their base's config with their ``config_overrides``
and reported next to the base. Entries whose type transformers does not ship carry ``"verify": "no
transformers class: <why>"`` and are listed, not built. The structural rules every entry obeys (required
fields, source addresses, unique names, alias targets, no alias loops) are checked first.

    python scripts/catalog_check.py                       # table on stdout, exit 1 on any failure
    python scripts/catalog_check.py --markdown benchmarks/results/catalog_check.md
    python scripts/catalog_check.py --only Qwen/Qwen3-8B  # one entry (repeatable)
    python scripts/catalog_check.py --structure-only --lf-constants constants.py  # coverage of LLaMA-Factory's groups

``--lf-constants`` takes LLaMA-Factory's ``src/llamafactory/extras/constants.py`` and reports which of its
``register_model_group`` groups have at least one model id that is a catalog name (id or alias).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).resolve().parent.parent / "finetune_doctor" / "catalog" / "models.json"
TOLERANCE = 0.01
# A size only stated in the model's name ("8B"): compared, but only to catch a wrong config (names round down).
NOMINAL_TOLERANCE = 0.15
# Module-name prefixes of the towers a card may leave out of its count ("published_scope": "text").
# "published_scope": "non_embedding" marks a count without the token embedding and the output head.
_EMBEDDINGS = ("embed_tokens", "lm_head", "wte", "word_embeddings")
SCOPES = ("all", "text", "non_embedding")
_TOWERS = ("vision_tower", "visual", "vision_model", "multi_modal_projector", "embed_vision", "audio_tower",
           "embed_audio", "vision_embed", "mm_projector", "merger")
BASE_FIELDS = ("id", "aliases", "source", "card_params", "published_params", "published_basis", "config")
ALIAS_FIELDS = ("id", "aliases", "same_architecture_as", "source", "basis", "config_overrides")
_URL = re.compile(r"^https://(huggingface\.co|github\.com|modelscope\.cn)/\S+$")


def load(path: Path = CATALOG) -> list[dict[str, Any]]:
    return json.loads(path.read_text(encoding="utf-8"))["models"]


def structural_errors(entries: list[dict[str, Any]]) -> list[str]:
    """Every rule an entry must obey, as messages (empty when all hold)."""
    errs: list[str] = []
    by_id = {}
    seen: dict[str, str] = {}
    for e in entries:
        eid = e.get("id", "?")
        fields = ALIAS_FIELDS if "same_architecture_as" in e else BASE_FIELDS
        errs += [f"{eid}: missing field {f!r}" for f in fields if f not in e]
        if "config" in e and "same_architecture_as" in e:
            errs.append(f"{eid}: an alias entry carries no config of its own (use config_overrides)")
        for f in ("source", "read_from"):
            if f in e and not _URL.match(str(e[f])):
                errs.append(f"{eid}: {f} is not an https address of the hub or GitHub: {e[f]!r}")
        if "config" in e and not isinstance(e["config"].get("model_type"), str):
            errs.append(f"{eid}: config has no model_type")
        if "published_params" in e and not (isinstance(e["published_params"], (int, float))
                                            and e["published_params"] > 0):
            errs.append(f"{eid}: published_params must be a positive number of billions")
        if e.get("published_scope", "all") not in SCOPES:
            errs.append(f"{eid}: published_scope must be one of {', '.join(SCOPES)}")
        if eid in by_id:
            errs.append(f"{eid}: duplicate id")
        by_id[eid] = e
        for name in [eid, *e.get("aliases", [])]:
            key = name.strip().lower()
            if key in seen and seen[key] != eid:
                errs.append(f"{eid}: name {name!r} is also claimed by {seen[key]}")
            elif key in seen:
                errs.append(f"{eid}: name {name!r} listed twice")
            seen[key] = eid
    for e in entries:
        if "same_architecture_as" not in e:
            continue
        chain, cur = [e["id"]], e
        while "same_architecture_as" in cur:
            nxt = by_id.get(cur["same_architecture_as"])
            if nxt is None:
                errs.append(f"{e['id']}: same_architecture_as {cur['same_architecture_as']!r} is not in the catalog")
                break
            if nxt["id"] in chain:
                errs.append(f"{e['id']}: alias loop {' -> '.join(chain + [nxt['id']])}")
                break
            chain.append(nxt["id"])
            cur = nxt
    return errs


def resolved_config(entry: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The config an entry stands for: its own, or its base's with its overrides applied (through chains)."""
    if "config" in entry:
        return dict(entry["config"])
    base = resolved_config(by_id[entry["same_architecture_as"]], by_id)
    return {**base, **entry["config_overrides"]}


def meta_count(cfg: dict[str, Any], scope: str = "all") -> int:
    """Parameters of the transformers model built from `cfg` on the meta device; with ``scope="text"`` the
    vision/audio towers and their projectors (module names in `_TOWERS`) are left out, for cards that count the
    language model only; with ``scope="non_embedding"`` the token embedding and output head (`_EMBEDDINGS`) are
    left out, for reports that count the blocks only.

    The class is the one ``architectures[0]`` names when transformers has it, else the Auto class for the
    config (image-text-to-text for configs with a vision tower, causal LM otherwise). Raises KeyError when
    transformers has no configuration class for ``model_type``."""
    import torch
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mt = cfg["model_type"]
    if mt not in CONFIG_MAPPING:
        raise KeyError(f"transformers {transformers.__version__} has no configuration class for {mt!r}")
    config = AutoConfig.for_model(mt, **{k: v for k, v in cfg.items() if k != "model_type"})
    archs = cfg.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    with torch.device("meta"):
        if cls is not None and hasattr(cls, "_from_config"):
            model = cls._from_config(config)
        elif "vision_config" in cfg:
            model = transformers.AutoModelForImageTextToText.from_config(config)
        else:
            model = transformers.AutoModelForCausalLM.from_config(config)
    if scope == "text":
        return sum(p.numel() for n, p in model.named_parameters()
                   if not any(part in _TOWERS for part in n.split(".")))
    if scope == "non_embedding":
        return sum(p.numel() for n, p in model.named_parameters(remove_duplicate=True)
                   if not any(part in _EMBEDDINGS for part in n.split(".")))
    return sum(p.numel() for p in model.parameters())


def check(entries: list[dict[str, Any]], only: set[str] | None = None) -> list[dict[str, Any]]:
    """One row per checked entry: id, kind, built count, published (billions), relative error, status."""
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    by_id = {e["id"]: e for e in entries}
    rows = []
    for e in entries:
        if only and e["id"] not in only:
            continue
        row: dict[str, Any] = {"id": e["id"], "alias_of": e.get("same_architecture_as")}
        t0 = time.perf_counter()
        root = e
        while "same_architecture_as" in root and root["same_architecture_as"] in by_id:
            root = by_id[root["same_architecture_as"]]
        if "verify" in e:
            row.update(built=None, status=e["verify"])
        elif "verify" in root:  # an alias of a type transformers does not ship is not built either
            row.update(built=None, status=f"alias of {root['id']}: {root['verify']}")
        else:
            try:
                row["built"] = meta_count(resolved_config(e, by_id), e.get("published_scope", "all"))
            except Exception as ex:  # a config transformers rejects is a finding, reported in the table
                row.update(built=None, status=f"build failed: {type(ex).__name__}: {str(ex)[:160]}")
        row["seconds"] = round(time.perf_counter() - t0, 2)
        pub = e.get("published_params")
        row["published"] = pub
        if row.get("built") is not None and pub:
            row["error"] = row["built"] / (pub * 1e9) - 1
            if e.get("published_nominal"):
                ok = abs(row["error"]) <= NOMINAL_TOLERANCE
                row["status"] = ("nominal size only" if ok else f"off by {row['error']:+.2%} (nominal size)")
            else:
                ok = abs(row["error"]) <= TOLERANCE
                row["status"] = "ok" if ok else f"off by {row['error']:+.2%}"
            if "published_exact" in e:
                row["exact"] = "=" if e["published_exact"] == row["built"] else f"{row['built'] - e['published_exact']:+,}"
        elif row.get("built") is not None:
            base = by_id.get(e.get("same_architecture_as") or "")
            row["status"] = "alias (built)" if base else "no published count"
        rows.append(row)
    return rows


def lf_groups(constants_text: str) -> list[list[str]]:
    """The hub ids (``DownloadSource.DEFAULT``) of each ``register_model_group(...)`` call in LLaMA-Factory's
    constants.py, one list per group, in file order."""
    groups = []
    for block in constants_text.split("register_model_group(")[1:]:
        ids = re.findall(r'DownloadSource\.DEFAULT:\s*"([^"]+)"', block.split("\nregister_model_group", 1)[0])
        if ids:
            groups.append(ids)
    return groups


def coverage(entries: list[dict[str, Any]], groups: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
    """(covered, missing): groups with at least one id that is a catalog name, and the others."""
    names = {n.lower() for e in entries for n in [e["id"], *e.get("aliases", [])]}
    covered = [g for g in groups if any(i.lower() in names for i in g)]
    missing = [g for g in groups if not any(i.lower() in names for i in g)]
    return covered, missing


def failed(row: dict[str, Any]) -> bool:
    s = row.get("status", "")
    return s.startswith("off by") or s.startswith("build failed") or s == "no published count"


def markdown(rows: list[dict[str, Any]], errs: list[str], entries: list[dict[str, Any]],
             groups: list[list[str]] | None = None) -> str:
    import torch
    import transformers

    n_alias = sum("same_architecture_as" in e for e in entries)
    names = sum(1 + len(e.get("aliases", [])) for e in entries)
    base_rows = [r for r in rows if not r["alias_of"]]
    ok = sum(r.get("status") == "ok" for r in base_rows)
    nominal = sum(r.get("status") == "nominal size only" for r in base_rows)
    unbuilt = [r for r in base_rows if r.get("built") is None]
    lines = [
        "# Bundled model catalog: transformers meta-device counts vs published counts",
        "",
        "Reproduce: `python scripts/catalog_check.py --markdown benchmarks/results/catalog_check.md "
        "[--lf-constants <LLaMA-Factory>/src/llamafactory/extras/constants.py]` "
        f"(transformers {transformers.__version__}, torch {torch.__version__}, CPU, meta device: no weights).",
        "",
        f"{len(entries)} entries ({len(entries) - n_alias} with their own config, {n_alias} alias entries), "
        f"{names} names in all. Base entries within {TOLERANCE:.0%} of the published count: {ok} of "
        f"{len(base_rows)}; with only a nominal size published (the size in the name, checked to "
        f"{NOMINAL_TOLERANCE:.0%}): {nominal}; not built by transformers: {len(unbuilt)}. Structural errors: "
        f"{len(errs)}.",
        "",
        "`built` is `sum(p.numel())` of the model transformers builds from the entry's config (tied weights "
        "counted once; entries whose card counts the language model only are built without their vision/audio "
        "towers, entries whose report leaves the embedding out without embedding and output head); `published` "
        "is the entry's `published_params` (billions); `error` is built/published - 1. "
        "Alias rows are built from their base's config plus their overrides and have no published count of "
        "their own.",
        "",
        "| id | alias of | built | published (B) | error | exact | status | s |",
        "|---|---|---:|---:|---:|---|---|---:|",
    ]
    for r in rows:
        built = "-" if r.get("built") is None else f"{r['built']:,}"
        err = f"{r['error']:+.3%}" if "error" in r else ""
        lines.append(f"| {r['id']} | {r['alias_of'] or ''} | {built} | {r.get('published') or ''} | {err} | "
                     f"{r.get('exact', '')} | {r.get('status', '')} | {r['seconds']} |")
    if groups is not None:
        covered, missing = coverage(entries, groups)
        lines += ["", "## Coverage of LLaMA-Factory's model groups", "",
                  f"{len(covered)} of {len(groups)} `register_model_group` groups in the LLaMA-Factory constants.py "
                  "passed with `--lf-constants` (here: the snapshot commit named in "
                  "shared/reference/llamafactory/SNAPSHOT_COMMIT.txt) "
                  "have at least one model id that is a catalog name. Groups with none (the first ids of each):", ""]
        lines += [f"- {', '.join(g[:4])}{', ...' if len(g) > 4 else ''}" for g in missing]
    if errs:
        lines += ["", "## Structural errors", ""] + [f"- {x}" for x in errs]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", type=Path, help="also write the table to this markdown file")
    ap.add_argument("--only", action="append", help="check only this id (repeatable)")
    ap.add_argument("--structure-only", action="store_true", help="skip the meta-device builds")
    ap.add_argument("--lf-constants", type=Path, help="LLaMA-Factory's extras/constants.py: report group coverage")
    args = ap.parse_args(argv)
    entries = load()
    errs = structural_errors(entries)
    for x in errs:
        print(f"structure: {x}", file=sys.stderr)
    groups = lf_groups(args.lf_constants.read_text(encoding="utf-8")) if args.lf_constants else None
    if groups is not None:
        covered, missing = coverage(entries, groups)
        print(f"LLaMA-Factory groups covered: {len(covered)} of {len(groups)}")
        for g in missing:
            print(f"  not covered: {', '.join(g[:4])}{', ...' if len(g) > 4 else ''}")
    if args.structure_only:
        return 1 if errs else 0
    t0 = time.time()
    rows = check(entries, set(args.only) if args.only else None)
    for r in rows:
        built = "-" if r.get("built") is None else f"{r['built']:,}"
        print(f"{r['id']:55s} {built:>20s} {str(r.get('published') or ''):>9s}  {r.get('status', '')}")
    bad = [r for r in rows if failed(r)]
    print(f"{len(rows)} checked, {len(bad)} failed, {len(errs)} structural errors, {time.time() - t0:.0f} s",
          file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(markdown(rows, errs, entries, groups), encoding="utf-8")
    return 1 if bad or errs else 0


if __name__ == "__main__":
    sys.exit(main())
