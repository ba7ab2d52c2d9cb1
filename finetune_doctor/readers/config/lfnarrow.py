"""The LLaMA-Factory releases a config can run on, read from the config's own keys when no version is given.

LLaMA-Factory parses a config with transformers' ``HfArgumentParser.parse_dict(..., allow_extra_keys=False)``
unless ``ALLOW_EXTRA_ARGS`` is set (hparams/parser.py ``_parse_args``; the "Some keys are not used by the
HfArgumentParser" stop), so a run that starts at all runs a release that declares every key of its config. Each key
the release catalogue (catalog/lf_releases.json, from the published wheels' argument dataclasses) declares in only
some releases is therefore evidence: the release of the run is in the intersection of those keys' ranges.

`narrow(release, values, kind)` (and `release_in_use`, which facts/config.py asks) applies that evidence to a `Release` whose version is not known (``known`` False):

* the intersection is narrower than the selection -> the same Release restricted to it, with `note` giving the
  reason ("the keys this config uses exist together only in 0.9.2-0.9.6.dev0: `trust_remote_code` (...)") and
  `evidence` the keys that bound it. facts/kinds.py records it as the `lf-version` assumption; keys valid over the
  whole narrowed range then get no `unverified-config-problem` warning (readers/config/keyschema.py).
* the intersection is empty -> the selection is kept and `conflict` names the keys whose ranges do not meet, each
  with its releases: rule keys-of-no-one-release reports them once, and keyschema.py gives those keys no warning of
  their own. A warning, not an error: the catalogue holds releases only, and a git build between two of them may
  declare both a key added and one removed at that step.

Keys that are not evidence: transformers' own TrainingArguments fields (LF re-declared ``overwrite_output_dir`` when
transformers 5 dropped it: older releases read it from transformers), Megatron-Bridge keys (mcore_adapter declared
them before LF did), and the chat/eval-only classes, which a training parser does not read in any release. A known
version, a v1 config (readers/config/lfv1.py judges those) and ``ALLOW_EXTRA_ARGS`` (extra keys are dropped, not
refused) are left as they are. Pure Python, no import of LLaMA-Factory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from finetune_doctor.readers.config.keyschema import extra_args_allowed, load_schema, spans
from finetune_doctor.readers.config.lfrelease import Release, load, parse_ranges, version_in_use

# classes whose keys do not tell a training config's release: see the module docstring
_NOT_EVIDENCE_CLASSES = ("TrainingArguments", "EvaluationArguments", "_KTransformersRuntimeArguments")


def declared(key: str) -> frozenset[int] | None:
    """The catalogue indices (into ``load()["versions"]``) of the releases declaring `key`, or None when `key` is
    not evidence of a release (not catalogued, or of a class the module docstring excludes)."""
    e = load()["keys"].get(key)
    if e is None or e.get("cls") in _NOT_EVIDENCE_CLASSES:
        return None
    entry = load_schema()["keys"].get(key) or {}
    if entry.get("origin") == "transformers" or entry.get("group") == "megatron_bridge":
        return None
    return parse_ranges(e["in"])


def release_in_use(flag: str | None, env_versions: dict[str, str] | None = None, env_path: str | None = None, *,
                   config: tuple[Mapping[str, Any], str | None]) -> Release:
    """lfrelease.py `version_in_use` (``--llamafactory``, then ``--env``, then the installed package), narrowed by
    `config`, the ``(values, kind)`` of the config judged, when none of those gives a version (`narrow`)."""
    return narrow(version_in_use(flag, env_versions, env_path), *config)  # type: ignore[return-value]


def narrow(release: Release | None, values: Mapping[str, Any], kind: str | None = "train") -> Release | None:
    """`release` restricted to the releases that declare every evidence key of `values` (the module docstring).

    `values` is the config's top-level mapping (readers/config/yamlcfg.py), `kind` the config kind
    (readers/config/lfkind.py; "-v1" kinds are not narrowed). Returns `release` itself when nothing narrows it,
    a copy with `versions`, `note` and `evidence` set when the keys narrow it, or a copy with `conflict` set when
    they meet in no release. Never raises."""
    if release is None or release.known or str(kind or "").endswith("-v1") or extra_args_allowed(None):
        return release
    allv = load()["versions"]
    sel = release.indices
    ranges: dict[str, frozenset[int]] = {}
    for raw in values:
        idx = declared(str(raw))
        if idx is not None and (idx & sel) != sel:
            ranges[str(raw)] = idx & sel
    if not ranges:
        return release
    common = frozenset.intersection(*ranges.values())
    base = release.note or "not given: no --llamafactory, no --env, llamafactory not installed here"
    if not common:
        clash = tuple((k, spans([allv[i] for i in sorted(ranges[k])])) for k in _conflicting(ranges))
        return replace(release, conflict=clash, note=f"{base}; the keys this config uses exist together in no "
                                                     f"catalogued release: {_grouped(clash)}")
    lo, hi = min(common), max(common)
    bounds = [k for k, r in ranges.items() if min(r) == lo and lo > min(sel) or max(r) == hi and hi < max(sel)]
    bounds = bounds or list(ranges)   # a range with a hole narrows from inside
    evidence = tuple((k, spans([allv[i] for i in sorted(ranges[k])])) for k in bounds)
    versions = tuple(allv[i] for i in sorted(common))
    why = (f"the keys this config uses exist together only in LLaMA-Factory {spans(list(versions))}: "
           + _grouped(evidence))
    return replace(release, versions=versions, note=f"{base}; {why}", evidence=evidence)


def old_evidence(release: Release | None) -> list[tuple[str, str, str]]:
    """The keys that narrowed an unknown `release` (`narrow`, its `evidence`) to releases older than the newest
    catalogued one because later releases dropped them: ``(key, the releases declaring it, the first release that
    refuses it)``, e.g. ``("split", "0.8.0-0.8.2", "0.8.3")``. Empty for a known release, one not narrowed, or keys
    that only bound the range from below (added in a release: a newer config, not an older one). Trial 18
    (LlamaFactory#5843): `split` narrowed an eval config to 0.8.0-0.8.2 and lint said "No findings" for a run on
    0.9.1.dev0, whose parser refused the key."""
    if release is None or release.known or not release.evidence:
        return []
    allv = load()["versions"]
    out = []
    for key, span in release.evidence:
        idx = declared(key)
        if idx and max(idx) < len(allv) - 1:
            out.append((key, span, allv[max(idx) + 1]))
    return out


def bridging_build(keys: list[str]) -> tuple[str, str] | None:
    """(release before, release after) when a development build between two consecutive catalogued versions may
    declare every one of `keys` (each key is declared by one of the two: a key added in the later release or
    removed after the earlier one may be in a git install between them), else None: then no build of
    LLaMA-Factory, released or not, declares them all, as a key's declared range is one stretch of its history.
    The versions are those of catalog/lf_releases.json (LF's published releases and the snapshot, main)."""
    allv = load()["versions"]
    sets = [declared(k) for k in keys]
    if not sets or any(s is None for s in sets):
        return None
    for i in range(len(allv) - 1):
        if all(i in s or i + 1 in s for s in sets if s is not None):
            return allv[i], allv[i + 1]
    return None


def _conflicting(ranges: Mapping[str, frozenset[int]]) -> list[str]:
    """The keys of `ranges` that share no release with some other key of it, in config order; every key when no
    two are disjoint (ranges with holes can meet pairwise yet not all together)."""
    keys = list(ranges)
    out = [k for k in keys if any(not (ranges[k] & ranges[o]) for o in keys if o != k)]
    return out or keys


def _grouped(pairs: tuple[tuple[str, str], ...], most: int = 3) -> str:
    """``(key, releases)`` pairs as one clause per range, at most `most` keys named in each:
    "`trust_remote_code`, `use_apollo` and 5 more (0.9.2-0.9.6.dev0)"."""
    by: dict[str, list[str]] = {}
    for k, s in pairs:
        by.setdefault(s, []).append(f"`{k}`")
    out = []
    for s, ks in by.items():
        named = ", ".join(ks[:most]) + (f" and {len(ks) - most} more" if len(ks) > most else "")
        out.append(f"{named} ({s})")
    return "; ".join(out)
